"""API requests and helm processes per HelmRelease, counted (counts, not timings).

A released HelmRelease reconciled again with nothing changed must start no
helm process and send at most two API requests on its behalf: the read of
Helm's storage (a release changed out of band, `helm rollback` by a person,
is a change) and the status patch that records the handled request.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable

from sluice_runtime.helming import running
from sluice_runtime.kube.attributing import Request

from .conftest import HELMCHART, HELMRELEASE, HelmDelivery


class Requests:
    """Requests the helm-controller sent for one HelmRelease, by (phase, verb)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.counts: Counter[tuple[str, str]] = Counter()

    def requested(self, request: Request) -> None:
        if request.key == self.key:
            self.counts[(request.phase, request.verb)] += 1

    def total(self) -> int:
        return sum(self.counts.values())


async def until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def test_a_steady_reconcile_starts_no_helm_and_sends_two_requests(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    await d.helm_release("web", values={"greeting": "hi"})
    await d.observe.wait_ready(HELMRELEASE, "web", timeout=60)
    # Whatever the install's own status writes and chart events queued has run.
    await d.observe.poke(HELMRELEASE, "web", "settled")

    counted = Requests(f"{d.namespace}/web")
    stop = d.helm_controller.client.observe(counted)
    runs = sum(running.RUNS.values())
    try:
        await d.observe.poke(HELMRELEASE, "web", "steady")
        await until(lambda: counted.counts[("status", "patch")] >= 1, "no status patch counted")
    finally:
        stop()
    shown = sorted(counted.counts.items())
    assert sum(running.RUNS.values()) == runs, dict(running.RUNS)
    # Helm's storage read once; the HelmChart it owns is as the cache shows it
    # was applied, so it is not applied again.
    assert counted.total() <= 2, shown
    assert ("reconcile_chart", "apply") not in counted.counts, shown


async def test_a_helmchart_changed_by_someone_else_is_applied_again(
    helm_delivery: HelmDelivery,
) -> None:
    """Not applying an unchanged HelmChart must not leave one someone edited as edited."""
    d = helm_delivery
    ns = d.namespace
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    await d.helm_release("web", values={"greeting": "hi"})
    await d.observe.wait_ready(HELMRELEASE, "web", timeout=60)
    await d.observe.poke(HELMRELEASE, "web", "settled")
    name = f"{ns}-web"
    await d.kube.merge_patch(HELMCHART, name, {"spec": {"version": "0.1.0"}}, namespace=ns)
    await d.observe.poke(HELMRELEASE, "web", "after-edit")
    await d.observe.wait(
        HELMCHART, name, lambda o: o["spec"]["version"] == "*", what="the spec applied again"
    )
