"""When a scheduled provider may run: Flux Operator's `spec.schedule`.

Each schedule is a cron expression read in its time zone, and a window after
each tick during which the provider may run (its interval, a webhook). With
no window the provider runs at the tick itself; the controller wakes then,
and allows `TICK_GRACE` for the wake-up to arrive late. Outside every window
the provider does not list its source, and `status.nextSchedule` says when
it will. Pure: the clock is an argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from sluice_api.meta import parse_duration
from sluice_api.resourceset import Schedule

TICK_GRACE = timedelta(seconds=30)
"""A wake-up for a tick that arrives this late still counts as the tick."""


class InvalidSchedule(ValueError):
    """A schedule that cannot be read; the message names it."""


@dataclass(frozen=True)
class Decision:
    """Whether the provider may run now, and its next tick (for status.nextSchedule)."""

    run: bool
    next_tick: datetime
    next_schedule: Schedule


def decide(schedules: Sequence[Schedule], now: datetime) -> Decision:
    """Whether `now` is in a window of any schedule, and the earliest next tick."""
    run = False
    best: tuple[datetime, Schedule] | None = None
    for index, schedule in enumerate(schedules):
        where = f"spec.schedule[{index}]"
        try:
            zone = ZoneInfo(schedule.time_zone or "UTC")
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidSchedule(f"{where}.timeZone '{schedule.time_zone}' is unknown") from None
        try:
            window = parse_duration(schedule.window or "0s")
        except ValueError as error:
            raise InvalidSchedule(f"{where}.window: {error}") from None
        local = now.astimezone(zone)
        try:
            previous = next(CronSim(schedule.cron, local + timedelta(seconds=1), reverse=True))
            upcoming = next(CronSim(schedule.cron, local))
        except (CronSimError, StopIteration) as error:
            raise InvalidSchedule(f"{where}.cron '{schedule.cron}': {error}") from None
        if now - previous.astimezone(UTC) < max(window, TICK_GRACE):
            run = True
        tick = upcoming.astimezone(UTC)
        if best is None or tick < best[0]:
            best = (tick, schedule)
    assert best is not None, "decide() needs at least one schedule"
    return Decision(run=run, next_tick=best[0], next_schedule=best[1])
