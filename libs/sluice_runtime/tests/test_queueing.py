"""The work queue's contract, unit-tested without an API server."""

from __future__ import annotations

import asyncio

import pytest

from sluice_runtime.controller import requested
from sluice_runtime.informing.queueing import ExponentialBackoff, Lane, QueueShutDown, WorkQueue
from sluice_runtime.informing.watching import Change

REQUESTED = "reconcile.fluxcd.io/requestedAt"


async def test_a_key_added_twice_is_handed_out_once() -> None:
    queue = WorkQueue()
    queue.add("ns/a")
    queue.add("ns/a")
    queue.add("ns/b")
    assert len(queue) == 2
    assert await queue.get() == "ns/a"
    assert await queue.get() == "ns/b"
    assert len(queue) == 0


async def test_a_key_being_processed_is_not_handed_to_a_second_worker() -> None:
    queue = WorkQueue()
    queue.add("ns/a")
    key = await queue.get()
    queue.add("ns/a")  # changed while a worker has it
    assert len(queue) == 0, "must not be queued while processing"
    second = asyncio.create_task(queue.get())
    await asyncio.sleep(0.01)
    assert not second.done()
    queue.done(key)
    assert await asyncio.wait_for(second, 1) == "ns/a"


async def test_done_without_new_adds_does_not_requeue() -> None:
    queue = WorkQueue()
    queue.add("ns/a")
    queue.done(await queue.get())
    assert len(queue) == 0


async def test_add_after_keeps_the_earliest_time() -> None:
    queue = WorkQueue()
    queue.start()
    queue.add_after("ns/a", 30)
    queue.add_after("ns/a", 0.05)
    queue.add_after("ns/a", 60)
    assert await asyncio.wait_for(queue.get(), 2) == "ns/a"
    queue.shutdown()


async def test_cancel_delayed_drops_a_scheduled_key() -> None:
    queue = WorkQueue()
    queue.start()
    queue.add_after("ns/a", 0.05)
    queue.cancel_delayed("ns/a")
    await asyncio.sleep(0.15)
    assert len(queue) == 0
    queue.shutdown()


@pytest.mark.parametrize(
    ("failures", "expected"),
    [
        pytest.param(0, 0.75, id="first-retry-min-delay"),
        pytest.param(1, 1.5, id="doubles"),
        pytest.param(4, 12.0, id="fifth"),
        pytest.param(40, 900.0, id="capped"),
    ],
)
def test_backoff_doubles_per_failure_up_to_the_cap(failures: int, expected: float) -> None:
    backoff = ExponentialBackoff(base=0.75, cap=900)
    for _ in range(failures):
        backoff.next_delay("k")
    assert backoff.next_delay("k") == expected


def test_backoff_is_per_key_and_forget_resets_it() -> None:
    backoff = ExponentialBackoff(base=1, cap=100)
    for _ in range(5):
        backoff.next_delay("broken")
    assert backoff.next_delay("healthy") == 1
    backoff.forget("broken")
    assert backoff.next_delay("broken") == 1


async def test_shutdown_releases_waiting_workers() -> None:
    queue = WorkQueue()
    waiters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await asyncio.sleep(0.01)
    queue.shutdown()
    for waiter in waiters:
        with pytest.raises(QueueShutDown):
            await asyncio.wait_for(waiter, 1)


async def test_each_idle_worker_gets_a_different_key() -> None:
    queue = WorkQueue()
    waiters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await asyncio.sleep(0.01)
    for key in ("a", "b", "c"):
        queue.add(key)
    got = await asyncio.wait_for(asyncio.gather(*waiters), 1)
    assert sorted(got) == ["a", "b", "c"]


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("schedule", "due"),
    [
        pytest.param([("add_after", 30)], 30, id="scheduled"),
        pytest.param([("add_after", 30), ("add_after", 120)], 30, id="add-keeps-earliest"),
        # A dependency wait of 30 s, then a failure with retryInterval 2m: 2m wins.
        pytest.param([("add_after", 30), ("requeue_after", 120)], 120, id="requeue-replaces"),
        pytest.param([("add_after", 300), ("requeue_after", 120)], 120, id="requeue-sooner"),
        pytest.param([("add_after", 30), ("cancel_delayed", None)], None, id="cancelled"),
        # Backoff replaces a pending interval too: 0.75 s is the first retry.
        pytest.param([("add_after", 600), ("add_rate_limited", None)], 0.75, id="backoff"),
    ],
)
def test_due_in_by_the_queues_clock(schedule: list[tuple[str, float | None]], due: float) -> None:
    clock = ManualClock()
    queue = WorkQueue(clock=clock)
    for method, delay in schedule:
        args = (delay,) if delay is not None else ()
        getattr(queue, method)("ns/a", *args)
    assert queue.due_in("ns/a") == due
    if due is not None:
        clock.now += 10
        assert queue.due_in("ns/a") == max(0.0, due - 10)


