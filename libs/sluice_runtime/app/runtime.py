"""The components of a controller process, entered in order on one AsyncExitStack:
API client, event recorder, the service's setup, probe and metrics servers,
informers, leadership, workers. Unwinding the stack stops them in reverse.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from sluice_runtime import holding, lanes
from sluice_runtime.app.flags import runtime_namespace, watched_namespace
from sluice_runtime.controller import Controller, Informers, ReconcileObserver
from sluice_runtime.endpoints import Heartbeat, probing
from sluice_runtime.informing.queueing import ExponentialBackoff
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.leading import ElectionThread
from sluice_runtime.observing import reacting
from sluice_runtime.observing.metrics import (
    RequestMetrics,
    observe_api_requests,
    observe_asyncio_tasks,
)
from sluice_runtime.observing.profiling import PhaseSampler
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import C
from sluice_runtime.recording import EventRecorder
from sluice_runtime.tokens import producer_token

log = structlog.get_logger(__name__)


class StartupError(Exception):
    """A problem with the environment that the user must fix; printed as one line."""


@dataclass
class Runtime:
    """What a service's setup function builds its controllers from."""

    service: str
    options: argparse.Namespace
    client: KubeClient
    informers: Informers
    recorder: EventRecorder
    stack: contextlib.AsyncExitStack
    controllers: list[Controller[Any]] = field(default_factory=list)
    observer: ReconcileObserver | None = None
    """Told of every reconcile of every controller (tests, benchmarks)."""
    leader_only: list[contextlib.AbstractAsyncContextManager[Any]] = field(default_factory=list)
    """Entered once the Lease is held (at once without election), after the informers."""
    leading: bool = False
    """True once every `leader_only` part runs: a replica with such parts is Ready only then."""

    def when_leading(self, part: contextlib.AbstractAsyncContextManager[Any]) -> None:
        """Run `part` only on the leader, as Flux's source-controller runs its file server:
        a standby has no artifacts of its own, so it must neither serve nor be a Service
        endpoint (its /readyz answers 503 until it leads)."""
        self.leader_only.append(part)

    def controller(
        self, reconciler: Reconciler[C], *, concurrency: int | None = None
    ) -> Controller[C]:
        made = Controller(
            reconciler,
            client=self.client,
            informers=self.informers,
            recorder=self.recorder,
            concurrency=concurrency or self.options.concurrent,
            backoff=ExponentialBackoff(
                base=self.options.min_retry_delay, cap=self.options.max_retry_delay
            ),
            service=self.service,
            observer=self.observer,
        )
        self.controllers.append(made)
        return made


Setup = Callable[[Runtime], Awaitable[None]]


async def require_kinds(client: KubeClient, kinds: Sequence[Any]) -> None:
    """Fail fast, with the fix, when a CRD this controller needs is not served."""
    missing: list[str] = []
    for model in kinds:
        try:
            listing = await client.request("GET", f"/apis/{model.GROUP}/{model.VERSION}")
        except NotFound:
            listing = {"resources": []}
        served = {r.get("name") for r in listing.get("resources") or []}
        if model.PLURAL not in served:
            missing.append(f"{model.PLURAL}.{model.GROUP}/{model.VERSION}")
    if missing:
        raise StartupError(
            f"CRD not installed: {', '.join(missing)} "
            "(install them with `kubectl apply -k crds/` or `sluice crds install`)"
        )


@contextlib.asynccontextmanager
async def running(
    *,
    service: str,
    options: argparse.Namespace,
    kinds: Sequence[Any],
    setup: Setup,
    on_lost_leadership: Callable[[], None] | None = None,
    forward_events: bool = True,
    observer: ReconcileObserver | None = None,
) -> AsyncIterator[Runtime]:
    """Everything a controller process runs, from API client to workers, as one context.

    `run()` wraps it in signal handling; tests enter it directly to run a
    controller in-process with exactly the wiring of the real one.
    """
    async with contextlib.AsyncExitStack() as stack:
        # Requested reconciles' callbacks go ahead of bulk ones in the loop too.
        holding.HOLD.limit = getattr(options, "requested_hold", holding.LIMIT)
        ready_lanes = lanes.prioritize(
            asyncio.get_running_loop(), requested_first=not getattr(options, "fifo_loop", False)
        )
        client = await KubeClient.connect(
            kubeconfig=options.kubeconfig, qps=options.kube_api_qps, burst=options.kube_api_burst
        )
        stack.push_async_callback(client.close)
        observe_api_requests(service, lambda: client.request_count)
        observe_asyncio_tasks(service, asyncio.get_running_loop())
        client.observe(RequestMetrics(service))
        if getattr(options, "trace_requests", ""):
            reacting.enable(options.trace_requests, ready_lanes)
            stack.callback(reacting.disable)
            client.observe(reacting.RequestTimes())
        await require_kinds(client, kinds)
        recorder = EventRecorder(
            client,
            controller=service,
            events_addr=(options.events_addr or None) if forward_events else None,
            events_token=producer_token(options.events_token_file) if forward_events else None,
        )
        await stack.enter_async_context(recorder.running())
        informers = Informers(
            client,
            namespace=watched_namespace(options),
            label_selector=options.watch_label_selector or None,
        )
        runtime = Runtime(service, options, client, informers, recorder, stack, observer=observer)
        await setup(runtime)
        if getattr(options, "profile_phases", False):
            sampler = PhaseSampler(
                {step.name for made in runtime.controllers for step in made.reconciler.steps}
            )
            sampler.start(service)
            stack.callback(sampler.stop)

        def ready() -> bool:
            return informers.synced() and (runtime.leading or not runtime.leader_only)

        beats = await stack.enter_async_context(Heartbeat(ready).beating())
        same_addr = options.metrics_addr == options.health_addr
        await stack.enter_async_context(
            probing(options.health_addr, heartbeat=beats, metrics=same_addr)
        )
        if not same_addr and options.metrics_addr:
            await stack.enter_async_context(probing(options.metrics_addr, metrics=True))

        await informers.start()
        stack.push_async_callback(informers.stop)

        if options.enable_leader_election:
            # Its own thread and connection: reconcile load must not delay a renewal.
            elector = ElectionThread(
                lambda: KubeClient.connect(kubeconfig=options.kubeconfig),
                name=f"{service}-leader-election",
                namespace=runtime_namespace(),
                identity=f"{socket.gethostname()}_{os.getpid()}",
                lease_duration=options.leader_election_lease_duration,
                renew_deadline=options.leader_election_renew_deadline,
                retry_period=options.leader_election_retry_period,
            )
            await elector.acquire(on_lost_leadership or (lambda: None))
            stack.push_async_callback(elector.release)

        await informers.wait_synced()
        for part in runtime.leader_only:
            await stack.enter_async_context(part)
        runtime.leading = True
        for made in runtime.controllers:
            await made.start()
            stack.push_async_callback(made.stop, deadline=options.shutdown_timeout)
        log.info("started", service=service, controllers=[c.rt.kind for c in runtime.controllers])
        yield runtime
        log.info("shutting down", service=service)
