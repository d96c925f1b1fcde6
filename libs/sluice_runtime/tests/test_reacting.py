"""--trace-requests: a timeline per requested reconcile, none for bulk ones."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from sluice_runtime import lanes
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.observing import reacting

from .conftest import GITREPO, eventually, gitrepo, running_controller

REQUESTED_AT = "reconcile.fluxcd.io/requestedAt"


@pytest.mark.parametrize(
    ("samples", "start", "end", "expected"),
    [
        pytest.param([], 0.0, 1.0, {"samples": 0, "mean": 0.0, "max": 0.0, "late_share": 0.0},
                     id="no-samples"),
        pytest.param([(0.5, 0.1), (0.9, 0.3)], 0.0, 1.0,
                     {"samples": 2, "mean": 0.2, "max": 0.3, "late_share": 0.4}, id="two-inside"),
        pytest.param([(0.5, 0.1), (2.0, 0.9)], 0.0, 1.0,
                     {"samples": 1, "mean": 0.1, "max": 0.1, "late_share": 0.1},
                     id="outside-the-window-left-out"),
        pytest.param([(0.1, 0.6), (0.2, 0.6)], 0.0, 1.0,
                     {"samples": 2, "mean": 0.6, "max": 0.6, "late_share": 1.0}, id="share-capped"),
    ],
)  # fmt: skip
def test_lag_between(
    samples: list[tuple[float, float]], start: float, end: float, expected: dict[str, float]
) -> None:
    assert reacting.lag_between(samples, start, end) == pytest.approx(expected)


async def traced_requested_reconcile(
    kube: KubeClient, namespace: str, trace: Path, ready: lanes.ReadyLanes | None = None
) -> dict[str, Any]:
    """A GitRepository's first (bulk) reconcile and one requested after it, traced to
    `trace`: the one timeline written."""
    reacting.enable(str(trace), ready)
    stop = kube.observe(reacting.RequestTimes())
    try:
        async with running_controller(kube, namespace) as harness:
            await kube.create(GITREPO, gitrepo("app", namespace))
            key = f"{namespace}/app"
            await eventually(lambda: harness.journal.count(key) == 1, message="first reconcile")
            await kube.merge_patch(
                GITREPO, "app", {"metadata": {"annotations": {REQUESTED_AT: "now"}}},
                namespace=namespace,
            )  # fmt: skip
            await eventually(lambda: trace.exists() and trace.read_text().count("\n") == 1)
    finally:
        stop()
        reacting.disable()
    (line,) = [json.loads(text) for text in trace.read_text().splitlines()]
    assert isinstance(line, dict)
    return line


async def test_a_requested_reconcile_leaves_a_timeline_and_a_bulk_one_none(
    kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    line = await traced_requested_reconcile(kube, namespace, tmp_path / "requests.jsonl")
    assert (line["kind"], line["key"], line["cause"]) == ("GitRepository", f"{namespace}/app",
                                                          "requestedAt")  # fmt: skip
    assert line["queued"] <= line["started"] <= line["ended"]
    assert [name for name, _, _ in line["steps"]] == ["record", "status"]
    assert [(verb, phase) for _, _, verb, phase, _, _ in line["requests"]] == [("patch", "status")]


async def test_a_requested_reconcile_counts_its_callbacks_in_the_loop(
    kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """Its steps' resumptions and its status write's I/O (on the requested lane's own
    connections) are the loop callbacks it ran, each timed in the ready queue."""
    loop = asyncio.get_running_loop()
    ready = lanes.prioritize(loop)
    try:
        line = await traced_requested_reconcile(kube, namespace, tmp_path / "requests.jsonl", ready)
    finally:
        lanes.prioritize(loop, requested_first=False)  # as asyncio's own, for the tests after
    assert line["wakeups"] > 1  # at least its step and its status write's answer
    assert line["bulk_passed"] >= 0 and line["ready_wait"] >= 0
    assert ready is not None and ready.observer is None  # disabled with the trace
