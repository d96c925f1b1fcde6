"""Events reach both `kubectl describe` and the notification endpoint."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio
from aiohttp import web

from sluice_runtime.endpoints import serving
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import EVENT
from sluice_runtime.reconciling.errors import StepError
from sluice_runtime.reconciling.steps import Result, Step
from sluice_runtime.recording import EventRecorder
from sluice_runtime.tokens import TokenFile

from .conftest import GITREPO, RecordingContext, eventually, gitrepo, running_controller


@pytest_asyncio.fixture(loop_scope="session")
async def event_sink() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []

    async def accept(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.Response(status=202)

    app = web.Application()
    app.router.add_post("/", accept)
    async with serving(app, "127.0.0.1:0") as runner:
        port = runner.addresses[0][1]
        yield f"http://127.0.0.1:{port}/", received


async def test_ready_transitions_become_events_and_notifications(
    kube: KubeClient, namespace: str, event_sink: tuple[str, list[dict[str, Any]]]
) -> None:
    addr, received = event_sink
    failing = {"on": True}

    async def flaky(ctx: RecordingContext) -> Result | None:
        ctx.event_metadata["revision"] = "main@sha1:abc"
        if failing["on"]:
            raise StepError("GitOperationFailed", "connection refused", condition="FetchFailed")
        return None

    step = Step(fn=flaky, name="flaky", conditions=("FetchFailed",))
    async with running_controller(kube, namespace, extra_steps=[step], events_addr=addr) as harness:
        await kube.create(GITREPO, gitrepo("noisy", namespace))
        await eventually(lambda: harness.controller.queue.failures(f"{namespace}/noisy") >= 3)
        failing["on"] = False
        await eventually(lambda: len(received) >= 2, message="two notifications")

        async def k8s_events() -> list[dict[str, Any]]:
            listed = await kube.list(EVENT, namespace=namespace)
            return [e for e in listed.items if e["involvedObject"]["name"] == "noisy"]

        async def both_recorded() -> bool:
            return {e["reason"] for e in await k8s_events()} == {"GitOperationFailed", "Succeeded"}

        await eventually(both_recorded, message="both Kubernetes events")

    # Three failures with the same message are one transition: one event each way.
    assert [(e["severity"], e["reason"]) for e in received] == [
        ("error", "GitOperationFailed"),
        ("info", "Succeeded"),
    ]
    first = received[0]
    assert first["involvedObject"]["kind"] == "GitRepository"
    assert first["involvedObject"]["name"] == "noisy"
    assert first["involvedObject"]["namespace"] == namespace
    assert first["involvedObject"]["apiVersion"] == "source.toolkit.fluxcd.io/v1"
    assert first["involvedObject"]["uid"]
    assert first["message"] == "connection refused"
    assert first["metadata"] == {"source.toolkit.fluxcd.io/revision": "main@sha1:abc"}
    assert first["reportingController"] == "test-controller"
    assert first["timestamp"].endswith("Z")

    events = {e["reason"]: e for e in await k8s_events()}
    assert events["GitOperationFailed"]["type"] == "Warning"
    assert events["GitOperationFailed"]["message"] == "connection refused"
    assert events["Succeeded"]["type"] == "Normal"
    assert events["Succeeded"]["source"]["component"] == "test-controller"


async def test_events_carry_the_current_token_from_the_token_file(
    kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """The hub authenticates producers; the token is re-read as the kubelet rotates it."""
    authorizations: list[str | None] = []

    async def accept(request: web.Request) -> web.Response:
        authorizations.append(request.headers.get("Authorization"))
        return web.Response(status=202)

    app = web.Application()
    app.router.add_post("/", accept)
    token = tmp_path / "token"
    token.write_text("first-token\n")
    async with serving(app, "127.0.0.1:0") as runner:
        recorder = EventRecorder(
            kube,
            controller="test-controller",
            events_addr=f"http://127.0.0.1:{runner.addresses[0][1]}/",
            events_token=TokenFile(token),
        )
        obj = gitrepo("rotating", namespace)
        async with recorder.running():
            recorder.for_object(obj).normal("One", "first")
            await eventually(lambda: len(authorizations) == 1, message="first event")
            rotated = tmp_path / "token.new"
            rotated.write_text("second-token")
            os.replace(rotated, token)
            recorder.for_object(obj).normal("Two", "second")
            await eventually(lambda: len(authorizations) == 2, message="second event")
    assert authorizations == ["Bearer first-token", "Bearer second-token"]


async def test_events_of_many_objects_are_written_at_once_and_repeats_still_count(
    kube: KubeClient, namespace: str
) -> None:
    """Under load Events must keep up with Ready: objects' Events go out several at a
    time, while each object's repeats are counted on the Event its first one made."""
    recorder = EventRecorder(kube, controller="test-controller", senders=4)
    objects = [
        {**gitrepo(f"app-{i}", namespace), "metadata": {"name": f"app-{i}",
         "namespace": namespace, "uid": f"uid-{i}"}}
        for i in range(24)
    ]  # fmt: skip
    async with recorder.running():
        for obj in objects:
            recorder.for_object(obj).normal("Progressing", "applying")
        for _ in range(3):
            recorder.for_object(objects[0]).normal("ReconciliationSucceeded", "applied")
        await recorder.flushed()

    assert recorder.in_flight_peak > 1, "Events were written one at a time"
    assert recorder.in_flight_peak <= 4, "no more at once than the recorder's senders"
    listed = [
        e for e in (await kube.list(EVENT, namespace=namespace)).items
        if e["source"]["component"] == "test-controller"
    ]  # fmt: skip
    progressing = {e["involvedObject"]["name"] for e in listed if e["reason"] == "Progressing"}
    assert progressing == {f"app-{i}" for i in range(24)}
    [repeated] = [e for e in listed if e["reason"] == "ReconciliationSucceeded"]
    assert repeated["count"] == 3
