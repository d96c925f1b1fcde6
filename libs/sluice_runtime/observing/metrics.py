"""Prometheus metrics, recorded through the OpenTelemetry SDK.

Names follow what existing Flux dashboards query: `gotk_reconcile_duration_seconds`
(by kind, name, namespace, as Flux labels it) and controller-runtime's
`controller_runtime_reconcile_total` and `workqueue_*` families. The runner and
the queue record them; steps never do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from opentelemetry.metrics import (
    CallbackOptions,
    Counter,
    Histogram,
    Meter,
    Observation,
    UpDownCounter,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from prometheus_client import REGISTRY, generate_latest

from sluice_runtime.kube.attributing import Request
from sluice_runtime.observing.rendering import render

log = structlog.get_logger(__name__)

_RECONCILE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_QUEUE_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1, 5, 10, 60, 300)

PER_OBJECT_SERIES_LIMIT = 100_000
"""Series of `gotk_reconcile_duration_seconds` kept apart before the SDK folds the rest
into one `otel_metric_overflow="true"` series (its default, 2,000, hid the objects past
the 2,000th of a kind). Flux, on the Prometheus client, has no limit, and dashboards
expect one series per object; these are bound to live objects (a deleted object's
series is forgotten, `ControllerMetrics.forget`), so the limit is only a guard against
a label that is not. Measured: 1.75 KiB per series (14 buckets, labels included), so
100,000 is at most 171 MiB, and an informer caching 100,000 objects already holds
several times that; no flag, as Flux has none. Other instruments keep 2,000: their
labels come from small fixed sets (steps, verbs, results)."""

_provider: MeterProvider | None = None
# Cumulative for every instrument, as the Prometheus exporter asks; read per scrape.
_reader = InMemoryMetricReader()


def meter(service: str) -> Meter:
    global _provider
    if _provider is None:
        _provider = MeterProvider(
            metric_readers=[_reader],
            resource=Resource.create({"service.name": service}),
            views=[
                View(
                    instrument_name="gotk_reconcile_duration_seconds",
                    aggregation=ExplicitBucketHistogramAggregation(_RECONCILE_BUCKETS),
                    aggregation_cardinality_limit=PER_OBJECT_SERIES_LIMIT,
                ),
                View(
                    instrument_name="workqueue_queue_duration_seconds",
                    aggregation=ExplicitBucketHistogramAggregation(_QUEUE_BUCKETS),
                ),
            ],
        )
    return _provider.get_meter("sluice")


def forget_series(instrument: str, attributes: Mapping[str, str]) -> bool:
    """Drop one series from what /metrics serves, as the Prometheus client's
    `DeleteLabelValues` does (Flux deletes a deleted object's series so). Returns whether
    the series was there.

    The SDK has no public way to do it: a synchronous instrument read cumulatively keeps
    every attribute set it ever saw until the process ends (the OpenTelemetry metrics
    spec defines no deletion), which in a fleet with churn is a slow leak. So this drops
    the aggregation from the reader's storage, under the lock the SDK takes to create
    one; `test_observing` fails if an SDK release moves these internals, and here a
    moved internal is logged, never raised into a reconcile.
    """
    if _provider is None:
        return False
    try:
        from opentelemetry.sdk.metrics._internal._view_instrument_match import (
            _hash_attributes,
        )

        consumer: Any = _provider._measurement_consumer
        matches: Any = consumer._reader_storages[_reader]._instrument_view_instrument_matches
        key = _hash_attributes(dict(attributes))
        forgotten = False
        for found, views in list(matches.items()):
            if found.name != instrument:
                continue
            for view in views:
                with view._lock:
                    forgotten = view._attributes_aggregation.pop(key, None) is not None or forgotten
        return forgotten
    except (ImportError, AttributeError, KeyError, TypeError) as error:
        log.warning("cannot forget a metric series", instrument=instrument, error=repr(error))
        return False


_request_counters: list[Callable[[], int]] = []


def observe_api_requests(service: str, count: Callable[[], int]) -> None:
    """Export how many requests this process sent to the API server (benchmarks
    divide it by the objects reconciled). Several clients in one process add up."""

    def observe(_: CallbackOptions) -> Iterable[Observation]:
        yield Observation(sum(counter() for counter in _request_counters))

    if not _request_counters:
        meter(service).create_observable_counter(
            "rest_client_requests_total",
            callbacks=[observe],
            description="Requests sent to the Kubernetes API server.",
        )
    _request_counters.append(count)


_task_loops: list[asyncio.AbstractEventLoop] = []


def observe_asyncio_tasks(service: str, loop: asyncio.AbstractEventLoop) -> None:
    """Export the asyncio tasks alive on `loop`: Python's `go_goroutines`, so a soak
    shows a leak of tasks (a watch never cancelled, a request never ended) as growth."""

    def observe(_: CallbackOptions) -> Iterable[Observation]:
        yield Observation(sum(len(asyncio.all_tasks(known)) for known in _task_loops))

    if not _task_loops:
        meter(service).create_observable_gauge(
            "python_asyncio_tasks",
            callbacks=[observe],
            description="asyncio tasks not yet done, on the controller's event loop.",
        )
    if loop not in _task_loops:
        _task_loops.append(loop)


class _Sums:
    """A counter family whose sums are kept here, by label values, and read by the SDK
    only when /metrics is scraped (an observable counter: the same series a synchronous
    one gives). For what is counted on every request or step: `Counter.add` cleaned,
    hashed and aggregated the labels on each call, a tenth of a client's CPU per
    request (e2e/bench/client_cost.py). Process-wide, as the SDK's instruments are: two
    observers of one name add up."""

    def __init__(self, name: str, labels: tuple[str, ...], unit: str, description: str) -> None:
        self.name, self.labels, self.unit, self.description = name, labels, unit, description
        self.totals: dict[tuple[str, ...], float] = {}
        self._registered = False

    def register(self, service: str) -> None:
        if not self._registered:
            meter(service).create_observable_counter(
                self.name, callbacks=[self._observe], unit=self.unit, description=self.description
            )
            self._registered = True

    def add(self, key: tuple[str, ...], value: float) -> None:
        self.totals[key] = self.totals.get(key, 0) + value

    def _observe(self, _: CallbackOptions) -> Iterable[Observation]:
        # A copy, taken at once: the scrape runs on another thread than the requests.
        for key, value in dict(self.totals).items():
            yield Observation(value, dict(zip(self.labels, key, strict=True)))


_REQUESTS = _Sums(
    "sluice_api_requests_total",
    ("phase", "verb"),
    "",
    "API requests by reconcile phase (step) and verb.",
)
_REQUEST_SECONDS = _Sums(
    "sluice_api_request_seconds_total",
    ("phase", "verb"),
    "s",
    "Time waiting for API answers, by reconcile phase and verb.",
)
_STEP_SECONDS = _Sums(
    "sluice_step_seconds_total",
    ("kind", "step"),
    "s",
    "Wall time spent in each reconcile step (and the status write).",
)


class RequestMetrics:
    """A client's RequestObserver: requests and their time by reconcile phase and verb
    (`sluice_api_requests_total`, `sluice_api_request_seconds_total`), so a benchmark
    can say where a reconcile's requests go. Several observers in one process add up,
    as two clients adding to one counter did."""

    def __init__(self, service: str) -> None:
        _REQUESTS.register(service)
        _REQUEST_SECONDS.register(service)

    def requested(self, request: Request) -> None:
        key = (request.phase or "none", request.verb)
        _REQUESTS.add(key, 1)
        _REQUEST_SECONDS.add(key, request.seconds)


def exposition_pieces() -> Iterator[bytes]:
    """The Prometheus text format of every metric of this process, a piece at a time
    (see rendering): prometheus_client's own process and runtime families first, then
    the OpenTelemetry ones, in the order and bytes the OpenTelemetry exporter gave."""
    yield generate_latest(REGISTRY)
    if _provider is not None:
        yield from render(_reader.get_metrics_data())


def exposition() -> bytes:
    return b"".join(exposition_pieces())


@dataclass
class ControllerMetrics:
    kind: str
    reconcile_duration: Histogram
    reconcile_total: Counter
    queue_adds: Counter
    queue_depth_gauge: UpDownCounter
    queue_wait: Histogram
    queue_retries: Counter
    _depth: int = 0

    @classmethod
    def create(cls, *, service: str, kind: str) -> ControllerMetrics:
        m = meter(service)
        _STEP_SECONDS.register(service)
        return cls(
            kind=kind,
            reconcile_duration=m.create_histogram(
                "gotk_reconcile_duration_seconds",
                unit="s",
                description="The duration in seconds of a reconcile.",
            ),
            reconcile_total=m.create_counter(
                "controller_runtime_reconcile_total",
                description="Reconciles per controller and result.",
            ),
            queue_adds=m.create_counter(
                "workqueue_adds_total", description="Keys added to the work queue."
            ),
            queue_depth_gauge=m.create_up_down_counter(
                "workqueue_depth", description="Keys waiting in the work queue."
            ),
            queue_wait=m.create_histogram(
                "workqueue_queue_duration_seconds",
                unit="s",
                description="How long a key waited in the queue before a worker took it.",
            ),
            queue_retries=m.create_counter(
                "workqueue_retries_total", description="Keys requeued with backoff."
            ),
        )

    def stepped(self, step: str, seconds: float) -> None:
        _STEP_SECONDS.add((self.kind, step), seconds)

    def reconciled(self, *, name: str, namespace: str, seconds: float, result: str) -> None:
        self.reconcile_duration.record(
            seconds, {"kind": self.kind, "name": name, "namespace": namespace}
        )
        self.reconcile_total.add(1, {"controller": self.kind.lower(), "result": result})

    def forget(self, *, name: str, namespace: str) -> None:
        """The object is gone: its per-object series goes too (Flux's DeleteDuration)."""
        forget_series(
            "gotk_reconcile_duration_seconds",
            {"kind": self.kind, "name": name, "namespace": namespace},
        )

    # QueueObserver
    def added(self) -> None:
        self.queue_adds.add(1, {"name": self.kind.lower()})

    def depth(self, depth: int) -> None:
        self.queue_depth_gauge.add(depth - self._depth, {"name": self.kind.lower()})
        self._depth = depth

    def waited(self, seconds: float) -> None:
        self.queue_wait.record(seconds, {"name": self.kind.lower()})

    def retried(self) -> None:
        self.queue_retries.add(1, {"name": self.kind.lower()})
