"""The events that move a Gate away from its default: requests and schedule ticks.

A request comes from an `open.`/`close.gate.fluxcd.io/requestedAt`
annotation; a tick from one of `spec.schedule[]`, walked forward in time
(`Ticks`). Each is in effect for its window; `evaluating` decides which one
wins. Bad inputs are collected as problems quoting the value, never raised
one at a time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from sluice_api.gating import (
    CLOSE_REQUESTED_AT_ANNOTATION,
    CLOSE_REQUESTED_BY_ANNOTATION,
    OPEN_REQUESTED_AT_ANNOTATION,
    OPEN_REQUESTED_BY_ANNOTATION,
    GateSchedule,
)
from sluice_api.meta import parse_duration, parse_time

# cronsim shifts some ticks by up to the DST offset near a transition; start
# the search for the tick in effect this much earlier so none is missed.
_DST_MARGIN = timedelta(hours=3)
_MAX_TIME = datetime.max.replace(tzinfo=UTC)

Action = Literal["open", "close"]


@dataclass(frozen=True, kw_only=True)
class Event:
    start: datetime
    end: datetime
    action: Action
    source: str
    user: str | None = None
    scheduled: bool = False

    def precedence(self) -> tuple[datetime, bool, bool]:
        return (self.start, self.action == "close", not self.scheduled)


def parse_requester(value: str | None) -> tuple[str, str | None]:
    """(source, user) of a `requestedBy` annotation value."""
    if not value:
        return "annotation", None
    kind, sep, who = value.partition(":")
    if sep and who and kind == "cli":
        return "cli", who
    if sep and who and kind == "receiver":
        return f"Receiver/{who}", None
    return "annotation", value


def quote(value: str) -> str:
    shown = value if len(value) <= 100 else value[:100] + "…"
    return json.dumps(shown, ensure_ascii=False)


def window_of(text: str, where: str, problems: list[str]) -> timedelta:
    try:
        window = parse_duration(text)
    except ValueError:
        problems.append(f"{where}: {quote(text)} is not a duration")
        return timedelta(0)
    if window <= timedelta(0):
        problems.append(f"{where}: {quote(text)} must be longer than 0s")
    return window


def requests_of(
    annotations: Mapping[str, str], window: timedelta, problems: list[str]
) -> list[Event]:
    events: list[Event] = []
    keys: tuple[tuple[Action, str, str], ...] = (
        ("open", OPEN_REQUESTED_AT_ANNOTATION, OPEN_REQUESTED_BY_ANNOTATION),
        ("close", CLOSE_REQUESTED_AT_ANNOTATION, CLOSE_REQUESTED_BY_ANNOTATION),
    )
    for action, at_key, by_key in keys:
        raw = annotations.get(at_key)
        if raw is None:
            continue
        try:
            start = parse_time(raw)
        except ValueError:
            problems.append(f"annotation {at_key}: {quote(raw)} is not an RFC3339 time")
            continue
        source, user = parse_requester(annotations.get(by_key))
        end = add(start, window)
        events.append(Event(start=start, end=end, action=action, source=source, user=user))
    return events


def add(start: datetime, window: timedelta) -> datetime:
    try:
        return start + window
    except OverflowError:
        return _MAX_TIME


class Ticks:
    """One schedule's ticks in UTC, strictly increasing, walked forward in time.

    `last` is the latest tick at or before the instant walked to, `upcoming`
    the first one after it.
    """

    def __init__(self, cron: str, zone: ZoneInfo, window: timedelta, now: datetime) -> None:
        self.window = window
        try:
            start = now - window
        except OverflowError:
            start = datetime(1, 1, 2, tzinfo=UTC)
        hint = latest_tick(cron, zone, now)
        if hint is not None and hint - _DST_MARGIN > start:
            start = hint - _DST_MARGIN
        # cronsim yields ticks strictly after the second it starts from.
        first = (start - timedelta(seconds=1)).replace(microsecond=0)
        self._iterator = CronSim(cron, first.astimezone(zone))
        self._latest: datetime | None = None
        self.last: datetime | None = None
        self.upcoming = self._next()
        self.advance_to(now)

    @classmethod
    def build(
        cls, entry: GateSchedule, where: str, *, now: datetime, problems: list[str]
    ) -> Ticks | None:
        found = len(problems)
        zone: ZoneInfo | None = None
        try:
            zone = ZoneInfo(entry.time_zone)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            problems.append(f"{where}.timeZone: {quote(entry.time_zone)} is not an IANA time zone")
        if len(entry.cron.split()) != 5:
            problems.append(f"{where}.cron: {quote(entry.cron)} does not have five fields")
        else:
            try:
                CronSim(entry.cron, now)
            except CronSimError as error:
                reason = str(error)
                reason = reason[:1].lower() + reason[1:]
                problems.append(
                    f"{where}.cron: {quote(entry.cron)} is not a valid cron expression ({reason})"
                )
        window = window_of(entry.window, f"{where}.window", problems)
        if len(problems) > found or zone is None:
            return None
        return cls(entry.cron, zone, window, now)

    def _next(self) -> datetime | None:
        # Near a fall-back change cronsim can yield a tick again; skip repeats.
        while True:
            try:
                tick = next(self._iterator).astimezone(UTC)
            except StopIteration:  # no tick within cronsim's 50-year search
                return None
            if self._latest is None or tick > self._latest:
                self._latest = tick
                return tick

    def advance_to(self, instant: datetime) -> None:
        while self.upcoming is not None and self.upcoming <= instant:
            self.last = self.upcoming
            self.upcoming = self._next()

    def end(self) -> datetime | None:
        return None if self.last is None else add(self.last, self.window)

    def in_effect(self, instant: datetime, action: Action) -> Event | None:
        end = self.end()
        if self.last is None or end is None or instant >= end:
            return None
        return Event(start=self.last, end=end, action=action, source="schedule", scheduled=True)


def latest_tick(cron: str, zone: ZoneInfo, now: datetime) -> datetime | None:
    after = (now + timedelta(seconds=1)).replace(microsecond=0)
    try:
        return next(CronSim(cron, after.astimezone(zone), reverse=True)).astimezone(UTC)
    except StopIteration:
        return None
