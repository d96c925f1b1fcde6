"""Fixtures for runtime tests against the real API server.

The runtime is exercised with a small recording reconciler over
GitRepository objects (a kind with interval, suspend and generation); it
fetches nothing, since what is under test is the informer, the queue and
the runner, not the source-controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio

from sluice_api import GitRepository
from sluice_runtime.controller import Controller, Informers
from sluice_runtime.informing.queueing import ExponentialBackoff
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import ResourceType
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import ReconcileContext, Result, Step
from sluice_runtime.recording import EventRecorder

GITREPO = ResourceType.of_model(GitRepository)


async def eventually(
    check: Callable[[], Awaitable[bool]] | Callable[[], bool],
    *,
    timeout: float = 20.0,
    interval: float = 0.05,
    message: str = "condition not met",
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{message} within {timeout}s")
        await asyncio.sleep(interval)


def gitrepo(
    name: str, namespace: str, *, url: str = "https://example.com/r.git", **spec: Any
) -> JSON:
    return {
        "apiVersion": GitRepository.api_version_str(),
        "kind": "GitRepository",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"url": url, "interval": "1h", **spec},
    }


@dataclass(kw_only=True)
class RecordingContext(ReconcileContext[GitRepository]):
    """The test reconciler's context; `journal` is shared across reconciles."""

    journal: Journal


@dataclass
class Journal:
    """What the recording reconciler saw: per key, the spec URLs it reconciled."""

    urls: dict[str, list[str]] = field(default_factory=dict)
    active: dict[str, int] = field(default_factory=dict)
    max_parallel_per_key: int = 0
    finalized: list[str] = field(default_factory=list)

    def count(self, key: str) -> int:
        return len(self.urls.get(key, []))


StepBody = Callable[[RecordingContext], Awaitable[Result | None]]


def recording_reconciler(
    journal: Journal, *, extra_steps: list[Step[RecordingContext]] | None = None, delay: float = 0
) -> Reconciler[RecordingContext]:
    async def record(ctx: RecordingContext) -> Result | None:
        key = ctx.obj.key
        ctx.journal.active[key] = ctx.journal.active.get(key, 0) + 1
        ctx.journal.max_parallel_per_key = max(
            ctx.journal.max_parallel_per_key, ctx.journal.active[key]
        )
        try:
            if delay:
                await asyncio.sleep(delay)
            ctx.journal.urls.setdefault(key, []).append(ctx.obj.spec.url)
            ctx.ready_message = f"recorded {ctx.obj.spec.url}"
        finally:
            ctx.journal.active[key] -= 1
        return None

    async def finalize(ctx: RecordingContext) -> None:
        ctx.journal.finalized.append(ctx.obj.key)

    steps: list[Step[RecordingContext]] = [Step(fn=record, name="record", conditions=())]
    steps += extra_steps or []

    context = functools.partial(RecordingContext, journal=journal)
    return Reconciler(
        model=GitRepository,
        steps=steps,
        context=context,
        finalize=finalize,
        negative_conditions=("FetchFailed",),
    )


@dataclass
class Harness:
    controller: Controller[RecordingContext]
    informers: Informers
    journal: Journal
    recorder: EventRecorder


@contextlib.asynccontextmanager
async def running_controller(
    client: KubeClient,
    namespace: str,
    *,
    journal: Journal | None = None,
    extra_steps: list[Step[RecordingContext]] | None = None,
    concurrency: int = 4,
    delay: float = 0,
    backoff: ExponentialBackoff | None = None,
    events_addr: str | None = None,
) -> AsyncIterator[Harness]:
    journal = journal or Journal()
    informers = Informers(client, namespace=namespace)
    recorder = EventRecorder(client, controller="test-controller", events_addr=events_addr)
    async with recorder.running():
        controller = Controller(
            recording_reconciler(journal, extra_steps=extra_steps, delay=delay),
            client=client,
            informers=informers,
            recorder=recorder,
            concurrency=concurrency,
            backoff=backoff,
        )
        await informers.start()
        await informers.wait_synced()
        await controller.start()
        try:
            yield Harness(controller, informers, journal, recorder)
        finally:
            await controller.stop(deadline=5)
            await informers.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def harness(kube: KubeClient, namespace: str) -> AsyncIterator[Harness]:
    async with running_controller(kube, namespace) as running:
        yield running
