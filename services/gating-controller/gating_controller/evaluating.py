"""A Gate's state as a pure function of its spec, annotations, status history and the clock.

The gating-controller owns the clock and the API calls; everything it has to
decide (opened or closed, which message, until when, when to look again, what
to add to the audit trail) is decided here, so every rule can be tested at
any instant without a cluster or a sleep.

Events. Three things move a gate away from `spec.default` or back to it:

- an open request, annotation `open.gate.fluxcd.io/requestedAt: <time>`;
- a close request, annotation `close.gate.fluxcd.io/requestedAt: <time>`;
- a tick of one of `spec.schedule[]` (Sluice's addition), which always moves
  the gate to the state opposite its default: a default-closed gate opens,
  a default-opened gate closes.

Every event is in effect for a window of elapsed time from its own time,
end excluded: requests for `spec.window`, ticks for their schedule's
`window`. A request older than `now - window` has expired and no longer
counts (the gate is back at its default unless another event holds it).

Precedence. At any instant, of the events in effect, the one with the latest
time decides; when none is in effect the gate is at its default. So the
latest of the two requests wins, a close request during a scheduled or
requested open window closes the gate for `spec.window` (after which the
scheduled window, if it still runs, opens it again), and the next tick after
a manual request takes over from it. Events with the same time: closing
wins (a wrongly closed gate delays a rollout, a wrongly open one lets it
through), then a request wins over a tick.

Requests dated in the future are not in effect yet: the gate ignores them
until their time comes, and `next_transition` is that time, so the
controller wakes up for it. They enter the history once in effect.

Messages of the `Opened` condition (reason `ReconciliationSucceeded`), with
times in RFC 3339 UTC such as `2026-11-21T11:00:00Z`:

- "Gate closed by default" / "Gate opened by default": no event in effect.
- "Gate scheduled for closing at <t>": opened by a request or a tick, back to
  closed at <t> (= `resetToDefaultAt`; with several open events in a row,
  the end of the whole run, including ticks and requests yet to come).
- "Gate scheduled for opening at <t>": the mirror image for a default-opened
  gate closed by a request or a tick.
- "Gate close requested": a close request on a default-closed gate is the
  latest event in effect (for instance an early close, as in the RFC);
  "Gate open requested" is the mirror image. The gate is at its default;
  `requestedAt` and `resetToDefaultAt` are both the request's time, as in
  the RFC, and the message turns back to "... by default" when the request
  expires.
- "Gate opened, no closing scheduled" / "Gate closed, no opening
  scheduled": schedule windows overlap one another for longer than the look
  ahead (`LOOKAHEAD_STEPS` changes), so no end can be named.

Schedules. Cron expressions have five fields and are read in their IANA
time zone with cronsim, which follows Debian cron: a tick at a fixed local
time stays at that local time across DST changes (09:00 Europe/Berlin is
08:00Z in winter, 07:00Z in summer); a fixed time that does not exist on a
spring-forward day (02:30) fires at the first minute after the gap (03:00
CEST); one that exists twice on a fall-back day fires once, at its first
occurrence (02:30 CEST). Expressions with `*` in the minute or hour field
run in elapsed time, so they skip the missing hour and run twice in the
repeated one. A window is elapsed time: a 24h window that spans a DST change
ends at 23:00 or 01:00 local time.

History. Each request whose time has come, and each tick whose window covers
`now`, is an entry (time, action, source, user) unless status.history
already has one with the same time and action. Source and user come from
the `requestedBy` annotations (`cli:<user>` gives source `cli` and the
user, `receiver:<ns>/<name>` gives source `Receiver/<ns>/<name>`; any
other value is kept as the user of source `annotation`); ticks have source
`schedule`. The history keeps the last `HISTORY_LIMIT` entries, oldest
first. A stale requestedBy (someone changed requestedAt by hand after a CLI
request) is attributed as written; requestedBy is informational and never
makes a gate invalid.

Errors. A malformed requestedAt value (RFC 3339 with a zone, nothing else),
an unknown time zone, a cron expression cronsim rejects or that does not
have five fields, and a window of zero raise `InvalidGate`, whose message
quotes each bad value; the controller reports it as Ready=False and keeps
the gate's last state.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
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
    Gate,
    GateHistoryEntry,
    GateReason,
    GateSchedule,
)
from sluice_api.meta import format_time, parse_duration, parse_time

HISTORY_LIMIT = 20
"""How many open and close entries status.history keeps."""

LOOKAHEAD_STEPS = 1000
"""How many future changes (event starts and ends) the look-ahead examines."""

# cronsim shifts some ticks by up to the DST offset near a transition; start
# the search for the tick in effect this much earlier so none is missed.
_DST_MARGIN = timedelta(hours=3)
_MAX_TIME = datetime.max.replace(tzinfo=UTC)

Action = Literal["open", "close"]


class InvalidGate(Exception):
    """The gate cannot be evaluated; `message` quotes each bad value."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, kw_only=True)
