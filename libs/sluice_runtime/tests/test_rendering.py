"""/metrics rendered a batch of points at a time is the OpenTelemetry exporter's text."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sluice_runtime.observing import rendering
from sluice_runtime.observing.rendering import render


def both(objects: int, odd_labels: bool) -> tuple[bytes, list[bytes]]:
    """The same instruments read by the exporter and by `render`."""
    registry = CollectorRegistry()
    exporter = PrometheusMetricReader(registry=registry)
    ours = InMemoryMetricReader()
    provider = MeterProvider(
        metric_readers=[exporter, ours],
        resource=Resource.create({"service.name": "test-controller"}),
        views=[
            View(
                instrument_name="gotk_reconcile_duration_seconds",
                aggregation=ExplicitBucketHistogramAggregation((0.01, 0.5, 1, 10, 600)),
            )
        ],
    )
    meter = provider.get_meter("sluice")
    duration = meter.create_histogram(
        "gotk_reconcile_duration_seconds", unit="s", description="The duration."
    )
    total = meter.create_counter("controller_runtime_reconcile_total", description="Reconciles.")
    seconds = meter.create_counter("sluice_step_seconds_total", unit="s", description="Step time.")
    depth = meter.create_up_down_counter("workqueue_depth", description="Keys waiting.")

    def observe(_: CallbackOptions) -> Iterable[Observation]:
        yield Observation(42)

    meter.create_observable_gauge("python_asyncio_tasks", callbacks=[observe], description="Tasks.")
    for i in range(objects):
        labels: dict[str, Any] = {"kind": "OCIRepository", "name": f"app-{i}", "namespace": "apps"}
        if odd_labels and i % 7 == 0:
            # Label values needing escapes, a non-string value, and a key only some
            # points have (the others must show it as "").
            labels = {**labels, "name": f'we"ird\\{i}\nname-é', "shard": i, "extra": True}
        duration.record(0.003 * i, labels)
        total.add(1, {"controller": "ocirepository", "result": "success" if i % 3 else "error"})
        seconds.add(0.25, {"kind": "OCIRepository", "step": f"step-{i % 4}"})
    depth.add(5, {"name": "ocirepository"})
    depth.add(-2, {"name": "ocirepository"})
    pieces = list(render(ours.get_metrics_data()))
    return generate_latest(registry), pieces


@pytest.mark.parametrize(
    ("objects", "odd_labels"),
    [
        pytest.param(1, False, id="one-object"),
        pytest.param(rendering.BATCH, False, id="exactly-one-batch"),
        pytest.param(rendering.BATCH * 3 + 7, False, id="several-batches"),
        pytest.param(rendering.BATCH * 2 + 1, True, id="escapes-and-missing-labels"),
    ],
)
def test_the_text_is_the_exporters_byte_for_byte(objects: int, odd_labels: bool) -> None:
    expected, pieces = both(objects, odd_labels)
    assert b"".join(pieces) == expected
    families = {f.name: f for f in text_string_to_metric_families(expected.decode())}
    durations = [
        s for s in families["gotk_reconcile_duration_seconds"].samples if s.name.endswith("_count")
    ]
    assert len(durations) == objects


def test_no_piece_holds_more_than_a_batch_of_points() -> None:
    _, pieces = both(1000, False)
    histogram_lines = rendering.BATCH * (5 + 1 + 2)  # buckets, +Inf, _count and _sum
    assert max(piece.count(b"\n") for piece in pieces) <= histogram_lines
