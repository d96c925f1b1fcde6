"""The step runner: one reconcile of one object, top to bottom.

Everything every controller would otherwise repeat lives here, once:
parsing the cached object into its model, the finalizer, `suspend`,
`reconcile.fluxcd.io/requestedAt`, running the steps in order (each in its
own trace span), turning what they raised into conditions, summarizing
Ready/Reconciling/Stalled in kstatus form (`summarizing.py`, pure), writing
status through the reconcile's one `StatusPatcher` (`patching.py`; nothing
when nothing changed), an event when Ready changes, and metrics. The steps
themselves only do their work.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal

import pydantic
import structlog
from opentelemetry.trace import Status, StatusCode

from sluice_api.meta import (
    FINALIZER,
    RECONCILE_REQUESTED_AT_ANNOTATION,
    Condition,
    Reason,
    Resource,
    parse_duration,
    parse_time,
)
from sluice_runtime.conditions import Conditions, ready_state
from sluice_runtime.kube.attributing import attributed
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import ApiUnavailable, Conflict, KubeError, NotFound
from sluice_runtime.kube.patching import merge_patch, remove_finalizer_ops
from sluice_runtime.kube.resources import ResourceType
from sluice_runtime.observing import reacting, tracing
from sluice_runtime.observing.metrics import ControllerMetrics
from sluice_runtime.reconciling import finalizing
from sluice_runtime.reconciling.errors import StepError, Waiting
from sluice_runtime.reconciling.patching import StatusPatcher
from sluice_runtime.reconciling.steps import C, ContextFactory, ReconcileContext, Step
from sluice_runtime.reconciling.summarizing import Ending, ending_of, failed_status, summarize
from sluice_runtime.recording import EventRecorder, InvolvedObject, ObjectRecorder

log = structlog.get_logger(__name__)

ResultKind = Literal["success", "error", "stalled", "waiting", "suspended", "deleted", "gone"]
INVALID_SPEC = "InvalidSpec"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the worker should do with the key after a reconcile."""

    result: ResultKind
    requeue_after: float | None = None
    backoff: bool = False
    """Requeue with the key's exponential backoff (a retryable failure)."""
    follow_up: bool = False
    """The requeue continues the object's own work (a health wait): it is queued
    ahead of first reconciles."""
    publish: bool = True
    """False: the steps left the status unwritten for the reconcile that continues."""


@dataclass
class Reconciler(Generic[C]):
    """A controller's reconcile, declared: its kind, its steps, its context."""

    model: type[Resource[Any, Any]]
    """The sluice_api model class of the kind reconciled."""
    steps: Sequence[Step[C]]
    context: ContextFactory[C]
    """Builds the step context from the base fields (the context class, or a
    `functools.partial` of it)."""
    negative_conditions: Sequence[str] = ()
    """Abnormal-true conditions, in priority order; any that is True makes Ready False."""
    finalize: Callable[[C], Awaitable[None]] | None = None
    """Cleanup when the object is deleted (artifacts, applied objects)."""
    uses_finalizer: bool = True
    finalizer_beside_steps: bool = False
    """Add the finalizer while the steps run rather than before them, publishing
    nothing until it is in place: only for a kind whose steps change nothing
    outside the object that `finalize` does not undo (a source's storage)."""
    trigger_annotations: Sequence[str] = ()
    """Annotations whose change means "reconcile now", besides requestedAt
    (a Gate's open/close requests)."""
    success_reason: str = Reason.SUCCEEDED
    default_interval: float = 600.0
    quiet_first_wait: float = 5.0
    """Seconds after an object's creation during which a wait is not published
    while it has never had a status (see `quiet_wait_left`); 0 publishes at once."""

    @property
    def rt(self) -> ResourceType:
        return ResourceType.of_model(self.model)


