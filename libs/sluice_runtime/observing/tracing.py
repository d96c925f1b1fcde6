"""Traces: one span per reconcile, a child span per step, made by the runner.

Off unless the standard OpenTelemetry environment asks for an exporter
(`OTEL_TRACES_EXPORTER=otlp|console`, or an `OTEL_EXPORTER_OTLP_*ENDPOINT`);
with nothing configured the API's no-op tracer costs next to nothing.
"""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

_configured = False


def configure(service: str) -> bool:
    """Install a tracer provider when the environment asks for one; True if it did."""
    global _configured
    if _configured:
        return True
    exporter_name = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if exporter_name in ("", "none") and not endpoint:
        return False
    if exporter_name == "none":
        return False
    exporter: SpanExporter
    if exporter_name == "console":
        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service)})
    )
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _configured = True
    return True


def tracer() -> trace.Tracer:
    return trace.get_tracer("sluice")


def shutdown() -> None:
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.shutdown()
