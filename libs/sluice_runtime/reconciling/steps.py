"""What a reconcile is made of: named steps over one context object."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import structlog

from sluice_runtime.conditions import Conditions
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.recording import ObjectRecorder


@dataclass(frozen=True, slots=True)
class Result:
    """A step's request to end the pipeline early (successfully).

    Returning None from a step means "go on with the next step".
    """

    requeue_after: float | None = None


def done(*, requeue_after: float | None = None) -> Result:
    return Result(requeue_after=requeue_after)


@dataclass(kw_only=True)
class ReconcileContext:
    """What every step can use. Controllers subclass it with their own fields
    (`commit`, `artifact`, ...) that earlier steps fill for later ones."""

    obj: Any
    """The object as parsed into its sluice_api model; steps edit `obj.status`."""
    raw: JSON
    """The object as cached, for fields the model does not know."""
    client: KubeClient
    conditions: Conditions
    log: structlog.typing.FilteringBoundLogger
    events: ObjectRecorder
    ready_reason: str = "Succeeded"
    ready_message: str = ""
    """What Ready says when every step succeeds; steps set it."""
    event_metadata: dict[str, str] = field(default_factory=dict)
    """Metadata added to every event of this reconcile (e.g. the revision)."""
    cleanup: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    """Where steps register what must be undone after the last step (work dirs)."""
    publish: Callable[[], Awaitable[None]] | None = None
    """Set by the runner: writes the status as it stands, mid-reconcile."""

    async def progress(self, message: str) -> None:
        """Show Reconciling=True with `message` now, before a long step.

        Status is otherwise written once, at the end; a health wait of
        minutes should not leave the object showing the previous reconcile.
        """
        self.conditions.mark_true("Reconciling", "Progressing", message)
        self.conditions.mark_unknown("Ready", "Progressing", message)
        if self.publish is not None:
            await self.publish()

    @property
    def status(self) -> Any:
        return self.obj.status


C = TypeVar("C", bound=ReconcileContext)
# A step written for a base context (a shared source step) fits any
# pipeline whose context extends that base.
C_contra = TypeVar("C_contra", bound=ReconcileContext, contravariant=True)
StepFn = Callable[[C], Awaitable[Result | None]]


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


def context_fields(ctx: ReconcileContext) -> dict[str, Any]:
    """The base fields of a context, for building a subclass from it."""
    return {f.name: getattr(ctx, f.name) for f in dataclasses.fields(ReconcileContext)}
