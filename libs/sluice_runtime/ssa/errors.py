"""How an apply fails: typed errors naming every refused object, and the one
concurrent gather that collects them.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from sluice_runtime.describing import explain
from sluice_runtime.kube.errors import ApiError, Conflict, Invalid, KubeError, is_transient
from sluice_runtime.ssa.changeset import ChangeSet

T = TypeVar("T")
R = TypeVar("R")


class ApplyError(KubeError):
    """The set could not be applied (or pruned); the message names the objects."""


class ValidationFailed(ApplyError):
    """The set itself is malformed: missing identity fields, duplicates."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("invalid objects: " + "; ".join(errors))


class ApplyFailed(ApplyError):
    """The API refused an object (or it never became ready).

    `subject` and `message` describe the first failure; `failures` holds all
    of them (the first included) and `changeset` what was done before the
    error, so the caller can still record it.
    """

    def __init__(
        self,
        subject: str,
        message: str,
        *,
        status: int | None = None,
        hint: str = "",
        transient: bool = False,
        dry_run: bool = False,
        failures: Sequence[ApplyFailed] = (),
        changeset: ChangeSet | None = None,
    ) -> None:
        self.subject = subject
        self.message = message
        self.status = status
        self.hint = hint
        """What to do about it (from the kind of refusal), said once for the set."""
        self.transient = transient
        """The API failed, not the object (unreachable, overloaded): retry soon."""
        self.dry_run = dry_run
        """True when a dry-run refused the set: nothing of it was applied, except
        the earlier stages in `changeset` (Namespaces and CRDs of the set, which
        must exist before the objects in them can be dry-run)."""
        self.failures: list[ApplyFailed] = list(failures) or [self]
        self.changeset = changeset or ChangeSet()
        super().__init__()

    def __str__(self) -> str:
        lines = [f"{f.subject}: {f.message}" for f in self.failures]
        hints = {f.hint for f in self.failures}
        if len(hints) == 1 and "" not in hints:
            # Every object was refused alike: say what to do once, at the end.
            return "\n".join(lines) + f"; {hints.pop()}"
        return "\n".join(
            f"{line}; {f.hint}" if f.hint else line
            for line, f in zip(lines, self.failures, strict=True)
        )

    @property
    def forbidden(self) -> bool:
        return any(f.status == 403 for f in self.failures)

    @classmethod
    def of(cls, subject: str, what: str | None, error: BaseException) -> ApplyFailed:
        """`error` against `subject`; `what` names the operation when the caller's
        own message (dry-run failed, apply failed, prune failed) does not."""
        message, hint = explain(error)
        return cls(
            subject,
            f"{what}: {message}" if what else message,
            status=error.status if isinstance(error, ApiError) else None,
            hint=hint,
            transient=is_transient(error),
        )

    @classmethod
    def combine(
        cls, failures: Sequence[ApplyFailed], changeset: ChangeSet, *, dry_run: bool = False
    ) -> ApplyFailed:
        first = failures[0]
        return cls(
            first.subject,
            first.message,
            status=first.status,
            # One object the API refused is enough to wait for the retry interval.
            transient=all(f.transient for f in failures),
            dry_run=dry_run,
            failures=failures,
            changeset=changeset,
        )


async def gather(
    items: Sequence[T], one: Callable[[T], Awaitable[R]], *, limit: asyncio.Semaphore
) -> tuple[list[tuple[T, R]], list[ApplyFailed]]:
    """Run `one` over `items`, at most `limit` at a time, and keep going past a
    refusal: every object's answer is wanted, not only the first failure's.
    Returns the successes (with their item, in order) and the failures."""

    async def bounded(item: T) -> R | ApplyFailed:
        async with limit:
            try:
                return await one(item)
            except ApplyFailed as error:
                return error

    results = await asyncio.gather(*(bounded(item) for item in items))
    done: list[tuple[T, R]] = []
    failures: list[ApplyFailed] = []
    for item, result in zip(items, results, strict=True):
        if isinstance(result, ApplyFailed):
            failures.append(result)
        else:
            done.append((item, result))
    return done, failures


# How the API (built-in validation, CEL rules, admission webhooks) says a
# change can only be made by re-creating the object.
_IMMUTABLE = re.compile(
    r"\bimmutable\b"  # "field is immutable", "spec is immutable after creation", CEL
    r"|may not change fields other than"  # Pod spec
    r"|updates to \S+ spec for fields other than",  # StatefulSet spec
    re.IGNORECASE,
)
_QUOTED = re.compile(r'"[^"]*"')


def is_immutable_error(error: BaseException) -> bool:
    """True when re-creating the object is the only way to make the change.

    Flux (like `kubectl replace --force`) treats every 409 and 422 as
    immutable; a plain schema error would then delete a live object and
    fail to create it again. We need the API's own words for it: a 422/409
    whose message says immutable, or any refusal (a webhook's 400/403) that
    says so.
    """
    if not isinstance(error, ApiError):
        return False
    if isinstance(error, Invalid | Conflict) or error.status in (400, 403):
        # Quoted parts are names and values ('ConfigMap "immutable-settings"'),
        # never the API's verdict.
        return bool(_IMMUTABLE.search(_QUOTED.sub('""', str(error))))
    return False
