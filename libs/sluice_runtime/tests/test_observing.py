"""Metrics, logs and traces of real reconciles."""

from __future__ import annotations

import asyncio
import io
import json
import re

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sluice_runtime.kube.client import KubeClient
from sluice_runtime.observing import logging as sluice_logging
from sluice_runtime.observing.metrics import exposition, observe_asyncio_tasks
from sluice_runtime.reconciling.steps import Result, Step

from .conftest import GITREPO, RecordingContext, eventually, gitrepo, running_controller


async def chatty(ctx: RecordingContext) -> Result | None:
    ctx.log.info("step says hello", url=ctx.obj.spec.url)
    return None


async def test_every_log_line_of_a_reconcile_names_the_object(
    kube: KubeClient, namespace: str
) -> None:
    stream = io.StringIO()
    sluice_logging.configure(level="debug", encoding="json", stream=stream)
    try:
        step = Step(fn=chatty, name="chatty", conditions=())
        async with running_controller(kube, namespace, extra_steps=[step]) as harness:
            await kube.create(GITREPO, gitrepo("talker", namespace))
            await eventually(lambda: harness.journal.count(f"{namespace}/talker") == 1)
    finally:
        sluice_logging.configure(level="info", encoding="json")
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    hello = [line for line in lines if line.get("msg") == "step says hello"]
    assert len(hello) == 1
    line = hello[0]
    assert line["kind"] == "GitRepository"
    assert line["namespace"] == namespace
    assert line["name"] == "talker"
    assert len(line["reconcileID"]) == 12
    assert line["level"] == "info"
    assert line["url"] == "https://example.com/r.git"


async def test_reconciles_are_measured_and_traced(kube: KubeClient, namespace: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    async with running_controller(kube, namespace) as harness:
        await kube.create(GITREPO, gitrepo("measured", namespace))
        await eventually(lambda: harness.journal.count(f"{namespace}/measured") == 1)

    text = exposition().decode()
    assert (
        f'gotk_reconcile_duration_seconds_count{{kind="GitRepository",name="measured",'
        f'namespace="{namespace}"'
    ) in text
    assert 'controller_runtime_reconcile_total{controller="gitrepository"' in text
    assert 'result="success"' in text
    assert "workqueue_adds_total" in text

    spans = exporter.get_finished_spans()
    reconciles = [
        s for s in spans
        if s.name == "reconcile GitRepository"
        and s.attributes is not None
        and s.attributes.get("sluice.object.name") == "measured"
    ]  # fmt: skip
    assert len(reconciles) == 1
    root = reconciles[0]
    assert root.attributes is not None and root.attributes["sluice.reconcile.result"] == "success"
    assert root.attributes["sluice.object.kind"] == "GitRepository"
    assert root.attributes["k8s.namespace.name"] == namespace
    children = [
        s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id
    ]
    assert [s.name for s in children] == ["record"]


def asyncio_tasks() -> float:
    found = re.search(rb"^python_asyncio_tasks(?:\{[^}]*\})? ([0-9.e+]+)$", exposition(), re.M)
    assert found is not None, "python_asyncio_tasks is not exported"
    return float(found.group(1))


async def test_the_asyncio_tasks_alive_are_a_metric() -> None:
    observe_asyncio_tasks("test", asyncio.get_running_loop())
    before = asyncio_tasks()
    sleepers = [asyncio.create_task(asyncio.sleep(60)) for _ in range(50)]
    try:
        assert asyncio_tasks() >= before + 50
    finally:
        for sleeper in sleepers:
            sleeper.cancel()
        await asyncio.gather(*sleepers, return_exceptions=True)
    assert asyncio_tasks() <= before


async def test_a_deleted_objects_series_leaves_metrics(kube: KubeClient, namespace: str) -> None:
    """As Flux's DeleteDuration: with churn, series of objects long gone would pile up."""

    def series(name: str) -> bool:
        return (
            f'gotk_reconcile_duration_seconds_count{{kind="GitRepository",name="{name}",'
            f'namespace="{namespace}"'
        ) in exposition().decode()

    async with running_controller(kube, namespace) as harness:
        for name in ("doomed", "kept"):
            await kube.create(GITREPO, gitrepo(name, namespace))
        await eventually(lambda: series("doomed") and series("kept"), message="both measured")
        await kube.delete(GITREPO, "doomed", namespace=namespace)
        await eventually(lambda: f"{namespace}/doomed" in harness.journal.finalized)
        await eventually(lambda: not series("doomed"), message="the deleted object's series gone")
        assert series("kept")


async def test_an_object_gone_during_its_reconcile_leaves_no_series(
    kube: KubeClient, namespace: str
) -> None:
    """The delete event came first and the runner measured after it: the worker forgets."""
    gone = asyncio.Event()

    async def vanish(ctx: RecordingContext) -> Result | None:
        if ctx.obj.metadata.name == "vanishing":
            await kube.merge_patch(
                GITREPO, "vanishing", {"metadata": {"finalizers": None}}, namespace=namespace
            )
            await kube.delete(GITREPO, "vanishing", namespace=namespace)
            await gone.wait()  # the informer has dropped it and told the controller
        return None

    step = Step(fn=vanish, name="vanish", conditions=())
    async with running_controller(kube, namespace, extra_steps=[step]) as harness:
        harness.informers.get(GITREPO, selected=True).add_handler(
            lambda change: gone.set() if change.kind == "deleted" else None
        )
        await kube.create(GITREPO, gitrepo("vanishing", namespace))
        await eventually(gone.is_set, message="deleted mid-reconcile")
        await eventually(lambda: not harness.controller.queue.processing, message="reconcile over")
    assert 'name="vanishing"' not in exposition().decode()