class GateState:
    """What the controller writes to the gate's status, and when to look again."""

    opened: bool
    """The `Opened` condition's status."""
    reason: str
    """The `Opened` condition's reason."""
    message: str
    """The `Opened` condition's message (see the module docstring)."""
    requested_at: str | None
    """status.requestedAt: the time of the event that decides the state."""
    reset_to_default_at: str | None
    """status.resetToDefaultAt: when the gate is back at its default."""
    next_transition: datetime | None
    """The next instant this function's answer changes by itself (UTC); requeue then."""
    source: str
    """What decides the state: `default`, `schedule`, or the deciding request's
    source (`annotation`, `cli`, `Receiver/<ns>/<name>`)."""
    user: str | None
    """Who asked, when a request decides the state and says who."""
    new_history: list[GateHistoryEntry]
    """Entries not yet in status.history, oldest first: one event per entry."""
    history: list[GateHistoryEntry]
    """The status.history to write: the old entries plus the new ones, trimmed."""


@dataclass(frozen=True, kw_only=True)
class _Event:
    start: datetime
    end: datetime
    action: Action
    source: str
    user: str | None = None
    scheduled: bool = False

    def precedence(self) -> tuple[datetime, bool, bool]:
        return (self.start, self.action == "close", not self.scheduled)


def evaluate(gate: Gate, *, now: datetime, history_limit: int = HISTORY_LIMIT) -> GateState:
    """The gate's state at `now` (an aware datetime); raises InvalidGate."""
    if now.tzinfo is None:
        raise ValueError("now must be an aware datetime")
    now = now.astimezone(UTC)
    default: Action = "open" if gate.spec.default == "opened" else "close"
    problems: list[str] = []
    window = _window(gate.spec.window, "spec.window", problems)
    requests = _requests(gate.metadata.annotations or {}, window, problems)
    schedules = [
        _Ticks.build(entry, f"spec.schedule[{index}]", now=now, problems=problems)
        for index, entry in enumerate(gate.spec.schedule or [])
    ]
    if problems:
        raise InvalidGate("; ".join(problems))
    ticks = [t for t in schedules if t is not None]
    away: Action = "close" if default == "open" else "open"

    observed = [_entry(e) for e in requests if e.start <= now]
    observed += [_entry(e) for t in ticks if (e := t.in_effect(now, away)) is not None]
    history, new_history = merge_history(gate.status.history or [], observed, limit=history_limit)

    winner, change, reset = _look_ahead(now, default=default, requests=requests, ticks=ticks)
    requested_at = None if winner is None else format_time(winner.start)
    reset_at: str | None = None
    if winner is None:
        message = f"Gate {_past(default)} by default"
    elif winner.action == default:
        message = f"Gate {winner.action} requested"
        reset_at = requested_at
    elif reset is None:
        message = f"Gate {_past(away)}, no {_gerund(default)} scheduled"
    else:
        reset_at = format_time(reset)
        message = f"Gate scheduled for {_gerund(default)} at {reset_at}"
    return GateState(
        opened=(default if winner is None else winner.action) == "open",
        reason=str(GateReason.RECONCILIATION_SUCCEEDED),
        message=message,
        requested_at=requested_at,
        reset_to_default_at=reset_at,
        next_transition=change,
        source="default" if winner is None else winner.source,
        user=None if winner is None else winner.user,
        new_history=new_history,
        history=history,
    )


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


def merge_history(
    existing: Sequence[GateHistoryEntry],
    observed: Iterable[GateHistoryEntry],
    *,
    limit: int = HISTORY_LIMIT,
) -> tuple[list[GateHistoryEntry], list[GateHistoryEntry]]:
    """(history, new): `existing` plus the unseen `observed`, oldest first, last `limit` kept.

    Entries are the same when their time and action are. `new` holds only
    the added entries that survive the trimming, so an old request first
    seen after the history filled up is not reported again and again.
    """
    seen = {_history_key(e) for e in existing}
    added: list[GateHistoryEntry] = []
    for entry in sorted(observed, key=_history_order):
        key = _history_key(entry)
        if key not in seen:
            seen.add(key)
            added.append(entry)
    merged = sorted([*existing, *added], key=_history_order)
    kept = merged[-limit:] if limit > 0 else []
    kept_ids = {id(e) for e in kept}
    return kept, [e for e in added if id(e) in kept_ids]


# -- inputs ----------------------------------------------------------------


def _quote(value: str) -> str:
    shown = value if len(value) <= 100 else value[:100] + "…"
    return json.dumps(shown, ensure_ascii=False)


