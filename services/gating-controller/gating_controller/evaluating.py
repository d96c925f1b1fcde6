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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from gating_controller.gate_events import Action, Event, Ticks, requests_of, window_of
from sluice_api.gating import (
    Gate,
    GateHistoryEntry,
    GateReason,
)
from sluice_api.meta import format_time, parse_time

HISTORY_LIMIT = 20
"""How many open and close entries status.history keeps."""

LOOKAHEAD_STEPS = 1000
"""How many future changes (event starts and ends) the look-ahead examines."""


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


def evaluate(gate: Gate, *, now: datetime, history_limit: int = HISTORY_LIMIT) -> GateState:
    """The gate's state at `now` (an aware datetime); raises InvalidGate."""
    if now.tzinfo is None:
        raise ValueError("now must be an aware datetime")
    now = now.astimezone(UTC)
    default: Action = "open" if gate.spec.default == "opened" else "close"
    problems: list[str] = []
    window = window_of(gate.spec.window, "spec.window", problems)
    requests = requests_of(gate.metadata.annotations or {}, window, problems)
    schedules = [
        Ticks.build(entry, f"spec.schedule[{index}]", now=now, problems=problems)
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


# -- deciding ----------------------------------------------------------------


def _winner(
    instant: datetime, requests: Sequence[Event], ticks: Sequence[Ticks], away: Action
) -> Event | None:
    candidates = [e for e in requests if e.start <= instant < e.end]
    candidates += [e for t in ticks if (e := t.in_effect(instant, away)) is not None]
    return max(candidates, key=Event.precedence, default=None)


def _look_ahead(
    now: datetime, *, default: Action, requests: Sequence[Event], ticks: Sequence[Ticks]
) -> tuple[Event | None, datetime | None, datetime | None]:
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
    instant: datetime, requests: Sequence[Event], ticks: Sequence[Ticks]
) -> datetime | None:
    candidates = [b for e in requests for b in (e.start, e.end) if b > instant]
    for t in ticks:
        end = t.end()
        candidates += [b for b in (t.upcoming, end) if b is not None and b > instant]
    return min(candidates, default=None)


# -- history ---------------------------------------------------------------


def _entry(event: Event) -> GateHistoryEntry:
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
