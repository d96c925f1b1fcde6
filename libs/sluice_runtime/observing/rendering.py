"""The Prometheus text format of this process's metrics, rendered a few series at a time.

The OpenTelemetry Prometheus exporter turns every data point into prometheus_client
samples first and the text second: with 1,000 objects' reconcile histograms that is
17,000 sample objects (about 8 MiB) and 3 MB of text built at once, on every scrape.
Here the SDK's own data points are rendered in batches of `BATCH` points, each batch
through the same prometheus_client families and `generate_latest` the exporter uses
(so the bytes are the exporter's, which a test compares), and each batch is handed
to the caller before the next is built.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain
from typing import Any

from opentelemetry.exporter.prometheus._mapping import (
    map_unit,
    sanitize_attribute,
    sanitize_full_name,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    Sum,
)
from prometheus_client import generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
)
from prometheus_client.core import Metric as Family
from prometheus_client.registry import Collector

_Factory = type[CounterMetricFamily] | type[GaugeMetricFamily] | type[HistogramMetricFamily]

BATCH = 50
"""Data points per rendered piece: a histogram point is 17 lines, about 2.5 KB of text."""


class _One(Collector):
    def __init__(self, family: Family) -> None:
        self.family = family

    def collect(self) -> Iterable[Family]:
        return (self.family,)


def _text(family: Family) -> bytes:
    return generate_latest(_One(family))


def _label_value(value: Any) -> str:
    # As the exporter: strings as they are, anything else as JSON.
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _scope_labels(metrics_data: MetricsData) -> Iterator[tuple[Metric, dict[str, Any]]]:
    for resource_metrics in metrics_data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            scope = scope_metrics.scope
            labels: dict[str, Any] = {
                f"otel_scope_{key}": value for key, value in (scope.attributes or {}).items()
            }
            labels["otel_scope_name"] = scope.name or ""
            labels["otel_scope_version"] = scope.version or ""
            labels["otel_scope_schema_url"] = scope.schema_url or ""
            for metric in scope_metrics.metrics:
                yield metric, labels


def _family_type(metric: Metric) -> _Factory | None:
    data = metric.data
    if isinstance(data, Sum):
        # Prometheus's compatibility rules: a cumulative sum that can go down is a gauge.
        cumulative = data.aggregation_temporality == AggregationTemporality.CUMULATIVE
        return GaugeMetricFamily if cumulative and not data.is_monotonic else CounterMetricFamily
    if isinstance(data, Gauge):
        return GaugeMetricFamily
    if isinstance(data, Histogram):
        return HistogramMetricFamily
    return None


def _labels(point: Any, scope: Mapping[str, Any]) -> dict[str, str]:
    return {
        sanitize_attribute(key): _label_value(value)
        for key, value in chain(scope.items(), (point.attributes or {}).items())
    }


def _add(family: Any, values: list[str], point: Any) -> None:
    if isinstance(point, HistogramDataPoint):
        running, buckets = 0, []
        bounds = chain(point.explicit_bounds, ["+Inf"])
        for bound, count in zip(bounds, point.bucket_counts, strict=False):
            running += count
            buckets.append((f"{bound}", running))
        family.add_metric(labels=values, buckets=buckets, sum_value=point.sum)
    else:
        family.add_metric(labels=values, value=point.value)


def _render_family(
    name: str,
    documentation: str,
    unit: str,
    factory: _Factory,
    members: Sequence[tuple[Metric, dict[str, Any]]],
) -> Iterator[bytes]:
    """One family (every metric the exporter would merge into it): the header, then
    its samples `BATCH` points at a time. Label names are the union over every point
    (missing ones are ""), as the exporter backfills them."""
    keys: set[str] = set()
    for metric, scope in members:
        for point in metric.data.data_points:
            keys.update(sanitize_attribute(key) for key in chain(scope, point.attributes or {}))
    label_keys = sorted(keys)

    def empty() -> Any:
        return factory(name=name, documentation=documentation, labels=label_keys, unit=unit)

    header = _text(empty())
    yield header
    points = ((point, scope) for metric, scope in members for point in metric.data.data_points)
    while True:
        family = empty()
        for _, (point, scope) in zip(range(BATCH), points, strict=False):
            labels = _labels(point, scope)
            _add(family, [labels.get(key, "") for key in label_keys], point)
        if not family.samples:
            return
        # The same family rendered again, minus the header already sent.
        yield _text(family)[len(header) :]


def render(metrics_data: MetricsData | None) -> Iterator[bytes]:
    """The exporter's text for `metrics_data`: `target_info`, then one family per
    (name, description, unit, type), in the order first seen."""
    if metrics_data is None or not metrics_data.resource_metrics:
        return
    resource: dict[str, Any] = {}
    for resource_metrics in metrics_data.resource_metrics:
        resource.update(resource_metrics.resource.attributes)
    info = {sanitize_attribute(key): _label_value(value) for key, value in resource.items()}
    target = InfoMetricFamily("target", "Target metadata", labels=list(info))
    target.add_metric(labels=list(info), value=info)
    yield _text(target)

    # The exporter's family key: metrics alike in all four share one HELP/TYPE.
    families: dict[tuple[str, str, str, _Factory], list[tuple[Metric, dict[str, Any]]]] = {}
    for metric, scope in _scope_labels(metrics_data):
        factory = _family_type(metric)
        if factory is None:
            continue
        name, unit = sanitize_full_name(metric.name), map_unit(metric.unit or "")
        key = (name, metric.description or "", unit, factory)
        families.setdefault(key, []).append((metric, scope))
    for (name, documentation, unit, factory), members in families.items():
        yield from _render_family(name, documentation, unit, factory, members)