def _window(text: str, where: str, problems: list[str]) -> timedelta:
    try:
        window = parse_duration(text)
    except ValueError:
        problems.append(f"{where}: {_quote(text)} is not a duration")
        return timedelta(0)
    if window <= timedelta(0):
        problems.append(f"{where}: {_quote(text)} must be longer than 0s")
    return window


def _requests(
    annotations: Mapping[str, str], window: timedelta, problems: list[str]
) -> list[_Event]:
    events: list[_Event] = []
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
            problems.append(f"annotation {at_key}: {_quote(raw)} is not an RFC3339 time")
            continue
        source, user = parse_requester(annotations.get(by_key))
        end = _add(start, window)
        events.append(_Event(start=start, end=end, action=action, source=source, user=user))
    return events


def _add(start: datetime, window: timedelta) -> datetime:
    try:
        return start + window
    except OverflowError:
        return _MAX_TIME


class _Ticks:
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
        hint = _latest_tick(cron, zone, now)
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
    ) -> _Ticks | None:
        found = len(problems)
        zone: ZoneInfo | None = None
        try:
            zone = ZoneInfo(entry.time_zone)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            problems.append(f"{where}.timeZone: {_quote(entry.time_zone)} is not an IANA time zone")
        if len(entry.cron.split()) != 5:
            problems.append(f"{where}.cron: {_quote(entry.cron)} does not have five fields")
        else:
            try:
                CronSim(entry.cron, now)
            except CronSimError as error:
                reason = str(error)
                reason = reason[:1].lower() + reason[1:]
                problems.append(
                    f"{where}.cron: {_quote(entry.cron)} is not a valid cron expression ({reason})"
                )
        window = _window(entry.window, f"{where}.window", problems)
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
        return None if self.last is None else _add(self.last, self.window)

    def in_effect(self, instant: datetime, action: Action) -> _Event | None:
        end = self.end()
        if self.last is None or end is None or instant >= end:
            return None
        return _Event(start=self.last, end=end, action=action, source="schedule", scheduled=True)


def _latest_tick(cron: str, zone: ZoneInfo, now: datetime) -> datetime | None:
    after = (now + timedelta(seconds=1)).replace(microsecond=0)
    try:
        return next(CronSim(cron, after.astimezone(zone), reverse=True)).astimezone(UTC)
    except StopIteration:
        return None


# -- deciding ----------------------------------------------------------------


def _winner(
    instant: datetime, requests: Sequence[_Event], ticks: Sequence[_Ticks], away: Action
) -> _Event | None:
    candidates = [e for e in requests if e.start <= instant < e.end]
    candidates += [e for t in ticks if (e := t.in_effect(instant, away)) is not None]
    return max(candidates, key=_Event.precedence, default=None)


def _look_ahead(
    now: datetime, *, default: Action, requests: Sequence[_Event], ticks: Sequence[_Ticks]
) -> tuple[_Event | None, datetime | None, datetime | None]:
    """(winner now, first instant the winner changes, first instant back at the default).

    The winner can only change where an event starts or ends, so the walk
    steps from one such boundary to the next.
    """
    away: Action = "close" if default == "open" else "open"
    winner = _winner(now, requests, ticks, away)
    held = winner is not None and winner.action == away
    change: datetime | None = None
    reset: datetime | None = None
    instant = now
    for _ in range(LOOKAHEAD_STEPS):
        if change is not None and (reset is not None or not held):
            break
        boundary = _next_boundary(instant, requests, ticks)
        if boundary is None:
            break
        instant = boundary
        for t in ticks:
            t.advance_to(instant)
        current = _winner(instant, requests, ticks, away)
        if change is None and current != winner:
            change = instant
        if held and reset is None and (current is None or current.action == default):
            reset = instant
    return winner, change, reset


def _next_boundary(
    instant: datetime, requests: Sequence[_Event], ticks: Sequence[_Ticks]
) -> datetime | None:
    candidates = [b for e in requests for b in (e.start, e.end) if b > instant]
    for t in ticks:
        end = t.end()
        candidates += [b for b in (t.upcoming, end) if b is not None and b > instant]
    return min(candidates, default=None)


# -- history ---------------------------------------------------------------


def _entry(event: _Event) -> GateHistoryEntry:
    return GateHistoryEntry(
        time=format_time(event.start), action=event.action, source=event.source, user=event.user
    )


def _instant(entry: GateHistoryEntry) -> datetime | None:
    try:
        return parse_time(entry.time)
    except ValueError:
        return None


def _history_key(entry: GateHistoryEntry) -> tuple[str, str]:
    instant = _instant(entry)
    return (entry.time if instant is None else format_time(instant), entry.action)


def _history_order(entry: GateHistoryEntry) -> datetime:
    return _instant(entry) or datetime.min.replace(tzinfo=UTC)


def _past(action: Action) -> str:
    return "opened" if action == "open" else "closed"


def _gerund(action: Action) -> str:
    return "opening" if action == "open" else "closing"
