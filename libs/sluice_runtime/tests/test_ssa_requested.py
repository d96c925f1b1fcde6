"""A requested apply (a webhook's push) reads the live object alongside its dry-run.

Against the real API server: the order of the requests is what is checked
(the read sent before the dry-run is answered), never how long they took.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from sluice_runtime import lanes
from sluice_runtime.kube.attributing import Request
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import CONFIG_MAP
from sluice_runtime.ssa.changeset import Action, ChangeSet
from sluice_runtime.ssa.manager import ResourceManager

from .test_ssa_manager import configmap, make_manager


class Sent:
    """Each request's verb, and when it was sent and answered (monotonic)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, float, float]] = []

    def requested(self, request: Request) -> None:
        answered = time.monotonic()
        self.requests.append((request.verb, answered - request.seconds, answered))

    def one(self, verb: str) -> tuple[float, float]:
        found = [(sent, answered) for v, sent, answered in self.requests if v == verb]
        assert len(found) == 1, self.requests
        return found[0]


async def as_requested(work: Callable[[], Awaitable[ChangeSet]]) -> ChangeSet:
    """Run `work` in a task of its own marked as serving requests (the mark stays there)."""

    async def marked() -> ChangeSet:
        lanes.serving_requests()
        return await work()

    return await asyncio.get_running_loop().create_task(marked())


@pytest.mark.parametrize(
    ("requested", "read_before_the_dry_run_answered"),
    [
        pytest.param(True, True, id="requested-reads-alongside"),
        pytest.param(False, False, id="bulk-reads-after"),
    ],
)
async def test_a_changed_object_is_read_alongside_its_dry_run_only_when_requested(
    kube: KubeClient, namespace: str, requested: bool, read_before_the_dry_run_answered: bool
) -> None:
    manager: ResourceManager = make_manager(kube, namespace)
    await manager.apply_all_staged([configmap("app", namespace, {"version": "1"})])
    sent = Sent()
    stop = kube.observe(sent)
    try:

        async def apply() -> ChangeSet:
            return await manager.apply_all_staged([configmap("app", namespace, {"version": "2"})])

        changeset = await (as_requested(apply) if requested else apply())
    finally:
        stop()
    assert [str(e.action) for e in changeset.entries] == [str(Action.CONFIGURED)]
    live = await kube.get(CONFIG_MAP, "app", namespace)
    assert live["data"] == {"version": "2"}
    assert sorted(v for v, _, _ in sent.requests) == ["apply", "dry-run", "get"]
    read_sent, _ = sent.one("get")
    _, dry_run_answered = sent.one("dry-run")
    assert (read_sent < dry_run_answered) is read_before_the_dry_run_answered


async def test_a_requested_create_uses_no_read(kube: KubeClient, namespace: str) -> None:
    """A create's dry-run shows nothing exists: the early read is dropped, and the
    object is created as in bulk."""
    manager = make_manager(kube, namespace)
    changeset = await as_requested(
        lambda: manager.apply_all_staged([configmap("fresh", namespace, {"version": "1"})])
    )
    assert [str(e.action) for e in changeset.entries] == [str(Action.CREATED)]
    assert (await kube.get(CONFIG_MAP, "fresh", namespace))["data"] == {"version": "1"}
