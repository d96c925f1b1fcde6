"""The probes and /metrics answer from a thread, whatever the event loop is doing."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from sluice_runtime.endpoints import Heartbeat, probing
from sluice_runtime.observing.metrics import ControllerMetrics

from .conftest import eventually


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


class Clock:
    """A monotonic clock the test moves: staleness without waiting for it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_probes_and_metrics_answer_while_the_loop_is_blocked() -> None:
    metrics = ControllerMetrics.create(service="test", kind="GitRepository")
    metrics.reconciled(name="blocked", namespace="probes", seconds=0.5, result="success")
    clock = Clock()
    heartbeat = Heartbeat(every=0.05, stale_after=30, clock=clock)
    async with (
        heartbeat.beating(),
        probing("127.0.0.1:0", heartbeat=heartbeat, metrics=True) as port,
    ):

        def blocked() -> list[tuple[int, str]]:
            # Runs on the loop's own thread: nothing else on the loop runs until it returns.
            answers = [get(port, "/healthz"), get(port, "/readyz"), get(port, "/metrics")]
            clock.now += 31  # the loop has now been stuck past the bound
            return [*answers, get(port, "/healthz"), get(port, "/readyz")]

        healthz, readyz, scraped, stale, still_ready = blocked()
        assert healthz == (200, "ok")
        assert readyz == (200, "ok")
        assert scraped[0] == 200
        families = {f.name: f for f in text_string_to_metric_families(scraped[1])}
        assert any(
            s.labels.get("name") == "blocked"
            for s in families["gotk_reconcile_duration_seconds"].samples
        )
        assert stale[0] == 500
        assert "event loop stalled: its last heartbeat was 31.0s ago (more than 30s)" in stale[1]
        # Readiness is what the loop last published; a stalled loop is liveness's matter.
        assert still_ready == (200, "ok")

        # Once the loop runs again its next beat makes it live again.
        async def live() -> bool:
            return (await asyncio.to_thread(get, port, "/healthz")) == (200, "ok")

        await eventually(live, message="healthz back to 200 once the loop beats")


async def test_a_loop_stuck_in_a_synchronous_call_fails_liveness() -> None:
    heartbeat = Heartbeat(every=0.05, stale_after=0.3)
    async with heartbeat.beating(), probing("127.0.0.1:0", heartbeat=heartbeat) as port:
        await asyncio.sleep(0.1)

        def wedged() -> tuple[int, str]:
            # A synchronous wait on the loop (as a blocking call in a reconcile would be),
            # asking the probe until it reports the stall.
            deadline = time.monotonic() + 20
            answer = get(port, "/healthz")
            while answer[0] == 200 and time.monotonic() < deadline:
                time.sleep(0.05)
                answer = get(port, "/healthz")
            return answer

        status, text = wedged()
        assert status == 500
        assert "event loop stalled" in text


async def test_readiness_is_what_the_loop_last_saw() -> None:
    state = {"ready": False}
    heartbeat = Heartbeat(lambda: state["ready"], every=0.05)
    async with heartbeat.beating(), probing("127.0.0.1:0", heartbeat=heartbeat) as port:
        assert await asyncio.to_thread(get, port, "/readyz") == (503, "informers not synced")
        state["ready"] = True

        async def ready() -> bool:
            return (await asyncio.to_thread(get, port, "/readyz")) == (200, "ok")

        await eventually(ready, message="readyz 200 after the next beat")


async def test_an_address_serves_only_what_it_was_given() -> None:
    heartbeat = Heartbeat()
    async with (
        heartbeat.beating(),
        probing("127.0.0.1:0", heartbeat=heartbeat) as health,
        probing("127.0.0.1:0", metrics=True) as metrics,
    ):
        assert (await asyncio.to_thread(get, health, "/metrics"))[0] == 404
        assert (await asyncio.to_thread(get, metrics, "/healthz"))[0] == 404
        assert (await asyncio.to_thread(get, metrics, "/metrics"))[0] == 200
        assert (await asyncio.to_thread(get, health, "/nope"))[0] == 404