async def test_a_replaced_schedule_never_fires_early() -> None:
    clock = ManualClock()
    queue = WorkQueue(clock=clock)
    queue.start()
    queue.add_after("ns/a", 30)
    queue.requeue_after("ns/a", 120)
    clock.now += 31
    queue.add_after("ns/b", 500)  # wakes the timer, which now reads 31 s later
    await asyncio.sleep(0.05)
    assert len(queue) == 0, "the replaced 30 s timer must not fire"
    clock.now += 90
    queue.add_after("ns/c", 500)
    assert await asyncio.wait_for(queue.get(), 2) == "ns/a"
    assert len(queue) == 0
    queue.shutdown()


R, F, N = Lane.REQUESTED, Lane.FOLLOW_UP, Lane.NORMAL


@pytest.mark.parametrize(
    ("adds", "order"),
    [
        pytest.param([("a", N), ("b", N), ("c", R)], ["c", "a", "b"], id="requested-goes-first"),
        pytest.param([("a", N), ("b", N), ("b", R)], ["b", "a"], id="waiting-key-moves-ahead"),
        pytest.param([("u1", R), ("a", N), ("u2", R)], ["u1", "u2", "a"], id="requested-in-order"),
        pytest.param([("a", R), ("a", N)], ["a"], id="requested-then-normal-is-one-key"),
        pytest.param([("a", N), ("b", R), ("b", R)], ["b", "a"], id="requested-twice-is-one-key"),
        pytest.param([("a", N), ("b", N)], ["a", "b"], id="otherwise-fifo"),
        # A health re-check of an applied app goes ahead of first reconciles...
        pytest.param([("new", N), ("check", F)], ["check", "new"], id="follow-up-before-normal"),
        pytest.param([("f1", F), ("n", N), ("f2", F)], ["f1", "f2", "n"], id="follow-ups-in-order"),
        # ... and behind what someone asked for.
        pytest.param(
            [("check", F), ("push", R)], ["push", "check"], id="requested-before-follow-up"
        ),
        pytest.param(
            [("n", N), ("check", F), ("push", R)], ["push", "check", "n"], id="three-lanes"
        ),
        pytest.param([("a", N), ("b", N), ("b", F)], ["b", "a"], id="normal-moves-to-follow-up"),
        pytest.param([("a", F), ("b", F), ("a", N)], ["a", "b"], id="never-moves-back"),
        pytest.param([("a", F), ("b", F), ("b", R)], ["b", "a"], id="follow-up-moves-to-requested"),
    ],
)
async def test_lanes_are_served_in_order(adds: list[tuple[str, Lane]], order: list[str]) -> None:
    queue = WorkQueue()
    for key, lane in adds:
        queue.add(key, lane=lane)
    assert len(queue) == len(order)
    assert [await queue.get() for _ in order] == order
    assert len(queue) == 0


@pytest.mark.parametrize(
    ("lane", "expected"),
    [
        pytest.param(N, ["first", "due"], id="interval-behind-what-is-queued"),
        pytest.param(F, ["due", "first"], id="re-check-ahead-of-first-reconciles"),
        pytest.param(R, ["due", "first"], id="requested"),
    ],
)
async def test_a_scheduled_key_enters_its_lane_when_due(lane: Lane, expected: list[str]) -> None:
    clock = ManualClock()
    queue = WorkQueue(clock=clock)
    queue.start()
    queue.requeue_after("due", 0.5, lane=lane)
    queue.add("first")
    clock.now += 1
    queue.add_after("other", 500)  # wakes the timer, which now reads 1 s later
    for _ in range(100):
        if len(queue) == 2:
            break
        await asyncio.sleep(0.01)
    assert [await queue.get() for _ in expected] == expected
    queue.shutdown()