class Runner(Generic[C]):
    def __init__(
        self,
        reconciler: Reconciler[C],
        *,
        client: KubeClient,
        recorder: EventRecorder | None,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.reconciler = reconciler
        self.client = client
        self.recorder = recorder
        self.metrics = metrics
        self.rt = reconciler.rt

    async def reconcile(self, raw: JSON | None) -> Outcome:
        """Reconcile the cached object `raw` (None: it is gone; nothing to do)."""
        if raw is None:
            return Outcome("gone")
        meta = raw.get("metadata") or {}
        started = time.perf_counter()
        reconcile_id = uuid.uuid4().hex[:12]
        with structlog.contextvars.bound_contextvars(
            kind=self.rt.kind,
            namespace=meta.get("namespace"),
            name=meta.get("name"),
            reconcileID=reconcile_id,
        ):
            span_name = f"reconcile {self.rt.kind}"
            with tracing.tracer().start_as_current_span(span_name) as span:
                span.set_attribute("sluice.object.kind", self.rt.kind)
                span.set_attribute("k8s.namespace.name", str(meta.get("namespace", "")))
                span.set_attribute("sluice.object.name", str(meta.get("name", "")))
                span.set_attribute("sluice.reconcile.id", reconcile_id)
                key = f"{meta.get('namespace', '')}/{meta.get('name', '')}".lstrip("/")
                with attributed(key=key, phase="runner"):
                    outcome = await self._reconcile(raw)
                span.set_attribute("sluice.reconcile.result", outcome.result)
                if outcome.result == "error":
                    span.set_status(Status(StatusCode.ERROR))
        if self.metrics is not None and outcome.result not in ("gone",):
            self.metrics.reconciled(
                name=str(meta.get("name", "")),
                namespace=str(meta.get("namespace", "")),
                seconds=time.perf_counter() - started,
                result=outcome.result,
            )
        return outcome

    async def _reconcile(self, raw: JSON) -> Outcome:
        meta = raw.get("metadata") or {}
        generation = int(meta.get("generation") or 0)
        try:
            obj = self.reconciler.model.from_obj(raw)
        except pydantic.ValidationError as error:
            return await self._reject_invalid(raw, generation, error)

        if meta.get("deletionTimestamp"):
            return await self._delete(raw, obj)

        if getattr(obj.spec, "suspend", False):
            log.debug("suspended, not reconciling")
            return Outcome("suspended")

        in_flight: finalizing.FinalizerInFlight | None = None
        if self.reconciler.uses_finalizer and finalizing.needed(meta):
            if self.reconciler.finalizer_beside_steps:
                in_flight = finalizing.FinalizerInFlight(self.client, self.rt, meta)
            else:
                added = await finalizing.add_finalizer(self.client, self.rt, meta)
                if added != "added":
                    return _not_finalized(added)

        requested = (meta.get("annotations") or {}).get(RECONCILE_REQUESTED_AT_ANNOTATION)
        if requested:
            obj.status.last_handled_reconcile_at = requested
        patcher = StatusPatcher(self.client, self.rt, raw)
        ctx = self._context(obj, raw, generation=generation, patcher=patcher, in_flight=in_flight)
        try:
            outcome = await self._run_steps(ctx, generation)
            if in_flight is not None and (added := await in_flight.added()) != "added":
                # Never published, and a deletion would not come back to us:
                # undo here what the steps stored, and tell nobody.
                ctx.events.drop()
                await self._finalize_unpublished(ctx)
                return _not_finalized(added)
            ctx.events.release()
        finally:
            if in_flight is not None:
                in_flight.cancel()
            await ctx.cleanup.aclose()
        if not outcome.publish:
            return outcome
        new = _status_of(ctx.obj, ctx.conditions)
        left = quiet_wait_left(raw, new, outcome, self.reconciler.quiet_first_wait, time.time())
        if left is not None:
            requeue = left if outcome.requeue_after is None else min(outcome.requeue_after, left)
            return Outcome("waiting", requeue_after=requeue, publish=False)
        # Waiting (for a dependency, an artifact, a gate) is not news: the
        # condition says so, without an event on every wait.
        if outcome.result != "waiting":
            self._announce(ctx, raw.get("status") or {}, new)
        with attributed(phase="status"), self._timed("status"):
            written = await patcher.write(new)
        if not written:
            # The work is done but the status still tells the old story (the API
            # server restarted, say): retry with backoff rather than leave it
            # wrong until the next interval. Found by the chaos suite.
            return Outcome("error", backoff=True)
        return outcome

    def _context(
        self,
        obj: Resource[Any, Any],
        raw: JSON,
        *,
        generation: int,
        patcher: StatusPatcher,
        in_flight: finalizing.FinalizerInFlight | None = None,
    ) -> C:
        """The one place a reconcile's context is built, for the steps and for
        `finalize` alike."""
        conditions = Conditions(obj.status.conditions, generation=generation)
        events = self._events_for(raw)
        events.holding = in_flight is not None

        async def publish() -> None:
            # Nothing is published before the finalizer is in place.
            if in_flight is not None and await in_flight.added() != "added":
                return
            with attributed(phase="status"):
                await patcher.write(_status_of(obj, conditions))

        return self.reconciler.context(
            obj=obj,
            raw=raw,
            client=self.client,
            conditions=conditions,
            log=log,
            events=events,
            publish=publish,
            ready_reason=self.reconciler.success_reason,
        )

    async def _run_steps(self, ctx: C, generation: int) -> Outcome:
        conditions = ctx.conditions
        negative = self.reconciler.negative_conditions
        tracer = tracing.tracer()
        requeue_after: float | None = None
        try:
            for step in self.reconciler.steps:
                with (
                    tracer.start_as_current_span(step.name) as span,
                    attributed(phase=step.name),
                    self._timed(step.name),
                ):
                    conditions.delete(*step.conditions)
                    try:
                        result = await step(ctx)
                    except StepError as error:
                        if error.condition is not None:
                            status = failed_status(error.condition, negative)
                            conditions.set(error.condition, status, error.reason, error.message)
                        span.set_status(Status(StatusCode.ERROR, error.message))
                        raise
                    except Waiting as waiting:
                        if waiting.condition is not None:
                            conditions.set(
                                waiting.condition,
                                "True" if waiting.status == "True" else "False",
                                waiting.reason,
                                waiting.message,
                            )
                        raise
                if result is not None:
                    requeue_after = result.requeue_after
                    break
        except Exception as error:
            ending = ending_of(error)
            _log_ending(ctx, ending, error)
        else:
            ending = Ending("success", ctx.ready_reason, ctx.ready_message, requeue_after)
        summarize(conditions, ending, negative_conditions=negative)
        if ending.kind in ("success", "stalled"):
            ctx.obj.status.observed_generation = generation
        if ending.kind == "success":
            return Outcome("success", requeue_after=ending.requeue_after or self._interval(ctx.obj))
        if ending.kind == "error" and ending.requeue_after is None:
            return Outcome("error", backoff=True)
        if ending.kind == "waiting":
            return Outcome(
                "waiting",
                requeue_after=ending.requeue_after,
                follow_up=ending.in_progress,
                publish=ending.publish,
            )
        return Outcome(ending.kind, requeue_after=ending.requeue_after)

    @contextlib.contextmanager
    def _timed(self, step: str) -> Iterator[None]:
        """Wall time per step, for the per-phase profile (`sluice_step_seconds_total`)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            ended = time.perf_counter()
            reacting.step(step, started, ended)
            if self.metrics is not None:
                self.metrics.stepped(step, ended - started)

    def _interval(self, obj: Resource[Any, Any]) -> float:
        interval = getattr(obj.spec, "interval", None)
        if not interval:
            return self.reconciler.default_interval
        return max(parse_duration(interval).total_seconds(), 1.0)

    def _events_for(self, raw: JSON) -> ObjectRecorder:
        if self.recorder is None:
            return ObjectRecorder(None, InvolvedObject.of(raw))
        return self.recorder.for_object(raw)

    @staticmethod
    def _announce(ctx: ReconcileContext[Any], old: JSON, new: JSON) -> None:
        """An event when Ready changes (status, reason or message)."""
        before, after = ready_state({"status": old}), ready_state({"status": new})
        if after is None or after == before:
            return
        status, reason, message = after
        if status == "Unknown" or (status == "True" and ctx.success_announced):
            return
        # A step's own event already said it (a HelmRelease's InstallSucceeded
        # or InstallFailed): one event per action, not a second for Ready.
        if any(e.reason == reason and e.message == message for e in ctx.events.sent):
            return
        if status == "True":
            ctx.events.normal(reason, message, metadata=ctx.event_metadata)
        else:
            ctx.events.warning(reason, message, metadata=ctx.event_metadata)

    async def _finalize_unpublished(self, ctx: C) -> None:
        if self.reconciler.finalize is None:
            return
        try:
            await self.reconciler.finalize(ctx)
        except (StepError, KubeError) as error:
            log.warning("cleaning up after the finalizer failed, failed", error=str(error))

    async def _reject_invalid(
        self, raw: JSON, generation: int, error: pydantic.ValidationError
    ) -> Outcome:
        """An object our model cannot read is Stalled with the reason; never retried
        until it changes."""
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()[:5]
        )
        message = f"invalid spec: {problems}"
        old: JSON = raw.get("status") or {}
        existing = []
        for item in old.get("conditions") or []:
            try:
                existing.append(Condition.model_validate(item))
            except pydantic.ValidationError:
                continue
        conditions = Conditions(existing, generation=generation)
        summarize(conditions, Ending("stalled", INVALID_SPEC, message), negative_conditions=())
        log.warning("invalid object", error=message)
        # Everything but what the refusal says stays as the server has it.
        new = {
            **old,
            "conditions": [c.model_dump(mode="json", by_alias=True) for c in conditions.as_list()],
            "observedGeneration": generation,
        }
        await StatusPatcher(self.client, self.rt, raw).write(new)
        return Outcome("stalled")

    async def _delete(self, raw: JSON, obj: Resource[Any, Any]) -> Outcome:
        meta = raw["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER not in finalizers:
            return Outcome("deleted")
        if self.reconciler.finalize is not None:
            patcher = StatusPatcher(self.client, self.rt, raw)
            generation = int(meta.get("generation") or 0)
            ctx = self._context(obj, raw, generation=generation, patcher=patcher)
            try:
                await self.reconciler.finalize(ctx)
            except (StepError, KubeError) as error:
                log.warning("finalization failed, retrying", error=str(error))
                return Outcome("error", backoff=True)
        try:
            await self.client.json_patch(
                self.rt,
                meta["name"],
                remove_finalizer_ops(finalizers, FINALIZER),
                namespace=meta.get("namespace"),
            )
        except NotFound:
            pass
        except KubeError as error:
            log.info("removing finalizer failed, retrying", error=str(error))
            return Outcome("error", backoff=True)
        log.info("finalized")
        return Outcome("deleted")


def _not_finalized(added: finalizing.Added) -> Outcome:
    if added == "gone":
        return Outcome("gone")
    return Outcome("error", backoff=True)


def _status_of(obj: Resource[Any, Any], conditions: Conditions) -> JSON:
    """The status to write: the model's, with this reconcile's conditions."""
    status = obj.status
    status.conditions = conditions.as_list()
    new: JSON = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return new


def quiet_wait_left(
    raw: JSON, new: JSON, outcome: Outcome, grace: float, now: float
) -> float | None:
    """Seconds a new object's wait may stay unpublished, or None to publish it now.

    A source and the Kustomization (or HelmRelease) that follows it are usually
    created together, and the follower's first reconcile finds no artifact
    yet: writing "Source ... has no artifact yet" costs a status patch, at the
    moment the API server is busiest, for a state the apply replaces seconds
    later (a third to all of the MTTP run's Kustomizations wrote one). So a wait
    (for an artifact, a dependency, a gate) is kept quiet for `grace` seconds
    after creation while the object has never had a status; if it still waits
    then, the requeue at the grace's end publishes it. Never quiet: an object
    published before, one whose `requestedAt` someone waits to see handled, a
    wait in progress (a health wait's status carries the inventory), or a wait
    whose status `new` records more than its conditions (the HelmChart a
    HelmRelease created before it waits for the chart: a deletion meanwhile
    must find it there to delete it).
    """
    if outcome.result != "waiting" or not outcome.publish or outcome.follow_up or grace <= 0:
        return None
    meta = raw.get("metadata") or {}
    # Never published: no conditions (the CRDs default `observedGeneration: -1`).
    old = raw.get("status") or {}
    if old.get("conditions") or (meta.get("annotations") or {}).get(
        RECONCILE_REQUESTED_AT_ANNOTATION
    ):
        return None
    if set(merge_patch(old, new)) - {"conditions"}:
        return None
    try:
        created = parse_time(str(meta.get("creationTimestamp") or "")).timestamp()
    except ValueError:
        return None
    # creationTimestamp has one-second resolution, and the server's clock is not
    # ours: the wait is never kept quiet for longer than `grace`.
    left = min(grace, created + 1.0 + grace - now)
    return left if left > 0 else None


def _log_ending(ctx: ReconcileContext[Any], ending: Ending, error: Exception) -> None:
    # Log state changes at the level they deserve; a bug keeps its traceback.
    if ending.kind == "stalled":
        ctx.log.warning("stalled", reason=ending.reason, error=ending.message)
    elif ending.kind == "waiting":
        ctx.log.debug("waiting", reason=ending.reason, message=ending.message)
    elif isinstance(error, StepError):
        ctx.log.info("reconcile failed, retrying", reason=ending.reason, error=ending.message)
    elif isinstance(error, (ApiUnavailable, Conflict)):
        ctx.log.info("transient API error, retrying", error=ending.message)
    else:
        ctx.log.exception("reconcile raised")
