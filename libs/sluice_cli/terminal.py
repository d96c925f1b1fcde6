"""What every everyday verb shares: the terminal, the connection, the way it fails.

Output is drawn with rich, which colours and animates only a terminal: piped
into a file or another program, the same tables come out as plain text
without trailing blanks, and progress lines are printed once each instead of
being redrawn. Results go to stdout; progress and errors to stderr, so that
`sluice get ks -o json | jq` sees only JSON.

Exit codes scripts can rely on: 0 done (for `diff`: no differences), 1 the
cluster answered but not as hoped (not found, not Ready, a failed or timed-out
reconcile, a failed check, differences found), 2 the verb could not run (usage,
an unreachable API server, an unusable kubeconfig, a failed build).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sluice_runtime.kube.errors import KubeError, NotFound, one_line

if TYPE_CHECKING:
    from sluice_runtime.kube.client import KubeClient

# The API models, aiohttp and the Kubernetes client are imported where they are
# used: `sluice version --client` needs none of them (issue 40).

OK = 0
"""The verb did what was asked (for `diff`: no differences)."""
FAILED = 1
"""The cluster answered, but not as hoped: an object not found or not Ready, a
reconcile that failed or timed out, a check that did not pass, differences."""
ERROR = 2
"""The verb could not run: a usage error (as argparse), an unreachable API server,
an unusable kubeconfig, a build that failed."""

DEFAULT_NAMESPACE = "flux-system"
"""Where objects live unless told otherwise, as with the flux CLI."""

_PLAIN_WIDTH = 1 << 16
"""Columns when stdout is not a terminal: lines are never wrapped for a pipe."""


def console(file: TextIO | None = None) -> Console:
    """A console on stdout (or `file`); colour and animation only on a terminal."""
    stream = file or sys.stdout
    terminal = stream.isatty()
    return Console(
        file=stream,
        width=None if terminal else _PLAIN_WIDTH,
        color_system="auto" if terminal else None,
        force_terminal=terminal,
        highlight=False,
        emoji=False,
        markup=False,
        soft_wrap=not terminal,
    )


def error_console() -> Console:
    return console(sys.stderr)


def print_table(
    out: Console,
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    show_header: bool = True,
) -> None:
    """Columns like kubectl's: left-aligned, three spaces apart, no trailing blanks."""
    table = Table(
        box=None,
        show_header=show_header,
        show_edge=False,
        pad_edge=False,
        padding=(0, 3, 0, 0),
        header_style="bold" if out.is_terminal else "",
    )
    for index, name in enumerate(header):
        last = index == len(header) - 1
        table.add_column(name, no_wrap=not last, overflow="fold" if last else "ignore")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    with out.capture() as captured:
        out.print(table)
    text = "\n".join(line.rstrip() for line in captured.get().splitlines())
    out.file.write(text + "\n")
    out.file.flush()


class Progress:
    """A live status line on a terminal; one line per change of step elsewhere."""

    def __init__(self, err: Console) -> None:
        self.err = err
        self._status: Any = None
        self._last = ""

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def step(self, message: str) -> None:
        """A finished step: `► annotating Kustomization flux-system/apps`."""
        self.stop()
        self.err.print(message)
        self._last = message

    def update(self, message: str) -> None:
        """The step in progress, redrawn in place on a terminal, printed once otherwise."""
        if self.err.is_terminal:
            if self._status is None:
                self._status = self.err.status(message)
                self._status.start()
            else:
                self._status.update(message)
        elif message != self._last:
            self.err.print(message)
        self._last = message

    def stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


@dataclass
class Failure(Exception):
    """A verb's failure: one line for the person, and the exit code for the script."""

    message: str
    code: int = FAILED

    def __str__(self) -> str:
        return self.message


def run_verb(verb: str, body: Any, *, streaming: bool = False) -> int:
    """Run `body()`, turning the errors a user can meet into one line and an exit code.

    `streaming` verbs (`get --watch`, `logs --follow`) end with Ctrl-C: that is
    their normal end, exit 0, not an interruption.
    """
    try:
        return int(body())
    except Failure as failure:
        return fail(verb, failure.message, failure.code)
    except NotFound as error:
        return fail(verb, one_line(error), FAILED)
    except (KubeError, OSError) as error:
        return fail(verb, one_line(error), ERROR)
    except KeyboardInterrupt:
        return OK if streaming else fail(verb, "interrupted", ERROR)


def fail(verb: str, message: str, code: int) -> int:
    print(f"✗ sluice {verb}: {message}", file=sys.stderr)
    return code


@contextlib.asynccontextmanager
async def connected(
    kubeconfig: str | None, context: str | None = None
) -> AsyncIterator[KubeClient]:
    from sluice_runtime.kube.client import KubeClient

    client = await KubeClient.connect(kubeconfig=kubeconfig, context=context)
    try:
        yield client
    finally:
        await client.close()


def add_cluster_flags(parser: Any, *, all_namespaces: bool = False) -> None:
    """`--kubeconfig`, `--context`, `-n/--namespace` (and `-A`), as every flux verb has."""
    parser.add_argument("--kubeconfig", help="path to the kubeconfig file")
    parser.add_argument("--context", help="the kubeconfig context to use")
    parser.add_argument(
        "-n",
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help=f"the namespace scope for this operation (default {DEFAULT_NAMESPACE!r})",
    )
    if all_namespaces:
        parser.add_argument(
            "-A",
            "--all-namespaces",
            action="store_true",
            help="list the requested object(s) across all namespaces",
        )


def rfc3339_now() -> str:
    """The time as Flux's CLI writes requestedAt: RFC 3339 with nanoseconds' precision."""
    from sluice_api.meta import format_time

    return format_time(datetime.now(UTC), fraction="micro").replace("Z", "000Z")


def human_duration(seconds: float) -> str:
    """kubectl's short ages: 45s, 3m12s, 5h3m, 2d4h, 40d."""
    seconds = max(int(seconds), 0)
    if seconds < 120:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 10:
        return f"{minutes}m{seconds}s" if seconds else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 8:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days, hours = divmod(hours, 24)
    if days < 8:
        return f"{days}d{hours}h" if hours else f"{days}d"
    return f"{days}d"


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    from sluice_api.meta import parse_time

    try:
        return parse_time(value)
    except ValueError:
        return None
