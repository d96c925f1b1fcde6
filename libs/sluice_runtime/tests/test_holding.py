"""Bulk API requests hold back while requested work is in flight (sluice_runtime.holding)."""

from __future__ import annotations

import asyncio

import pytest

from sluice_runtime.holding import BulkHold, HoldState, settle

LIMIT = 2.0


@pytest.mark.parametrize(
    ("state", "now", "holding", "next_check", "started", "cooldown_until"),
    [
        pytest.param(HoldState(), 10.0, False, None, None, 0.0, id="nothing requested"),
        pytest.param(
            HoldState(serving=1), 10.0, True, 12.0, 10.0, 0.0, id="a request begins a hold"
        ),
        pytest.param(
            HoldState(serving=2, started=9.0), 10.0, True, 11.0, 9.0, 0.0, id="the hold goes on"
        ),
        pytest.param(
            HoldState(serving=1, started=8.0),
            10.0,
            False,
            12.0,
            None,
            12.0,
            id="a hold that ran out lets bulk go for as long",
        ),
        pytest.param(
            HoldState(serving=1, cooldown_until=12.0),
            11.0,
            False,
            12.0,
            None,
            12.0,
            id="no new hold while bulk has its turn",
        ),
        pytest.param(
            HoldState(serving=1, cooldown_until=12.0),
            12.0,
            True,
            14.0,
            12.0,
            12.0,
            id="a new hold after the turn",
        ),
        pytest.param(
            HoldState(expected_until=10.5), 10.0, True, 10.5, 10.0, 0.0, id="expected work holds"
        ),
        pytest.param(
            HoldState(expected_until=10.5, started=10.0),
            10.5,
            False,
            None,
            None,
            0.0,
            id="an expectation that lapsed",
        ),
        pytest.param(
            HoldState(serving=1, expected_until=10.5, started=10.0),
            11.0,
            True,
            12.0,
            10.0,
            0.0,
            id="serving outlasts the expectation",
        ),
        pytest.param(
            HoldState(serving=0, started=10.0), 11.0, False, None, None, 0.0, id="work done"
        ),
        pytest.param(
            HoldState(following_until=10.5, expected_until=10.2, started=10.0),
            10.3,
            True,
            10.5,
            10.0,
            0.0,
            id="followers hold on past an expectation",
        ),
        pytest.param(
            HoldState(following_until=13.0, started=10.0),
            11.0,
            True,
            12.0,
            10.0,
            0.0,
            id="followers within the limit too",
        ),
    ],
)
def test_settle(
    state: HoldState,
    now: float,
    holding: bool,
    next_check: float | None,
    started: float | None,
    cooldown_until: float,
) -> None:
    settled = settle(state, now, LIMIT)
    assert (settled.holding, settled.next_check) == (holding, next_check)
    assert (settled.state.started, settled.state.cooldown_until) == (started, cooldown_until)


def test_a_zero_limit_never_holds() -> None:
    assert not settle(HoldState(serving=3, expected_until=99.0), 10.0, 0.0).holding


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_bulk_waits_for_requested_work_to_end() -> None:
    clock = Clock()
    hold = BulkHold(limit=LIMIT, clock=clock)
    order: list[str] = []

    async def bulk() -> None:
        await hold.turn()
        order.append("bulk")

    with hold.serving():
        task = asyncio.ensure_future(bulk())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert hold.held == 1 and not task.done()
        order.append("requested")
    await task
    assert order == ["requested", "bulk"]
    assert not hold.holding


async def test_an_expectation_holds_until_answered_or_served() -> None:
    clock = Clock()
    hold = BulkHold(limit=LIMIT, clock=clock)
    hold.expect()
    assert hold.holding
    hold.answered()
    assert not hold.holding
    hold.expect()
    with hold.serving():
        assert hold.holding
    # The announced work came and went: bulk goes, though the expectation had time left.
    assert not hold.holding


async def test_a_hold_runs_out() -> None:
    """The timer ends a hold at its limit even while requested work goes on."""
    hold = BulkHold(limit=0.05)
    with hold.serving():
        assert hold.holding
        await asyncio.wait_for(hold.turn(), timeout=10)
        assert not hold.holding


async def test_followers_are_held_for_after_the_requested_work_ends() -> None:
    """Unlike an expectation here, which the requested work it announced fulfils."""
    clock = Clock()
    hold = BulkHold(limit=LIMIT, clock=clock)
    with hold.serving():
        hold.followed()
    assert hold.holding
    clock.now += LIMIT / 2
    hold.expect()
    hold.answered()
    assert not hold.holding
