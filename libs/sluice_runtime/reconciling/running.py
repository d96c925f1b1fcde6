"""The step runner: one reconcile of one object, top to bottom.

Everything every controller would otherwise repeat lives here, once:
parsing the cached object into its model, the finalizer, `suspend`,
`reconcile.fluxcd.io/requestedAt`, running the steps in order (each in its
own trace span), turning what they raised into conditions, summarizing
Ready/Reconciling/Stalled in kstatus form, writing status with one patch
(nothing when nothing changed), an event when Ready changes, and metrics.
The steps themselves only do their work.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, Literal

import pydantic
import structlog
from opentelemetry.trace import Status, StatusCode

from sluice_api.meta import (
    FINALIZER,
    RECONCILE_REQUESTED_AT_ANNOTATION,
    Condition,
    ConditionType,
    Reason,
    format_duration,
    parse_duration,
)
from sluice_runtime.conditions import Conditions
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import ApiUnavailable, Conflict, KubeError, NotFound
from sluice_runtime.kube.patching import add_finalizer_ops, merge_patch, remove_finalizer_ops
from sluice_runtime.kube.resources import ResourceType
from sluice_runtime.observing import tracing
from sluice_runtime.observing.metrics import ControllerMetrics
from sluice_runtime.reconciling.errors import Stalling, StepError, Waiting
from sluice_runtime.reconciling.steps import C, ReconcileContext, Step
from sluice_runtime.recording import EventRecorder, ObjectRecorder

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


ContextFactory = Callable[..., C]


@dataclass
class Reconciler(Generic[C]):
    """A controller's reconcile, declared: its kind, its steps, its context."""

    model: Any
    """The sluice_api model class of the kind reconciled."""
    steps: Sequence[Step[C]]
    context: ContextFactory[C]
    """Builds the step context from the base fields (a dataclass or a partial of one)."""
    negative_conditions: Sequence[str] = ()
    """Abnormal-true conditions, in priority order; any that is True makes Ready False."""
    finalize: Callable[[C], Awaitable[None]] | None = None
    """Cleanup when the object is deleted (artifacts, applied objects)."""
    uses_finalizer: bool = True
    trigger_annotations: Sequence[str] = ()
    """Annotations whose change means "reconcile now", besides requestedAt
    (a Gate's open/close requests)."""
    success_reason: str = Reason.SUCCEEDED
    default_interval: float = 600.0

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

        if self.reconciler.uses_finalizer and FINALIZER not in (meta.get("finalizers") or []):
            try:
                await self.client.json_patch(
                    self.rt,
                    meta["name"],
                    add_finalizer_ops(meta.get("finalizers"), FINALIZER),
                    namespace=meta.get("namespace"),
                )
            except NotFound:
                return Outcome("gone")
            except KubeError as error:
                log.info("adding finalizer failed, retrying", error=str(error))
                return Outcome("error", backoff=True)

        conditions = Conditions(obj.status.conditions, generation=generation)
        events = self._events_for(raw)
        ctx = self.reconciler.context(
            obj=obj,
            raw=raw,
            client=self.client,
            conditions=conditions,
            log=log,
            events=events,
            ready_reason=self.reconciler.success_reason,
        )
        requested = (meta.get("annotations") or {}).get(RECONCILE_REQUESTED_AT_ANNOTATION)
        if requested:
            obj.status.last_handled_reconcile_at = requested

        written: list[JSON] = [raw.get("status") or {}]

        async def publish() -> None:
            written[0] = (
                await self._write_status(ctx, raw, base=written[0], announce=False) or written[0]
            )

        ctx.publish = publish
        try:
            outcome = await self._run_steps(ctx, generation)
        finally:
            await ctx.cleanup.aclose()
        # Waiting (for a dependency, an artifact, a gate) is not news: the
        # condition says so, without an event on every wait.
        final = await self._write_status(
            ctx, raw, base=written[0], announce=outcome.result != "waiting"
        )
        if final is None:
            # The work is done but the status still tells the old story (the API
            # server restarted, say): retry with backoff rather than leave it
            # wrong until the next interval. Found by the chaos suite.
            return Outcome("error", backoff=True)
        return outcome

    async def _run_steps(self, ctx: C, generation: int) -> Outcome:
        conditions = ctx.conditions
        tracer = tracing.tracer()
        requeue_after: float | None = None
        try:
            for step in self.reconciler.steps:
                with tracer.start_as_current_span(step.name) as span:
                    conditions.delete(*step.conditions)
                    try:
                        result = await step(ctx)
                    except StepError as error:
                        if error.condition is not None:
                            conditions.set(
                                error.condition,
                                self._failed_status(error.condition),
                                error.reason,
                                error.message,
                            )
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
        except Stalling as stalled:
            conditions.mark_true(ConditionType.STALLED, stalled.reason, stalled.message)
            conditions.mark_false(ConditionType.READY, stalled.reason, stalled.message)
            conditions.delete(ConditionType.RECONCILING)
            ctx.obj.status.observed_generation = generation
            ctx.log.warning("stalled", reason=stalled.reason, error=stalled.message)
            return Outcome("stalled")
        except StepError as error:
            self._mark_retrying(conditions, error.reason, error.message, error.requeue_after)
            ctx.log.info("reconcile failed, retrying", reason=error.reason, error=error.message)
            if error.requeue_after is not None:
                return Outcome("error", requeue_after=error.requeue_after)
            return Outcome("error", backoff=True)
        except Waiting as waiting:
            conditions.mark_false(ConditionType.READY, waiting.reason, waiting.message)
            conditions.mark_true(ConditionType.RECONCILING, Reason.PROGRESSING, waiting.message)
            conditions.delete(ConditionType.STALLED)
            ctx.log.debug("waiting", reason=waiting.reason, message=waiting.message)
            return Outcome("waiting", requeue_after=waiting.requeue_after)
        except (ApiUnavailable, Conflict) as error:
            # Transient by nature: the API server restarted, or a write raced.
            self._mark_retrying(conditions, Reason.PROGRESSING_WITH_RETRY, str(error))
            ctx.log.info("transient API error, retrying", error=str(error))
            return Outcome("error", backoff=True)
        except Exception as error:  # a bug, not a user error: keep the traceback in the log
            message = f"internal error: {type(error).__name__}: {error}"
            self._mark_retrying(conditions, Reason.RECONCILIATION_FAILED, message)
            ctx.log.exception("reconcile raised")
            return Outcome("error", backoff=True)

        failing = conditions.first_true(self.reconciler.negative_conditions)
        if failing is not None:
            conditions.mark_false(ConditionType.READY, failing.reason, failing.message)
        else:
            conditions.mark_true(ConditionType.READY, ctx.ready_reason, ctx.ready_message)
        conditions.delete(ConditionType.RECONCILING, ConditionType.STALLED)
        ctx.obj.status.observed_generation = generation
        if requeue_after is None:
            requeue_after = self._interval(ctx.obj)
        return Outcome("success", requeue_after=requeue_after)

    def _failed_status(self, condition: str) -> Literal["True", "False"]:
        # Negative-polarity conditions (FetchFailed) are True when things are
        # bad; positive ones (Healthy, ArtifactInStorage) are False.
        if condition in self.reconciler.negative_conditions:
            return "True"
        return "False"

    @staticmethod
    def _mark_retrying(
        conditions: Conditions, reason: str, message: str, retry_after: float | None = None
    ) -> None:
        conditions.mark_false(ConditionType.READY, reason, message)
        # Ready (and the step's own condition) carry the error; Reconciling says
        # when it is tried again rather than repeating it a third time.
        when = (
            f"in {format_duration(timedelta(seconds=retry_after))}"
            if retry_after is not None
            else "with backoff"
        )
        conditions.mark_true(
            ConditionType.RECONCILING,
            Reason.PROGRESSING_WITH_RETRY,
            f"reconciliation failed, retrying {when}",
        )
        conditions.delete(ConditionType.STALLED)

    def _interval(self, obj: Any) -> float:
        interval = getattr(obj.spec, "interval", None)
        if not interval:
            return self.reconciler.default_interval
        return max(parse_duration(interval).total_seconds(), 1.0)

    def _events_for(self, raw: JSON) -> ObjectRecorder:
        if self.recorder is None:
            from sluice_runtime.recording import InvolvedObject

            return ObjectRecorder(None, InvolvedObject.of(raw))
        return self.recorder.for_object(raw)

    async def _write_status(
        self, ctx: ReconcileContext, raw: JSON, *, base: JSON, announce: bool
    ) -> JSON | None:
        """Patch status from `base` (what the server has) to the context's; return it,
        or None when the write failed."""
        status = ctx.obj.status
        status.conditions = ctx.conditions.as_list()
        new: JSON = status.model_dump(mode="json", by_alias=True, exclude_none=True)
        old = raw.get("status") or {}
        patch = merge_patch(base, new)
        if announce:
            self._announce(ctx, old, new)
        if not patch:
            return new
        meta = raw["metadata"]
        try:
            await self.client.merge_patch(
                self.rt,
                meta["name"],
                {"status": patch},
                namespace=meta.get("namespace"),
                subresource="status",
            )
        except NotFound:
            return new  # deleted while we worked
        except KubeError as error:
            ctx.log.warning("status update failed", error=str(error))
            return None
        return new

    @staticmethod
    def _announce(ctx: ReconcileContext, old: JSON, new: JSON) -> None:
        """An event when Ready changes (status, reason or message)."""

        def ready(status: JSON) -> tuple[str, str, str] | None:
            for cond in status.get("conditions") or []:
                if cond.get("type") == ConditionType.READY:
                    return (cond.get("status", ""), cond.get("reason", ""), cond.get("message", ""))
            return None

        before, after = ready(old), ready(new)
        if after is None or after == before:
            return
        status, reason, message = after
        if status == "Unknown":
            return
        if status == "True":
            ctx.events.normal(reason, message, metadata=ctx.event_metadata)
        else:
            ctx.events.warning(reason, message, metadata=ctx.event_metadata)

    async def _reject_invalid(
        self, raw: JSON, generation: int, error: pydantic.ValidationError
    ) -> Outcome:
        """An object our model cannot read is Stalled with the reason; never retried
        until it changes."""
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()[:5]
        )
        message = f"invalid spec: {problems}"
        old = raw.get("status") or {}
        existing = []
        for item in old.get("conditions") or []:
            try:
                existing.append(Condition.model_validate(item))
            except pydantic.ValidationError:
                continue
        conditions = Conditions(existing, generation=generation)
        conditions.mark_true(ConditionType.STALLED, INVALID_SPEC, message)
        conditions.mark_false(ConditionType.READY, INVALID_SPEC, message)
        conditions.delete(ConditionType.RECONCILING)
        new = {
            "conditions": [c.model_dump(mode="json", by_alias=True) for c in conditions.as_list()],
            "observedGeneration": generation,
        }
        patch = merge_patch({k: old.get(k) for k in new if k in old}, new)
        log.warning("invalid object", error=message)
        if patch:
            meta = raw["metadata"]
            try:
                await self.client.merge_patch(
                    self.rt,
                    meta["name"],
                    {"status": patch},
                    namespace=meta.get("namespace"),
                    subresource="status",
                )
            except KubeError as write_error:
                log.warning("status update failed", error=str(write_error))
        return Outcome("stalled")

    async def _delete(self, raw: JSON, obj: Any) -> Outcome:
        meta = raw["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER not in finalizers:
            return Outcome("deleted")
        if self.reconciler.finalize is not None:
            ctx = self.reconciler.context(
                obj=obj,
                raw=raw,
                client=self.client,
                conditions=Conditions(obj.status.conditions, generation=0),
                log=log,
                events=self._events_for(raw),
                ready_reason=self.reconciler.success_reason,
            )
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
