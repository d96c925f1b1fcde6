"""A controller: informers feed a work queue, N workers run the reconciler.

What enqueues a key is decided here, once for every kind, the way Flux's
predicates do it: a new object, a new generation (spec change), a changed
`reconcile.fluxcd.io/requestedAt`, or a deletion in progress. Our own status
writes change none of those, so they never cause a reconcile of their own.
Other kinds (a Kustomization's sources, a consumer's gates) are watched with
a mapper that names which keys of ours a change concerns.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol

import structlog

from sluice_api.meta import RECONCILE_REQUESTED_AT_ANNOTATION
from sluice_runtime import holding, lanes
from sluice_runtime.informing.queueing import ExponentialBackoff, Lane, QueueShutDown, WorkQueue
from sluice_runtime.informing.watching import Change, Informer
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import ResourceType
from sluice_runtime.observing import reacting
from sluice_runtime.observing.metrics import ControllerMetrics
from sluice_runtime.reconciling.running import Outcome, Reconciler, Runner
from sluice_runtime.reconciling.steps import C
from sluice_runtime.recording import EventRecorder

log = structlog.get_logger(__name__)

Mapper = Callable[[Change], Iterable[str]]


class Informers:
    """One informer per resource per process, shared by every controller in it."""

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.label_selector = label_selector
        self._informers: dict[tuple[ResourceType, bool], Informer] = {}
        self._started = False

    def get(self, rt: ResourceType, *, selected: bool = False) -> Informer:
        """The informer of `rt`; `selected` applies the watch label selector
        (used for the kinds a controller reconciles, so replicas can shard)."""
        key = (rt, selected)
        informer = self._informers.get(key)
        if informer is None:
            informer = Informer(
                self.client,
                rt,
                namespace=self.namespace if rt.namespaced else None,
                label_selector=self.label_selector if selected else None,
            )
            self._informers[key] = informer
            if self._started:
                # A fresh context: the informer is the process's, even when a requested
                # reconcile asked for it first (it must not inherit that lane).
                asyncio.get_running_loop().create_task(
                    informer.start(), context=contextvars.Context()
                )
        return informer

    def all(self) -> list[Informer]:
        return list(self._informers.values())

    async def start(self) -> None:
        self._started = True
        for informer in self._informers.values():
            await informer.start()

    async def stop(self) -> None:
        for informer in self._informers.values():
            await informer.stop()

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self._informers.values())

    async def wait_synced(self) -> None:
        await asyncio.gather(*(i.synced.wait() for i in self._informers.values()))


def _annotation(obj: JSON | None, name: str) -> str | None:
    if obj is None:
        return None
    value = (obj.get("metadata", {}).get("annotations") or {}).get(name)
    return str(value) if value is not None else None


def primary_change_matters(change: Change, trigger_annotations: Sequence[str] = ()) -> bool:
    """Flux's GenerationChanged + ReconcileRequested predicates, plus deletions."""
    if change.kind != "updated":
        return True
    old_meta = (change.old or {}).get("metadata", {})
    new_meta = (change.new or {}).get("metadata", {})
    if old_meta.get("generation") != new_meta.get("generation"):
        return True
    for name in (RECONCILE_REQUESTED_AT_ANNOTATION, *trigger_annotations):
        if _annotation(change.old, name) != _annotation(change.new, name):
            return True
    return bool(new_meta.get("deletionTimestamp")) and (
        not old_meta.get("deletionTimestamp")
        or old_meta.get("finalizers") != new_meta.get("finalizers")
    )


def requested(change: Change, trigger_annotations: Sequence[str] = ()) -> bool:
    """Whether someone asked for this reconcile (a webhook, the CLI, a gate's
    request): such keys go ahead of the queue."""
    if change.kind != "updated":
        return False
    return any(
        _annotation(change.old, name) != _annotation(change.new, name)
        for name in (RECONCILE_REQUESTED_AT_ANNOTATION, *trigger_annotations)
    )


class ReconcileObserver(Protocol):
    """A hook on every finished reconcile, for tests and benchmarks (metrics
    are recorded by the runner); the controller itself keeps no counters."""

    def reconciled(self, key: str, outcome: Outcome, seconds: float) -> None: ...


@dataclass
class ReconcileLog:
    """A ReconcileObserver that remembers, per key, how many reconciles ran and
    the last one's outcome and duration."""

    counts: Counter[str] = field(default_factory=Counter)
    last_outcome: dict[str, Outcome] = field(default_factory=dict)
    last_duration: dict[str, float] = field(default_factory=dict)

    def reconciled(self, key: str, outcome: Outcome, seconds: float) -> None:
        self.counts[key] += 1
        self.last_outcome[key] = outcome
        self.last_duration[key] = seconds


