"""How a reconcile's ending becomes Ready, Reconciling and Stalled, in kstatus form.

Pure: the runner turns what the steps raised into an `Ending`, and
`summarize` writes the three summary conditions from it and from the
conditions the steps own (a negative-polarity one that is True, like
FetchFailed, keeps Ready False even when every step returned). Kept apart
from the runner so the rules sit in one table test rather than behind an API
server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from sluice_api.meta import ConditionType, Reason, format_duration
from sluice_runtime.conditions import Conditions, Status
from sluice_runtime.kube.errors import ApiUnavailable, Conflict
from sluice_runtime.reconciling.errors import Stalling, StepError, Waiting

EndingKind = Literal["success", "stalled", "error", "waiting"]


@dataclass(frozen=True, slots=True)
class Ending:
    """How the steps ended: what Ready says, and when to look again."""

    kind: EndingKind
    reason: str
    message: str
    requeue_after: float | None = None
    """For an error: the spec's retry interval (None: exponential backoff); for
    waiting: when to look again; for success: a step's early requeue."""
    in_progress: bool = False
    """Waiting on the object's own work (Ready Unknown), not on something else."""
    publish: bool = True
    """False: the status is not written; the reconcile that continues the work writes it."""


def ending_of(error: BaseException) -> Ending:
    """The ending a step's exception means. Anything untyped is a bug, not a
    user error: retried with backoff, its type named in Ready."""
    if isinstance(error, Stalling):
        return Ending("stalled", error.reason, error.message)
    if isinstance(error, StepError):
        return Ending("error", error.reason, error.message, error.requeue_after)
    if isinstance(error, Waiting):
        return Ending(
            "waiting",
            error.reason,
            error.message,
            error.requeue_after,
            in_progress=error.in_progress,
            publish=error.publish,
        )
    if isinstance(error, (ApiUnavailable, Conflict)):
        # Transient by nature: the API server restarted, or a write raced.
        return Ending("error", Reason.PROGRESSING_WITH_RETRY, str(error))
    message = f"internal error: {type(error).__name__}: {error}"
    return Ending("error", Reason.RECONCILIATION_FAILED, message)


def failed_status(condition: str, negative_conditions: Sequence[str]) -> Status:
    """The status of the condition a failing step owns: negative-polarity ones
    (FetchFailed) are True when things are bad; positive ones (Healthy,
    ArtifactInStorage) are False."""
    return "True" if condition in negative_conditions else "False"


def summarize(
    conditions: Conditions, ending: Ending, *, negative_conditions: Sequence[str]
) -> None:
    """Set Ready, Reconciling and Stalled for `ending`."""
    if ending.kind == "stalled":
        conditions.mark_true(ConditionType.STALLED, ending.reason, ending.message)
        conditions.mark_false(ConditionType.READY, ending.reason, ending.message)
        conditions.delete(ConditionType.RECONCILING)
    elif ending.kind == "error":
        conditions.mark_false(ConditionType.READY, ending.reason, ending.message)
        # Ready (and the step's own condition) carry the error; Reconciling says
        # when it is tried again rather than repeating it a third time.
        when = (
            f"in {format_duration(timedelta(seconds=ending.requeue_after))}"
            if ending.requeue_after is not None
            else "with backoff"
        )
        conditions.mark_true(
            ConditionType.RECONCILING,
            Reason.PROGRESSING_WITH_RETRY,
            f"reconciliation failed, retrying {when}",
        )
        conditions.delete(ConditionType.STALLED)
    elif ending.kind == "waiting":
        ready: Status = "Unknown" if ending.in_progress else "False"
        conditions.set(ConditionType.READY, ready, ending.reason, ending.message)
        conditions.mark_true(ConditionType.RECONCILING, Reason.PROGRESSING, ending.message)
        conditions.delete(ConditionType.STALLED)
    else:
        failing = conditions.first_true(negative_conditions)
        if failing is not None:
            conditions.mark_false(ConditionType.READY, failing.reason, failing.message)
        else:
            conditions.mark_true(ConditionType.READY, ending.reason, ending.message)
        conditions.delete(ConditionType.RECONCILING, ConditionType.STALLED)
