"""What a reconcile is made of: named steps over one context object."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import structlog

from sluice_api.meta import ConditionType, Reason, Resource
from sluice_runtime.conditions import Conditions
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.recording import ObjectRecorder

M = TypeVar("M", bound=Resource[Any, Any])
"""The sluice_api model of the kind a context reconciles."""

Publish = Callable[[], Awaitable[None]]
"""Writes the status as it stands, mid-reconcile (the runner's status patcher)."""


@dataclass(frozen=True, slots=True)
class Result:
    """A step's request to end the pipeline early (successfully).

    Returning None from a step means "go on with the next step".
    """

    requeue_after: float | None = None


def done(*, requeue_after: float | None = None) -> Result:
    return Result(requeue_after=requeue_after)


@dataclass(kw_only=True)
class ReconcileContext(Generic[M]):
    """What every step can use. Controllers subclass it for their kind
    (`ReconcileContext[GitRepository]`) with their own fields (`commit`,
    `artifact`, ...) that earlier steps fill for later ones."""

    obj: M
    """The object as parsed into its sluice_api model; steps edit `obj.status`."""
    raw: JSON
    """The object as cached, for fields the model does not know."""
    client: KubeClient
    conditions: Conditions
    log: structlog.typing.FilteringBoundLogger
    events: ObjectRecorder
    publish: Publish
    """Writes the status as it stands; the runner's, given at construction."""
    ready_reason: str = Reason.SUCCEEDED
    ready_message: str = ""
    """What Ready says when every step succeeds; steps set it."""
    event_metadata: dict[str, str] = field(default_factory=dict)
    """Metadata added to every event of this reconcile (e.g. the revision)."""
    success_announced: bool = False
    """A step's own event already told this reconcile's success (a source's
    NewArtifact), so Ready turning True needs no event of its own: Flux sends
    one event there, and each costs the API server a request."""
    cleanup: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    """Where steps register what must be undone after the last step (work dirs)."""

    async def progress(self, message: str, *, failed: tuple[str, str] | None = None) -> None:
        """Show Reconciling=True with `message` now, before a long step.

        Status is otherwise written once, at the end; a health wait of
        minutes should not leave the object showing the previous reconcile.
        A new attempt is under way, so the previous one's Stalled goes. Ready
        is Unknown, or, while the step undoes a failure (a rollback), False
        with the failure's `(reason, message)`.
        """
        self.conditions.mark_true(ConditionType.RECONCILING, Reason.PROGRESSING, message)
        if failed is None:
            self.conditions.mark_unknown(ConditionType.READY, Reason.PROGRESSING, message)
        else:
            self.conditions.mark_false(ConditionType.READY, *failed)
        self.conditions.delete(ConditionType.STALLED)
        await self.publish()


C = TypeVar("C", bound=ReconcileContext[Any])
C_co = TypeVar("C_co", bound=ReconcileContext[Any], covariant=True)
# A step written for a base context (a shared source step) fits any
# pipeline whose context extends that base.
C_contra = TypeVar("C_contra", bound=ReconcileContext[Any], contravariant=True)
StepFn = Callable[[C], Awaitable[Result | None]]


class ContextFactory(Protocol[C_co]):
    """Builds a controller's context from the fields every context has: the
    context class itself, or a `functools.partial` of it binding the
    controller's own collaborators (`services=...`)."""

    def __call__(
        self,
        *,
        obj: Any,
        raw: JSON,
        client: KubeClient,
        conditions: Conditions,
        log: structlog.typing.FilteringBoundLogger,
        events: ObjectRecorder,
        publish: Publish,
        ready_reason: str,
    ) -> C_co: ...


@dataclass(frozen=True)
class Step(Generic[C_contra]):
    fn: Callable[[C_contra], Awaitable[Result | None]]
    name: str
    conditions: tuple[str, ...]
    """Conditions this step owns: cleared when it runs, set when it raises."""

    async def __call__(self, ctx: C_contra) -> Result | None:
        return await self.fn(ctx)


def step(*conditions: str) -> Callable[[StepFn[C]], Step[C]]:
    """Declare a step and the conditions it owns.

    @step(SourceCondition.FETCH_FAILED)
    async def reconcile_source(ctx: GitRepositoryContext) -> Result | None: ...
    """

    def wrap(fn: StepFn[C]) -> Step[C]:
        return Step(fn=fn, name=fn.__name__, conditions=tuple(str(c) for c in conditions))

    return wrap
