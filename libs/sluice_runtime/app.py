"""A controller process from flags to shutdown, shared by all four services.

Each component is an async context (set up, yield, torn down) entered in
order on one AsyncExitStack: API client, event recorder, probe and metrics
servers, informers, leadership, workers, and whatever the service adds (its
file server, its webhook receiver). SIGTERM or SIGINT unwinds the stack in
reverse, letting reconciles in flight finish within `--shutdown-timeout`.
Startup problems a person can fix (bad kubeconfig, unreachable API server,
CRDs not installed, port in use) end in one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from sluice_api.meta import parse_duration
from sluice_runtime.allocating import smaller_tls_buffers, tune_malloc
from sluice_runtime.controller import Controller, Informers, ReconcileObserver
from sluice_runtime.endpoints import Heartbeat, probing
from sluice_runtime.informing.queueing import ExponentialBackoff
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import ConfigError, KubeError, NotFound, one_line
from sluice_runtime.leading import ElectionThread
from sluice_runtime.observing import logging as sluice_logging
from sluice_runtime.observing import reacting, tracing
from sluice_runtime.observing.heaptracing import start_from_env
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


def duration(text: str) -> float:
    try:
        return parse_duration(text).total_seconds()
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


_SIZE_UNITS = {
    "": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "K": 10**3, "M": 10**6, "G": 10**9,
}  # fmt: skip


def size(text: str) -> int:
    """A byte count for a flag, as Kubernetes quantities write it: `65536`, `64Mi`, `1Gi`."""
    number = text.rstrip("KMGi")
    unit = text[len(number) :]
    if not number.isdigit() or unit not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size (bytes, or with Ki/Mi/Gi)")
    return int(number) * _SIZE_UNITS[unit]


def version() -> str:
    """The installed distribution's version (what the image and chart are tagged with)."""
    try:
        return importlib.metadata.version("sluice")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def parser(*, service: str, description: str, concurrency: int) -> argparse.ArgumentParser:
    """The flags every controller accepts, named as Flux's controllers name them."""
    p = argparse.ArgumentParser(prog=service, description=description)
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    p.add_argument("--kubeconfig", help="path to a kubeconfig (default: $KUBECONFIG, in-cluster)")
    p.add_argument("--concurrent", type=int, default=concurrency, help="reconcile workers")
    p.add_argument("--metrics-addr", default=":8080", help="Prometheus metrics address")
    p.add_argument("--health-addr", default=":9440", help="/healthz and /readyz address")
    p.add_argument("--events-addr", default="", help="notification-controller event endpoint")
    p.add_argument(
        "--events-token-file",
        default="",
        help=(
            "file holding the token that authenticates events at the notification-controller "
            "(default: the pod's service-account token)"
        ),
    )
    p.add_argument("--enable-leader-election", action="store_true")
    p.add_argument("--leader-election-lease-duration", type=duration, default=35.0)
    p.add_argument("--leader-election-renew-deadline", type=duration, default=30.0)
    p.add_argument("--leader-election-retry-period", type=duration, default=5.0)
    p.add_argument(
        "--watch-all-namespaces",
        type=_bool,
        default=True,
        help="watch every namespace (false: only $RUNTIME_NAMESPACE)",
    )
    p.add_argument(
        "--watch-namespace", default="", help="watch only this namespace (overrides the above)"
    )
    p.add_argument("--watch-label-selector", default="", help="only reconcile matching objects")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--log-encoding", default="json", choices=["json", "console"])
    p.add_argument("--min-retry-delay", type=duration, default=0.75)
    p.add_argument("--max-retry-delay", type=duration, default=900.0)
    p.add_argument("--kube-api-qps", type=float, default=50.0)
    p.add_argument("--kube-api-burst", type=int, default=300)
    p.add_argument("--shutdown-timeout", type=duration, default=30.0)
    switch(
        p,
        "--profile-phases",
        help="sample CPU by reconcile phase into sluice_phase_cpu_seconds_total (benchmarks)",
    )
    p.add_argument(
        "--trace-requests",
        default="",
        metavar="FILE",
        help="append a JSON line per requested reconcile to FILE: its queue wait, steps, API "
        "requests and the event loop's lag meanwhile (benchmarks)",
    )
    return p


def switch(parser: argparse.ArgumentParser, name: str, *, help: str) -> None:
    """A boolean flag spelled as Go's flag package takes it: `--name`,
    `--name=true` or `--name=false`, the last one given winning. Flux's
    manifests and patches write `=true`, and a patch that appends
    `--name=false` turns off what the shipped manifest turned on."""
    parser.add_argument(name, type=_bool, nargs="?", const=True, default=False, help=help)


