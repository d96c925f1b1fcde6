"""Flux Operator's provider schedules, as a table over an injected clock."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from resourceset_controller.scheduling import InvalidSchedule, decide
from sluice_api.resourceset import Schedule

MON_9 = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)  # a Monday


def at(hour: int, minute: int = 0, second: int = 0, day: int = 23) -> datetime:
    return datetime(2026, 11, day, hour, minute, second, tzinfo=UTC)


@pytest.mark.parametrize(
    ("schedules", "now", "run", "next_tick"),
    [
        pytest.param([{"cron": "0 9 * * 1-5"}], at(9, 0, 5), True, at(9, day=24), id="at-the-tick"),
        pytest.param([{"cron": "0 9 * * 1-5"}], at(9, 1), False, at(9, day=24), id="after-the-tick-no-window"),
        pytest.param([{"cron": "0 9 * * 1-5", "window": "1h"}], at(9, 59), True, at(9, day=24), id="inside-window"),
        pytest.param([{"cron": "0 9 * * 1-5", "window": "1h"}], at(10, 0, 1), False, at(9, day=24), id="window-over"),
        pytest.param([{"cron": "0 9 * * 1-5", "window": "1h"}], at(8, 59), False, at(9), id="before-the-tick"),
        pytest.param([{"cron": "0 9 * * *", "timeZone": "Europe/Berlin", "window": "30m"}],
                     at(8, 10), True, at(8, day=24), id="time-zone"),
        pytest.param([{"cron": "0 9 * * *"}, {"cron": "0 18 * * *", "window": "2h"}],
                     at(19), True, at(9, day=24), id="second-schedule-window"),
    ],
)  # fmt: skip
def test_decide(
    schedules: list[dict[str, str]], now: datetime, run: bool, next_tick: datetime
) -> None:
    decision = decide([Schedule.model_validate(s) for s in schedules], now)
    assert (decision.run, decision.next_tick) == (run, next_tick)


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        pytest.param({"cron": "not cron"}, "spec.schedule[0].cron 'not cron'", id="cron"),
        pytest.param({"cron": "0 9 * * *", "timeZone": "Mars/Base"}, "timeZone 'Mars/Base' is unknown", id="zone"),
    ],
)  # fmt: skip
def test_bad_schedules_name_the_field(schedule: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidSchedule, match=re.escape(message)):
        decide([Schedule.model_validate(schedule)], MON_9)
