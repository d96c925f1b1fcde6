"""Named points of a reconcile where a test can make the process die, deterministically.

A kill at a random moment reaches the narrow windows of a reconcile (between
the dry-run and the first apply, between two deletes of a prune, between an
artifact's bytes and its rename) only by chance. A failpoint names such a
window in the code, as etcd's gofail and TiKV's fail-rs do, so a test can
say "die exactly here" and then prove what a restart makes of it.

Armed only by `SLUICE_FAILPOINTS`, read once when a controller process
starts (`arm_from_env`, called by `app.main`):

    SLUICE_FAILPOINTS="ssa.apply.after-dry-run=kill;storage.artifact.mid-write=kill@2"

`;` (or `,`) separates points; `kill` SIGKILLs the process at the point's
first hit, `kill@N` at its Nth, after one line on stderr naming the point, so
a test can tell this death from any other. A name not in `POINTS` fails the
process at start: a typo must not silently disarm a test.

Unarmed, `hit` is one dict lookup. A point whose condition costs more (is
there anything to apply?) asks `armed` first.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

ENV = "SLUICE_FAILPOINTS"

POINTS: Mapping[str, str] = {
    "ssa.apply.after-dry-run": "the whole set dry-run, something to change, nothing applied yet",
    "ssa.apply.mid-apply": "one object applied (the server answered), others maybe not yet",
    "ssa.prune.mid-prune": "one object of a prune deleted, others maybe not yet",
    "kustomize.status.before-patch": (
        "a new revision applied and pruned, its status (lastAppliedRevision) not yet written"
    ),
    "storage.artifact.mid-write": "an artifact's bytes in its temporary file, not yet renamed",
    "source.status.before-patch": (
        "a new artifact stored and linked as latest, the source's status not yet written"
    ),
}
"""Every point the code hits, with what has and has not happened when it fires."""


@dataclass
class Trigger:
    """What an armed point does: SIGKILL the process at its `at`-th hit."""

    at: int = 1
    hits: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def fire(self, name: str) -> None:
        # Points are hit from the event loop and from worker threads (artifact writes).
        with self._lock:
            self.hits += 1
            if self.hits != self.at:
                return
        # One unbuffered write, so the line is out before the signal lands.
        os.write(2, f"sluice failpoint {name}: kill (hit {self.hits})\n".encode())
        os.kill(os.getpid(), signal.SIGKILL)


_armed: dict[str, Trigger] = {}


class FailpointSpecError(ValueError):
    """`SLUICE_FAILPOINTS` names an unknown point or an action this module has not."""


def parse(text: str) -> dict[str, Trigger]:
    """`name=kill[@N]` terms separated by `;` or `,`; raises FailpointSpecError. Pure."""
    armed: dict[str, Trigger] = {}
    for term in text.replace(",", ";").split(";"):
        term = term.strip()
        if not term:
            continue
        name, sep, action = (part.strip() for part in term.partition("="))
        if not sep or not name or not action:
            raise FailpointSpecError(f"{ENV}: {term!r} is not name=action")
        if name not in POINTS:
            raise FailpointSpecError(
                f"{ENV}: unknown failpoint {name!r}; known: {', '.join(sorted(POINTS))}"
            )
        if name in armed:
            raise FailpointSpecError(f"{ENV}: failpoint {name!r} is armed twice")
        verb, at_sep, count = action.partition("@")
        if verb != "kill":
            raise FailpointSpecError(f"{ENV}: {name}: unknown action {verb!r} (only 'kill')")
        if at_sep and not (count.isdigit() and int(count) >= 1):
            raise FailpointSpecError(f"{ENV}: {name}: 'kill@N' needs a whole N >= 1, not {count!r}")
        armed[name] = Trigger(at=int(count) if at_sep else 1)
    return armed


def arm_from_env(environ: Mapping[str, str] = os.environ) -> list[str]:
    """Arm what `SLUICE_FAILPOINTS` names, replacing what was armed; the names armed."""
    armed = parse(environ.get(ENV, ""))
    _armed.clear()
    _armed.update(armed)
    return sorted(armed)


def armed(name: str) -> bool:
    return name in _armed


def hit(name: str) -> None:
    """The process reached `name`: nothing, unless a test armed it."""
    trigger = _armed.get(name)
    if trigger is not None:
        trigger.fire(name)