def add_tenant_arguments(parser: argparse.ArgumentParser, *, kind: str, remote: str) -> None:
    """The flags of a controller that applies a tenant's objects (Flux's names and defaults).

    `kind` names what it reconciles (in the help of `--default-service-account`),
    `remote` what a kubeConfig reference is given for ("remote apply").
    """
    parser.add_argument(
        "--requeue-dependency",
        type=duration,
        default=30.0,
        help="how long to wait before looking again at a dependency or source that is not ready",
    )
    switch(parser, "--no-cross-namespace-refs", help="refuse sources in other namespaces")
    parser.add_argument(
        "--default-service-account",
        default="",
        help=f"service account to impersonate when a {kind} names none",
    )
    switch(
        parser,
        "--insecure-kubeconfig-exec",
        help=f"allow the user.exec section of kubeconfigs given for {remote} (the plugin runs "
        "in the controller's container)",
    )
    switch(
        parser,
        "--insecure-kubeconfig-tls",
        help=f"allow kubeconfigs given for {remote} to disable TLS verification",
    )


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def runtime_namespace() -> str:
    return os.environ.get("RUNTIME_NAMESPACE") or "flux-system"


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
        client = await KubeClient.connect(
            kubeconfig=options.kubeconfig, qps=options.kube_api_qps, burst=options.kube_api_burst
        )
        stack.push_async_callback(client.close)
        observe_api_requests(service, lambda: client.request_count)
        observe_asyncio_tasks(service, asyncio.get_running_loop())
        client.observe(RequestMetrics(service))
        if getattr(options, "trace_requests", ""):
            reacting.enable(options.trace_requests)
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


def watched_namespace(options: argparse.Namespace) -> str | None:
    if options.watch_namespace:
        return str(options.watch_namespace)
    return None if options.watch_all_namespaces else runtime_namespace()


async def run(
    *,
    service: str,
    options: argparse.Namespace,
    kinds: Sequence[Any],
    setup: Setup,
    forward_events: bool = True,
) -> None:
    """Run until SIGTERM/SIGINT (or lost leadership), then unwind in order."""
    stop = asyncio.Event()
    started = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    tracing.configure(service)

    async def serve() -> None:
        async with running(
            service=service,
            options=options,
            kinds=kinds,
            setup=setup,
            on_lost_leadership=stop.set,
            forward_events=forward_events,
        ):
            started.set()
            await stop.wait()

    server = loop.create_task(serve(), name=f"{service}-main")
    stopping = loop.create_task(stop.wait(), name="signal-wait")
    try:
        await asyncio.wait({server, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not started.is_set() and not server.done():
            # Stopped while still starting (e.g. waiting for leadership).
            server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server
    finally:
        stopping.cancel()
        tracing.shutdown()


def entry_point(
    *,
    service: str,
    doc: str | None,
    kinds: Sequence[Any],
    setup: Setup,
    concurrency: int = 4,
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    forward_events: bool = True,
) -> Callable[[], None]:
    """A service's console-script `main`: `main(...)` with the first line of the
    service's module docstring (`doc`) as the description `--help` shows."""
    description = doc.splitlines()[0] if doc else service

    def entry() -> None:
        main(
            service=service,
            description=description,
            kinds=kinds,
            setup=setup,
            concurrency=concurrency,
            add_arguments=add_arguments,
            forward_events=forward_events,
        )

    return entry


def main(
    *,
    service: str,
    description: str,
    kinds: Sequence[Any],
    setup: Setup,
    concurrency: int = 4,
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    argv: Sequence[str] | None = None,
    forward_events: bool = True,
) -> None:
    """Parse flags, configure logging, run until signalled; exit 1 on startup errors."""
    arg_parser = parser(service=service, description=description, concurrency=concurrency)
    if add_arguments is not None:
        add_arguments(arg_parser)
    options = arg_parser.parse_args(argv)
    sluice_logging.configure(level=options.log_level, encoding=options.log_encoding)
    tune_malloc()  # before any thread allocates: see allocating
    try:
        start_from_env()  # SLUICE_TRACEMALLOC: before the allocations it should see
    except ValueError as error:
        print(f"{service}: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    smaller_tls_buffers()  # before the first connection
    try:
        asyncio.run(
            run(
                service=service,
                options=options,
                kinds=kinds,
                setup=setup,
                forward_events=forward_events,
            )
        )
    except (StartupError, ConfigError, KubeError, OSError, ValueError) as error:
        print(f"{service}: {one_line(error)}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        pass