class Controller(Generic[C]):
    def __init__(
        self,
        reconciler: Reconciler[C],
        *,
        client: KubeClient,
        informers: Informers,
        recorder: EventRecorder | None,
        concurrency: int = 4,
        backoff: ExponentialBackoff | None = None,
        metrics: ControllerMetrics | None = None,
        service: str = "sluice",
        observer: ReconcileObserver | None = None,
    ) -> None:
        self.reconciler = reconciler
        self.rt = reconciler.rt
        self.concurrency = max(1, concurrency)
        self.metrics = metrics or ControllerMetrics.create(service=service, kind=self.rt.kind)
        self.queue = WorkQueue(backoff=backoff, observer=self.metrics)
        self.informer = informers.get(self.rt, selected=True)
        self.informers = informers
        self.runner = Runner(reconciler, client=client, recorder=recorder, metrics=self.metrics)
        self._workers: list[asyncio.Task[None]] = []
        self._in_flight: set[str] = set()
        self._observer = observer
        self.informer.add_handler(self._on_primary)

    def watch(
        self,
        rt: ResourceType,
        mapper: Mapper,
        *,
        selected: bool = False,
        urgent: Callable[[Change], bool] | None = None,
    ) -> Informer:
        """Also reconcile the keys `mapper` names whenever an object of `rt` changes;
        ahead of the queue when `urgent` says the change answers someone's request
        (a source fetched because a webhook asked)."""
        informer = self.informers.get(rt, selected=selected)

        def handler(change: Change) -> None:
            keys = list(mapper(change))
            if not keys:
                return
            ahead = urgent is not None and urgent(change)
            for key in keys:
                if ahead:
                    reacting.queued(self.rt.kind, key, rt.kind)
                self.queue.add(key, lane=Lane.REQUESTED if ahead else Lane.NORMAL)

        informer.add_handler(handler)
        return informer

    def enqueue(self, key: str, *, lane: Lane = Lane.NORMAL) -> None:
        """Reconcile `key`; `Lane.FOLLOW_UP` for the continuation of work already
        applied (what a health wait waits for changed)."""
        self.queue.add(key, lane=lane)

    def _on_primary(self, change: Change) -> None:
        if change.kind == "deleted":
            self.queue.cancel_delayed(change.key)
            self.queue.forget(change.key)
            self._forget_metrics(change.key)
            return
        if primary_change_matters(change, self.reconciler.trigger_annotations):
            asked = requested(change, self.reconciler.trigger_annotations)
            if asked:
                reacting.queued(self.rt.kind, change.key, "requestedAt")
            self.queue.add(change.key, lane=Lane.REQUESTED if asked else Lane.NORMAL)

    def _forget_metrics(self, key: str) -> None:
        namespace, _, name = key.rpartition("/")
        self.metrics.forget(name=name, namespace=namespace)

    async def start(self) -> None:
        self.queue.start()
        for index in range(self.concurrency):
            self._workers.append(
                asyncio.get_running_loop().create_task(
                    self._work(), name=f"{self.rt.kind.lower()}-worker-{index}"
                )
            )
        # One more worker, for requested reconciles only: ahead of the queue is
        # not enough when every worker is in a long reconcile (1000 apps being
        # delivered), and a webhook's push must not wait for one to finish.
        self._workers.append(
            asyncio.get_running_loop().create_task(
                self._work(urgent_only=True), name=f"{self.rt.kind.lower()}-worker-requested"
            )
        )

    async def stop(self, *, deadline: float = 30.0) -> None:
        """Stop taking keys; let reconciles in flight finish within `deadline`."""
        self.queue.shutdown()
        if not self._workers:
            return
        _, pending = await asyncio.wait(self._workers, timeout=deadline)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if pending:
            log.warning("reconciles cut off at shutdown", kind=self.rt.kind, count=len(pending))
        self._workers.clear()

    async def _work(self, *, urgent_only: bool = False) -> None:
        while True:
            try:
                key, lane = await self.queue.take(urgent_only=urgent_only)
            except QueueShutDown:
                return
            if not urgent_only and lane is not Lane.REQUESTED:
                # Requested work of this process in flight: a bulk reconcile starts
                # after it, so the fetches, builds and requests it would add do
                # not compete with it (holding.py; at most --requested-hold).
                await holding.HOLD.turn()
            started = time.perf_counter()
            timeline = reacting.begin(self.rt.kind, key, lane_worker=urgent_only)
            try:
                # A requested key is served as requested (its blocking calls get
                # threads of their own, sluice_runtime.lanes) by whichever worker
                # took it: a bulk worker that was idle too.
                with (
                    lanes.serving(urgent_only or lane is Lane.REQUESTED),
                    reacting.recording(timeline),
                ):
                    outcome = await self.runner.reconcile(self.informer.store.get(key))
            except Exception:  # the runner catches step errors; this is a runtime bug
                log.exception("reconcile crashed", key=key)
                outcome = Outcome("error", backoff=True)
            reacting.finish(timeline, outcome.result)
            if self.informer.store.get(key) is None:
                # Gone while it was reconciled (its finalizer removed, or deleted
                # meanwhile): the runner's measurement came after the delete event
                # forgot the series, and would stay forever.
                self._forget_metrics(key)
            if self._observer is not None:
                self._observer.reconciled(key, outcome, time.perf_counter() - started)
            # The outcome decides when the key is next due; what an earlier
            # outcome scheduled is replaced, never left to fire early.
            if outcome.backoff:
                self.queue.add_rate_limited(key)
            else:
                self.queue.forget(key)
                if outcome.requeue_after is not None:
                    # Work in progress (a health wait's re-check) goes ahead of
                    # first reconciles: it is what turns an applied app Ready.
                    lane = Lane.FOLLOW_UP if outcome.follow_up else Lane.NORMAL
                    self.queue.requeue_after(key, outcome.requeue_after, lane=lane)
                else:
                    self.queue.cancel_delayed(key)
            self.queue.done(key)
