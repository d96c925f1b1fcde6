"""Typed step errors: a step says what went wrong, the runner decides what it means.

Each error carries the condition it puts on the object, so steps never place
conditions by hand next to their returns (Flux's weakness) and the runner can
clear a step's conditions when that step next succeeds.
"""

from __future__ import annotations


class StepError(Exception):
    """A failure that retrying may fix: Ready=False, retried with backoff.

    `condition` is the (usually negative-polarity) condition this failure
    sets, e.g. FetchFailed; None means it only shows on Ready.
    `requeue_after` replaces the exponential backoff when the spec says how
    long to wait (a Kustomization's retryInterval).
    """

    def __init__(
        self,
        reason: str,
        message: str,
        *,
        condition: str | None = None,
        requeue_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.condition = condition
        self.requeue_after = requeue_after

    def __str__(self) -> str:
        return self.message


class Stalling(StepError):
    """A failure retrying cannot fix (invalid spec, bad URL): Stalled=True, no retry
    until the object changes."""


class Waiting(Exception):
    """Not a failure: the object waits for something else (a dependency, an
    artifact, a gate) and is looked at again after `requeue_after` seconds or
    when what it waits for changes.

    `condition`/`status` optionally set a condition of its own, e.g.
    Approved=False for a closed gate; Ready shows `reason` and `message`.
    `in_progress` says the object's own work goes on (a health wait looked at
    again soon, without holding a worker meanwhile): Ready is Unknown rather
    than False, and the look again is queued ahead of first reconciles.
    `publish=False` leaves the status unwritten: the reconcile that continues
    the work writes it (the first seconds of a health wait, which would
    otherwise cost a status patch per app for a rollout done a moment later).
    """

    def __init__(
        self,
        reason: str,
        message: str,
        *,
        requeue_after: float | None,
        condition: str | None = None,
        status: str = "False",
        in_progress: bool = False,
        publish: bool = True,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.requeue_after = requeue_after
        self.condition = condition
        self.status = status
        self.in_progress = in_progress
        self.publish = publish

    def __str__(self) -> str:
        return self.message