@pytest.mark.parametrize(
    ("processing", "expected"),
    [
        # The reconcile in flight is the one the schedule was for; its outcome
        # schedules the next (a health wait's timed re-check, due while the
        # watch's re-check ended the wait, ran again as a full reconcile).
        pytest.param(True, [], id="due-while-processing-is-dropped"),
        pytest.param(False, ["a"], id="due-while-idle-is-queued"),
    ],
)
async def test_a_schedule_due_while_its_key_is_processed(
    processing: bool, expected: list[str]
) -> None:
    clock = ManualClock()
    queue = WorkQueue(clock=clock)
    queue.start()
    queue.add("a")
    taken = await queue.get()
    queue.requeue_after("a", 0.5, lane=F)  # an earlier outcome's timed re-check
    if not processing:
        queue.done(taken)
    clock.now += 1
    queue.add_after("other", 500)  # wakes the timer, which now reads 1 s later
    for _ in range(100):
        if queue.due_in("a") is None:
            break
        await asyncio.sleep(0.01)
    assert queue.due_in("a") is None, "the timer has not run"
    await asyncio.sleep(0.01)
    if processing:
        queue.done(taken)
    assert [await queue.get() for _ in expected] == expected
    assert len(queue) == 0
    queue.shutdown()


async def test_a_key_asked_for_while_processing_comes_back_first() -> None:
    queue = WorkQueue()
    queue.add("a")
    key = await queue.get()
    queue.add("b")
    queue.add("a", lane=R)  # a webhook while "a" is being reconciled
    queue.done(key)
    assert await queue.get() == "a"
    assert await queue.get() == "b"


async def test_a_thousand_interval_requeues_do_not_delay_a_requested_key() -> None:
    queue = WorkQueue()
    for index in range(1000):
        queue.add(f"ns/app-{index}")
    queue.add("ns/pushed", lane=R)
    assert await queue.get() == "ns/pushed"


async def test_a_worker_kept_for_requests_takes_only_requested_keys() -> None:
    queue = WorkQueue()
    queue.add("ns/interval")
    queue.add("ns/recheck", lane=F)
    kept = asyncio.ensure_future(queue.get(urgent_only=True))
    await asyncio.sleep(0)
    assert not kept.done(), "neither an interval requeue nor a re-check is for the kept worker"
    queue.add("ns/pushed", lane=R)
    assert await asyncio.wait_for(kept, 2) == "ns/pushed"
    assert await queue.get() == "ns/recheck"
    assert await queue.get() == "ns/interval"


async def test_a_queued_key_asked_for_wakes_the_kept_worker() -> None:
    queue = WorkQueue()
    queue.add("ns/a")
    kept = asyncio.ensure_future(queue.get(urgent_only=True))
    await asyncio.sleep(0)
    queue.add("ns/a", lane=R)  # a webhook for a key already waiting
    assert await asyncio.wait_for(kept, 2) == "ns/a"
    assert len(queue) == 0


async def test_shutdown_releases_the_kept_worker() -> None:
    queue = WorkQueue()
    kept = asyncio.ensure_future(queue.get(urgent_only=True))
    await asyncio.sleep(0)
    queue.shutdown()
    with pytest.raises(QueueShutDown):
        await asyncio.wait_for(kept, 2)


def _obj(annotations: dict[str, str] | None = None, generation: int = 1) -> dict[str, object]:
    return {"metadata": {"generation": generation, "annotations": annotations or {}}}


@pytest.mark.parametrize(
    ("old", "new", "urgent"),
    [
        pytest.param(_obj(), _obj({REQUESTED: "1"}), True, id="requested-at-set"),
        pytest.param(_obj({REQUESTED: "1"}), _obj({REQUESTED: "2"}), True, id="requested-again"),
        pytest.param(_obj({REQUESTED: "1"}), _obj({REQUESTED: "1"}, 2), False, id="spec-change"),
        pytest.param(_obj(), _obj({"open.gate.fluxcd.io/requestedAt": "1"}), True, id="trigger"),
        pytest.param(_obj(), _obj({"other": "x"}), False, id="other-annotation"),
    ],
)
def test_which_changes_are_requests(
    old: dict[str, object], new: dict[str, object], urgent: bool
) -> None:
    change = Change("updated", "ns/a", old, new)
    assert requested(change, ("open.gate.fluxcd.io/requestedAt",)) is urgent


def test_a_new_object_is_not_a_request() -> None:
    assert requested(Change("added", "ns/a", None, _obj({REQUESTED: "1"}))) is False
