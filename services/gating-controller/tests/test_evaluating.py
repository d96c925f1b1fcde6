"""The Gate's state as a function of (spec, annotations, status, now), at many instants."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from gating_controller.evaluating import GateState, InvalidGate, evaluate, merge_history
from gating_controller.gate_events import parse_requester
from sluice_api.gating import (
    CLOSE_REQUESTED_AT_ANNOTATION,
    CLOSE_REQUESTED_BY_ANNOTATION,
    OPEN_REQUESTED_AT_ANNOTATION,
    OPEN_REQUESTED_BY_ANNOTATION,
    Gate,
    GateHistoryEntry,
    GateSpec,
    GateStatus,
)
from sluice_api.meta import ObjectMeta, format_time, parse_time

BERLIN = ZoneInfo("Europe/Berlin")


def t(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def gate(
    *,
    default: str = "closed",
    window: str = "1h",
    open_at: str | None = None,
    close_at: str | None = None,
    open_by: str | None = None,
    close_by: str | None = None,
    schedule: Sequence[tuple[str, str, str]] = (),
    history: list[GateHistoryEntry] | None = None,
) -> Gate:
    annotations = {
        key: value
        for key, value in (
            (OPEN_REQUESTED_AT_ANNOTATION, open_at),
            (CLOSE_REQUESTED_AT_ANNOTATION, close_at),
            (OPEN_REQUESTED_BY_ANNOTATION, open_by),
            (CLOSE_REQUESTED_BY_ANNOTATION, close_by),
        )
        if value is not None
    }
    return Gate(
        metadata=ObjectMeta(name="g", namespace="flux-system", annotations=annotations or None),
        spec=GateSpec.model_validate(
            {
                "interval": "30s",
                "default": default,
                "window": window,
                "schedule": [
                    {"cron": cron, "timeZone": zone, "window": w} for cron, zone, w in schedule
                ]
                or None,
            }
        ),
        status=GateStatus(history=history),
    )


@dataclass(frozen=True)
class Want:
    opened: bool
    message: str
    requested_at: str | None = None
    reset: str | None = None
    next: str | None = None
    source: str = "default"


def observable(state: GateState) -> tuple[object, ...]:
    return (
        state.opened,
        state.message,
        state.requested_at,
        state.reset_to_default_at,
        state.source,
        state.user,
    )


def check(subject: Gate, now: datetime, want: Want) -> None:
    state = evaluate(subject, now=now)
    assert state.reason == "ReconciliationSucceeded"
    got = Want(
        opened=state.opened,
        message=state.message,
        requested_at=state.requested_at,
        reset=state.reset_to_default_at,
        next=None if state.next_transition is None else format_time(state.next_transition),
        source=state.source,
    )
    assert got == want
    # next_transition is exact: nothing changes before it, something changes at it.
    if state.next_transition is not None:
        just_before = state.next_transition - timedelta(microseconds=1)
        if just_before >= now:
            assert observable(evaluate(subject, now=just_before)) == observable(state)
        assert observable(evaluate(subject, now=state.next_transition)) != observable(state)


CLOSED = "Gate closed by default"
OPENED = "Gate opened by default"

# -- story 1: SRE approval, default closed, window 1h -------------------------

SRE: dict[str, Any] = {"default": "closed", "window": "1h"}
OPEN_10: dict[str, Any] = {**SRE, "open_at": "2026-11-21T10:00:00Z"}
OPEN_10_CLOSE_1010: dict[str, Any] = {**OPEN_10, "close_at": "2026-11-21T10:10:00Z"}


def opened_until(end: str, at: str, source: str = "annotation") -> Want:
    return Want(True, f"Gate scheduled for closing at {end}", at, end, end, source)


@pytest.mark.parametrize(
    ("spec", "now", "want"),
    [
        pytest.param(SRE, "2026-11-21T10:00:00Z", Want(False, CLOSED), id="created-closed"),
        pytest.param(
            OPEN_10, "2026-11-21T09:59:59Z",
            Want(False, CLOSED, next="2026-11-21T10:00:00Z"),
            id="open-request-in-future-waits",
        ),
        pytest.param(
            OPEN_10, "2026-11-21T10:00:00Z",
            opened_until("2026-11-21T11:00:00Z", "2026-11-21T10:00:00Z"),
            id="opened-at-request",
        ),
        pytest.param(
            OPEN_10, "2026-11-21T10:59:59.999999Z",
            opened_until("2026-11-21T11:00:00Z", "2026-11-21T10:00:00Z"),
            id="still-open-just-before-reset",
        ),
        pytest.param(OPEN_10, "2026-11-21T11:00:00Z", Want(False, CLOSED), id="closes-at-reset"),
        pytest.param(OPEN_10, "2026-11-23T00:00:00Z", Want(False, CLOSED), id="expired-days-later"),
        pytest.param(
            OPEN_10_CLOSE_1010, "2026-11-21T10:05:00Z",
            opened_until("2026-11-21T10:10:00Z", "2026-11-21T10:00:00Z"),
            id="future-close-shortens-open",
        ),
        pytest.param(
            OPEN_10_CLOSE_1010, "2026-11-21T10:10:00Z",
            Want(False, "Gate close requested", "2026-11-21T10:10:00Z", "2026-11-21T10:10:00Z",
                 "2026-11-21T11:10:00Z", "annotation"),
            id="closed-early",
        ),
        pytest.param(
            OPEN_10_CLOSE_1010, "2026-11-21T11:09:59Z",
            Want(False, "Gate close requested", "2026-11-21T10:10:00Z", "2026-11-21T10:10:00Z",
                 "2026-11-21T11:10:00Z", "annotation"),
            id="close-request-in-effect-for-window",
        ),
        pytest.param(
            OPEN_10_CLOSE_1010, "2026-11-21T11:10:00Z", Want(False, CLOSED),
            id="close-request-expired",
        ),
        pytest.param(
            {**SRE, "close_at": "2026-11-21T10:10:00Z", "open_at": "2026-11-21T10:30:00Z"},
            "2026-11-21T10:40:00Z",
            opened_until("2026-11-21T11:30:00Z", "2026-11-21T10:30:00Z"),
            id="open-newer-than-close-wins",
        ),
        pytest.param(
            {**SRE, "open_at": "2026-11-21T10:00:00Z", "close_at": "2026-11-21T10:00:00Z"},
            "2026-11-21T10:00:00Z",
            Want(False, "Gate close requested", "2026-11-21T10:00:00Z", "2026-11-21T10:00:00Z",
                 "2026-11-21T11:00:00Z", "annotation"),
            id="tie-close-wins",
        ),
        pytest.param(
            {**SRE, "close_at": "2026-11-21T10:00:00Z"}, "2026-11-21T10:20:00Z",
            Want(False, "Gate close requested", "2026-11-21T10:00:00Z", "2026-11-21T10:00:00Z",
                 "2026-11-21T11:00:00Z", "annotation"),
            id="close-of-closed-gate",
        ),
        pytest.param(
            {**SRE, "open_at": "2026-11-21T11:00:00+01:00"}, "2026-11-21T10:30:00Z",
            opened_until("2026-11-21T11:00:00Z", "2026-11-21T10:00:00Z"),
            id="offset-normalized-to-utc",
        ),
        pytest.param(
            {**SRE, "open_at": "2026-11-21T10:00:00.5Z"}, "2026-11-21T10:30:00Z",
            opened_until("2026-11-21T11:00:00.5Z", "2026-11-21T10:00:00.5Z"),
            id="fraction-kept",
        ),
        pytest.param(
            {**SRE, "window": "90m", "open_at": "2026-11-21T10:00:00Z"}, "2026-11-21T11:00:00Z",
            opened_until("2026-11-21T11:30:00Z", "2026-11-21T10:00:00Z"),
            id="window-from-spec",
        ),
        pytest.param(
            {**OPEN_10, "open_by": "cli:alice"}, "2026-11-21T10:00:00Z",
            opened_until("2026-11-21T11:00:00Z", "2026-11-21T10:00:00Z", source="cli"),
            id="source-from-requested-by",
        ),
    ],
)  # fmt: skip
def test_sre_approval(spec: dict[str, Any], now: str, want: Want) -> None:
    check(gate(**spec), t(now), want)


# -- story 2: maintenance window, default opened, window 24h ------------------

MAINTENANCE: dict[str, Any] = {"default": "opened", "window": "24h"}
CLOSE_MAR26: dict[str, Any] = {**MAINTENANCE, "close_at": "2026-03-26T10:00:00Z"}


def closed_until(end: str, at: str, source: str = "annotation") -> Want:
    return Want(False, f"Gate scheduled for opening at {end}", at, end, end, source)


@pytest.mark.parametrize(
    ("spec", "now", "want"),
    [
        pytest.param(MAINTENANCE, "2026-03-26T09:00:00Z", Want(True, OPENED), id="created-opened"),
        pytest.param(
            CLOSE_MAR26, "2026-03-26T09:00:00Z", Want(True, OPENED, next="2026-03-26T10:00:00Z"),
            id="close-request-in-future-waits",
        ),
        pytest.param(
            CLOSE_MAR26, "2026-03-26T10:00:00Z",
            closed_until("2026-03-27T10:00:00Z", "2026-03-26T10:00:00Z"),
            id="closed-for-24h",
        ),
        pytest.param(
            CLOSE_MAR26, "2026-03-27T09:59:59Z",
            closed_until("2026-03-27T10:00:00Z", "2026-03-26T10:00:00Z"),
            id="still-closed-before-reset",
        ),
        pytest.param(CLOSE_MAR26, "2026-03-27T10:00:00Z", Want(True, OPENED), id="reopens-itself"),
        pytest.param(
            {**CLOSE_MAR26, "open_at": "2026-03-26T12:00:00Z"}, "2026-03-26T11:00:00Z",
            closed_until("2026-03-26T12:00:00Z", "2026-03-26T10:00:00Z"),
            id="future-open-shortens-close",
        ),
        pytest.param(
            {**CLOSE_MAR26, "open_at": "2026-03-26T12:00:00Z"}, "2026-03-26T12:00:00Z",
            Want(True, "Gate open requested", "2026-03-26T12:00:00Z", "2026-03-26T12:00:00Z",
                 "2026-03-27T12:00:00Z", "annotation"),
            id="reopened-early",
        ),
        pytest.param(
            {**MAINTENANCE, "open_at": "2026-03-26T10:00:00Z", "close_at": "2026-03-26T10:00:00Z"},
            "2026-03-26T10:00:00Z",
            closed_until("2026-03-27T10:00:00Z", "2026-03-26T10:00:00Z"),
            id="tie-close-wins",
        ),
        pytest.param(
            {**MAINTENANCE, "open_at": "2026-03-26T09:00:00Z", "close_at": "2026-03-26T10:00:00Z"},
            "2026-03-26T10:00:00Z",
            closed_until("2026-03-27T10:00:00Z", "2026-03-26T10:00:00Z"),
            id="close-newer-than-open-wins",
        ),
        pytest.param(
            {**MAINTENANCE, "close_at": "2026-03-26T10:00:00Z", "close_by": "receiver:flux-system/github"},
            "2026-03-26T10:00:00Z",
            closed_until("2026-03-27T10:00:00Z", "2026-03-26T10:00:00Z", "Receiver/flux-system/github"),
            id="closed-by-receiver",
        ),
    ],
)  # fmt: skip
def test_maintenance_window(spec: dict[str, Any], now: str, want: Want) -> None:
    check(gate(**spec), t(now), want)


# -- schedules, across both DST changes in Europe/Berlin -----------------------

DEPLOY_TUE_THU: dict[str, Any] = {
    "default": "closed",
    "schedule": [("0 9 * * 2-4", "Europe/Berlin", "7h")],
}
NO_DEPLOY_FRIDAYS: dict[str, Any] = {
    "default": "opened",
    "schedule": [("0 0 * * 5", "Europe/Berlin", "24h")],
}
AT_0230: dict[str, Any] = {"default": "closed", "schedule": [("30 2 * * *", "Europe/Berlin", "1h")]}
EVERY_30M: dict[str, Any] = {
    "default": "closed",
    "schedule": [("*/30 * * * *", "Europe/Berlin", "10m")],
}


def scheduled_open(start: str, end: str) -> Want:
    return opened_until(end, start, source="schedule")


@pytest.mark.parametrize(
    ("spec", "now", "want"),
    [
        # Winter (CET, UTC+1): 09:00-16:00 local is 08:00Z-15:00Z.
        pytest.param(
            DEPLOY_TUE_THU, "2026-03-24T07:59:59Z", Want(False, CLOSED, next="2026-03-24T08:00:00Z"),
            id="tue-before-window-winter",
        ),
        pytest.param(
            DEPLOY_TUE_THU, "2026-03-24T08:00:00Z",
            scheduled_open("2026-03-24T08:00:00Z", "2026-03-24T15:00:00Z"),
            id="tue-window-opens-0900-cet",
        ),
        pytest.param(
            DEPLOY_TUE_THU, "2026-03-24T14:59:59Z",
            scheduled_open("2026-03-24T08:00:00Z", "2026-03-24T15:00:00Z"),
            id="tue-window-ends-1600-cet",
        ),
        pytest.param(
            DEPLOY_TUE_THU, "2026-03-24T15:00:00Z", Want(False, CLOSED, next="2026-03-25T08:00:00Z"),
            id="tue-after-window-next-wed",
        ),
        pytest.param(
            DEPLOY_TUE_THU, "2026-03-26T15:00:00Z", Want(False, CLOSED, next="2026-03-31T07:00:00Z"),
            id="thu-after-window-next-tue-across-spring-dst",
        ),
        pytest.param(
            DEPLOY_TUE_THU, "2026-03-28T12:00:00Z", Want(False, CLOSED, next="2026-03-31T07:00:00Z"),
            id="saturday-closed",
        ),
        # Summer (CEST, UTC+2): the same 09:00 local is 07:00Z.
        pytest.param(
            DEPLOY_TUE_THU, "2026-03-31T07:00:00Z",
            scheduled_open("2026-03-31T07:00:00Z", "2026-03-31T14:00:00Z"),
            id="tue-window-opens-0900-cest",
        ),
        pytest.param(
            DEPLOY_TUE_THU, "2026-10-22T14:00:00Z", Want(False, CLOSED, next="2026-10-27T08:00:00Z"),
            id="thu-after-window-next-tue-across-autumn-dst",
        ),
        pytest.param(
            DEPLOY_TUE_THU, "2026-10-27T08:30:00Z",
            scheduled_open("2026-10-27T08:00:00Z", "2026-10-27T15:00:00Z"),
            id="tue-window-back-on-cet",
        ),
        # No Deploy Fridays: closed from Friday 00:00 local for 24h.
        pytest.param(
            NO_DEPLOY_FRIDAYS, "2026-11-19T22:59:59Z", Want(True, OPENED, next="2026-11-19T23:00:00Z"),
            id="thursday-night-open",
        ),
        pytest.param(
            NO_DEPLOY_FRIDAYS, "2026-11-19T23:00:00Z",
            closed_until("2026-11-20T23:00:00Z", "2026-11-19T23:00:00Z", "schedule"),
            id="friday-closed-cet",
        ),
        pytest.param(
            NO_DEPLOY_FRIDAYS, "2026-07-03T12:00:00Z",
            closed_until("2026-07-03T22:00:00Z", "2026-07-02T22:00:00Z", "schedule"),
            id="friday-closed-cest",
        ),
        pytest.param(
            NO_DEPLOY_FRIDAYS, "2026-11-20T23:00:00Z", Want(True, OPENED, next="2026-11-26T23:00:00Z"),
            id="saturday-open",
        ),
        pytest.param(
            {"default": "opened", "schedule": [("0 0 * * 0", "Europe/Berlin", "24h")]},
            "2026-03-29T12:00:00Z",
            closed_until("2026-03-29T23:00:00Z", "2026-03-28T23:00:00Z", "schedule"),
            id="window-is-elapsed-time-across-dst",
        ),
        # 02:30 does not exist on 2026-03-29: cronsim fires at 03:00 CEST.
        pytest.param(
            AT_0230, "2026-03-28T01:30:00Z",
            scheduled_open("2026-03-28T01:30:00Z", "2026-03-28T02:30:00Z"),
            id="0230-cet-day-before-spring",
        ),
        pytest.param(
            AT_0230, "2026-03-29T00:59:59Z", Want(False, CLOSED, next="2026-03-29T01:00:00Z"),
            id="0230-missing-waits-for-0300-cest",
        ),
        pytest.param(
            AT_0230, "2026-03-29T01:00:00Z",
            scheduled_open("2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"),
            id="0230-missing-fires-at-0300-cest",
        ),
        pytest.param(
            AT_0230, "2026-03-29T02:00:00Z", Want(False, CLOSED, next="2026-03-30T00:30:00Z"),
            id="0230-cest-day-after-spring",
        ),
        # 02:30 exists twice on 2026-10-25: cronsim fires once, at 02:30 CEST.
        pytest.param(
            AT_0230, "2026-10-24T23:00:00Z", Want(False, CLOSED, next="2026-10-25T00:30:00Z"),
            id="0230-ambiguous-fires-first",
        ),
        pytest.param(
            AT_0230, "2026-10-25T01:29:59Z",
            scheduled_open("2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"),
            id="0230-ambiguous-window-from-first",
        ),
        pytest.param(
            AT_0230, "2026-10-25T01:30:00Z", Want(False, CLOSED, next="2026-10-26T01:30:00Z"),
            id="0230-ambiguous-not-twice",
        ),
        pytest.param(
            AT_0230, "2026-10-25T01:45:00Z", Want(False, CLOSED, next="2026-10-26T01:30:00Z"),
            id="0230-ambiguous-second-pass-closed",
        ),
        # Minute/hour wildcards run in elapsed time: the repeated hour runs twice.
        pytest.param(
            EVERY_30M, "2026-10-25T00:30:00Z",
            scheduled_open("2026-10-25T00:30:00Z", "2026-10-25T00:40:00Z"),
            id="every-30m-first-0230",
        ),
        pytest.param(
            EVERY_30M, "2026-10-25T01:30:00Z",
            scheduled_open("2026-10-25T01:30:00Z", "2026-10-25T01:40:00Z"),
            id="every-30m-second-0230",
        ),
        pytest.param(
            EVERY_30M, "2026-03-29T00:45:00Z", Want(False, CLOSED, next="2026-03-29T01:00:00Z"),
            id="every-30m-skips-missing-hour",
        ),
        # Overlapping windows run together; the end is the end of the run.
        pytest.param(
            {"default": "closed", "schedule": [
                ("0 9 * * *", "Europe/Berlin", "4h"), ("0 12 * * *", "Europe/Berlin", "4h")]},
            "2026-11-21T08:00:00Z",
            Want(True, "Gate scheduled for closing at 2026-11-21T15:00:00Z", "2026-11-21T08:00:00Z",
                 "2026-11-21T15:00:00Z", "2026-11-21T11:00:00Z", "schedule"),
            id="overlapping-schedules-chain",
        ),
        pytest.param(
            {"default": "closed", "schedule": [("0 * * * *", "UTC", "1h")]},
            "2026-11-21T08:30:00Z",
            Want(True, "Gate opened, no closing scheduled", "2026-11-21T08:00:00Z", None,
                 "2026-11-21T09:00:00Z", "schedule"),
            id="back-to-back-windows-never-close",
        ),
        pytest.param(
            {"default": "opened", "schedule": [("0 * * * *", "UTC", "2h")]},
            "2026-11-21T08:30:00Z",
            Want(False, "Gate closed, no opening scheduled", "2026-11-21T08:00:00Z", None,
                 "2026-11-21T09:00:00Z", "schedule"),
            id="overlapping-windows-never-open",
        ),
        pytest.param(
            {"default": "closed", "schedule": [("0 9 * * *", "UTC", "1h")]},
            "2026-11-21T09:30:00Z",
            scheduled_open("2026-11-21T09:00:00Z", "2026-11-21T10:00:00Z"),
            id="time-zone-defaults-to-utc",
        ),
    ],
)  # fmt: skip
def test_schedule(spec: dict[str, Any], now: str, want: Want) -> None:
    check(gate(**spec), t(now), want)


def test_scheduled_tick_stays_at_0900_local_all_year() -> None:
    subject = gate(**DEPLOY_TUE_THU)
    now = t("2026-01-01T00:00:00Z")
    starts = []
    while now < t("2027-01-01T00:00:00Z"):
        state = evaluate(subject, now=now)
        assert state.next_transition is not None
        if state.opened:
            starts.append(parse_time(state.requested_at or ""))
        now = state.next_transition
    local = {s.astimezone(BERLIN).strftime("%a %H:%M") for s in starts}
    assert local == {"Tue 09:00", "Wed 09:00", "Thu 09:00"}
    assert len(starts) == 52 * 3 + 1  # 2026 starts and ends on a Thursday
    offsets = {s.astimezone(BERLIN).utcoffset() for s in starts}
    assert offsets == {timedelta(hours=1), timedelta(hours=2)}


# -- requests and schedules together ------------------------------------------

BERLIN_DAY: dict[str, Any] = {
    "default": "closed",
    "schedule": [("0 9 * * *", "Europe/Berlin", "7h")],
}  # 08:00Z-15:00Z


@pytest.mark.parametrize(
    ("spec", "now", "want"),
    [
        pytest.param(
            {**BERLIN_DAY, "close_at": "2026-11-24T09:00:00Z"}, "2026-11-24T09:30:00Z",
            Want(False, "Gate close requested", "2026-11-24T09:00:00Z", "2026-11-24T09:00:00Z",
                 "2026-11-24T10:00:00Z", "annotation"),
            id="close-request-overrides-scheduled-window",
        ),
        pytest.param(
            {**BERLIN_DAY, "close_at": "2026-11-24T09:00:00Z"}, "2026-11-24T10:00:00Z",
            scheduled_open("2026-11-24T08:00:00Z", "2026-11-24T15:00:00Z"),
            id="schedule-resumes-when-close-request-expires",
        ),
        pytest.param(
            {**BERLIN_DAY, "close_at": "2026-11-24T08:00:00Z"}, "2026-11-24T08:00:00Z",
            Want(False, "Gate close requested", "2026-11-24T08:00:00Z", "2026-11-24T08:00:00Z",
                 "2026-11-24T09:00:00Z", "annotation"),
            id="close-request-at-tick-wins",
        ),
        pytest.param(
            {**BERLIN_DAY, "open_at": "2026-11-24T08:00:00Z"}, "2026-11-24T08:00:00Z",
            Want(True, "Gate scheduled for closing at 2026-11-24T15:00:00Z", "2026-11-24T08:00:00Z",
                 "2026-11-24T15:00:00Z", "2026-11-24T09:00:00Z", "annotation"),
            id="open-request-at-tick-shows-request",
        ),
        pytest.param(
            {**BERLIN_DAY, "open_at": "2026-11-24T07:30:00Z"}, "2026-11-24T07:45:00Z",
            Want(True, "Gate scheduled for closing at 2026-11-24T15:00:00Z", "2026-11-24T07:30:00Z",
                 "2026-11-24T15:00:00Z", "2026-11-24T08:00:00Z", "annotation"),
            id="open-request-runs-into-window",
        ),
        pytest.param(
            {**BERLIN_DAY, "open_at": "2026-11-24T14:30:00Z"}, "2026-11-24T14:45:00Z",
            opened_until("2026-11-24T15:30:00Z", "2026-11-24T14:30:00Z"),
            id="open-request-extends-window",
        ),
        pytest.param(
            {**BERLIN_DAY, "close_at": "2026-11-24T10:00:00Z"}, "2026-11-24T09:00:00Z",
            scheduled_open("2026-11-24T08:00:00Z", "2026-11-24T10:00:00Z"),
            id="future-close-ends-window-early",
        ),
        pytest.param(
            {**NO_DEPLOY_FRIDAYS, "open_at": "2026-11-20T10:00:00Z"}, "2026-11-20T10:30:00Z",
            Want(True, "Gate open requested", "2026-11-20T10:00:00Z", "2026-11-20T10:00:00Z",
                 "2026-11-20T11:00:00Z", "annotation"),
            id="hotfix-on-friday",
        ),
        pytest.param(
            {**NO_DEPLOY_FRIDAYS, "open_at": "2026-11-20T10:00:00Z"}, "2026-11-20T11:00:00Z",
            closed_until("2026-11-20T23:00:00Z", "2026-11-19T23:00:00Z", "schedule"),
            id="friday-freeze-resumes-after-hotfix",
        ),
        pytest.param(
            {**NO_DEPLOY_FRIDAYS, "window": "4h", "close_at": "2026-11-19T20:00:00Z"},
            "2026-11-19T20:30:00Z",
            Want(False, "Gate scheduled for opening at 2026-11-20T23:00:00Z", "2026-11-19T20:00:00Z",
                 "2026-11-20T23:00:00Z", "2026-11-19T23:00:00Z", "annotation"),
            id="close-request-runs-into-freeze",
        ),
    ],
)  # fmt: skip
def test_requests_and_schedule(spec: dict[str, Any], now: str, want: Want) -> None:
    check(gate(**spec), t(now), want)


@pytest.mark.parametrize(
    ("spec", "now", "next_transition"),
    [
        pytest.param({**SRE, "open_at": "2026-11-21T12:00:00Z"}, "2026-11-21T10:00:00Z", "2026-11-21T12:00:00Z", id="open-in-2h"),
        pytest.param({**MAINTENANCE, "close_at": "2030-01-01T00:00:00Z"}, "2026-11-21T10:00:00Z", "2030-01-01T00:00:00Z", id="close-in-2030"),
        pytest.param({**SRE, "open_at": "2026-11-21T12:00:00Z", "close_at": "2026-11-21T13:00:00Z"}, "2026-11-21T10:00:00Z", "2026-11-21T12:00:00Z", id="both-in-future"),
    ],
)  # fmt: skip
def test_future_requests_wait_and_requeue_at_their_time(
    spec: dict[str, Any], now: str, next_transition: str
) -> None:
    state = evaluate(gate(**spec), now=t(now))
    assert state.opened is (spec["default"] == "opened")
    assert state.message in (CLOSED, OPENED)
    assert state.requested_at is None
    assert state.next_transition == t(next_transition)
    assert state.new_history == []


# -- history -------------------------------------------------------------------


def entry(
    time: str, action: str, source: str = "annotation", user: str | None = None
) -> GateHistoryEntry:
    return GateHistoryEntry.model_validate(
        {"time": time, "action": action, "source": source, "user": user}
    )


@pytest.mark.parametrize(
    ("spec", "now", "new"),
    [
        pytest.param(
            {**OPEN_10, "open_by": "cli:alice"}, "2026-11-21T10:00:00Z",
            [entry("2026-11-21T10:00:00Z", "open", "cli", "alice")],
            id="cli-user",
        ),
        pytest.param(
            {**OPEN_10_CLOSE_1010, "close_by": "receiver:flux-system/github"}, "2026-11-21T10:10:00Z",
            [entry("2026-11-21T10:00:00Z", "open"),
             entry("2026-11-21T10:10:00Z", "close", "Receiver/flux-system/github")],
            id="both-requests-oldest-first",
        ),
        pytest.param(
            {**OPEN_10, "open_by": "bob"}, "2026-11-21T10:00:00Z",
            [entry("2026-11-21T10:00:00Z", "open", "annotation", "bob")],
            id="unknown-requester-kept-as-user",
        ),
        pytest.param(OPEN_10_CLOSE_1010, "2026-11-21T10:05:00Z", [entry("2026-11-21T10:00:00Z", "open")], id="future-request-not-yet"),
        pytest.param(OPEN_10, "2026-11-22T10:00:00Z", [entry("2026-11-21T10:00:00Z", "open")], id="expired-request-still-audited"),
        pytest.param(
            {**OPEN_10, "open_at": "2026-11-21T11:00:00+01:00"}, "2026-11-21T10:00:00Z",
            [entry("2026-11-21T10:00:00Z", "open")],
            id="time-in-utc",
        ),
        pytest.param(
            DEPLOY_TUE_THU, "2026-03-24T09:00:00Z", [entry("2026-03-24T08:00:00Z", "open", "schedule")],
            id="scheduled-tick",
        ),
        pytest.param(NO_DEPLOY_FRIDAYS, "2026-11-20T12:00:00Z", [entry("2026-11-19T23:00:00Z", "close", "schedule")], id="scheduled-close"),
        pytest.param(DEPLOY_TUE_THU, "2026-03-24T15:00:00Z", [], id="tick-after-its-window"),
    ],
)  # fmt: skip
def test_history_entries(spec: dict[str, Any], now: str, new: list[GateHistoryEntry]) -> None:
    state = evaluate(gate(**spec), now=t(now))
    assert state.new_history == new
    assert state.history == new


def test_history_is_deduplicated_by_time_and_action() -> None:
    recorded = [entry("2026-11-21T11:00:00+01:00", "open", "cli", "alice")]
    state = evaluate(gate(**OPEN_10_CLOSE_1010, history=recorded), now=t("2026-11-21T10:30:00Z"))
    assert state.new_history == [entry("2026-11-21T10:10:00Z", "close")]
    assert state.history == [*recorded, entry("2026-11-21T10:10:00Z", "close")]


def test_same_time_other_action_is_a_new_entry() -> None:
    recorded = [entry("2026-11-21T10:00:00Z", "close")]
    state = evaluate(gate(**OPEN_10, history=recorded), now=t("2026-11-21T10:00:00Z"))
    assert state.new_history == [entry("2026-11-21T10:00:00Z", "open")]


def test_history_keeps_the_last_entries_newest_last() -> None:
    recorded = [entry(f"2026-11-20T{h:02d}:00:00Z", "open") for h in range(20)]
    state = evaluate(gate(**OPEN_10, history=recorded), now=t("2026-11-21T10:00:00Z"))
    assert state.new_history == [entry("2026-11-21T10:00:00Z", "open")]
    assert state.history == [*recorded[1:], entry("2026-11-21T10:00:00Z", "open")]


def test_history_limit_is_a_parameter() -> None:
    recorded = [entry(f"2026-11-20T{h:02d}:00:00Z", "open") for h in range(5)]
    state = evaluate(
        gate(**OPEN_10, history=recorded), now=t("2026-11-21T10:00:00Z"), history_limit=3
    )
    assert [e.time for e in state.history] == [
        "2026-11-20T03:00:00Z",
        "2026-11-20T04:00:00Z",
        "2026-11-21T10:00:00Z",
    ]


def test_request_older_than_a_full_history_is_not_reported_again() -> None:
    recorded = [entry(f"2026-11-22T{h:02d}:00:00Z", "close") for h in range(20)]
    state = evaluate(gate(**OPEN_10, history=recorded), now=t("2026-11-23T00:00:00Z"))
    assert state.new_history == []
    assert state.history == recorded


def test_merge_history_sorts_and_tolerates_foreign_times() -> None:
    existing = [
        entry("2026-11-21T12:00:00Z", "open"),
        entry("garbage", "close"),
        entry("2026-11-21T09:00:00Z", "open"),
    ]
    merged, new = merge_history(existing, [entry("2026-11-21T10:00:00Z", "close")], limit=3)
    assert [e.time for e in merged] == [
        "2026-11-21T09:00:00Z",
        "2026-11-21T10:00:00Z",
        "2026-11-21T12:00:00Z",
    ]
    assert [e.time for e in new] == ["2026-11-21T10:00:00Z"]


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        pytest.param(None, ("annotation", None), id="absent"),
        pytest.param("", ("annotation", None), id="empty"),
        pytest.param("cli:alice", ("cli", "alice"), id="cli"),
        pytest.param("receiver:flux-system/github", ("Receiver/flux-system/github", None), id="receiver"),
        pytest.param("cli:", ("annotation", "cli:"), id="cli-without-user"),
        pytest.param("ci-bot", ("annotation", "ci-bot"), id="free-form"),
    ],
)  # fmt: skip
def test_parse_requester(value: str | None, parsed: tuple[str, str | None]) -> None:
    assert parse_requester(value) == parsed


# -- strict times and InvalidGate ----------------------------------------------


@pytest.mark.parametrize(
    ("text", "utc"),
    [
        pytest.param("2026-11-21T10:00:00Z", "2026-11-21T10:00:00Z", id="zulu"),
        pytest.param("2026-11-21t10:00:00z", "2026-11-21T10:00:00Z", id="lowercase"),
        pytest.param("2026-11-21T11:30:00+01:30", "2026-11-21T10:00:00Z", id="offset"),
        pytest.param("2026-11-21T05:00:00-05:00", "2026-11-21T10:00:00Z", id="negative-offset"),
        pytest.param("2026-11-21T10:00:00-00:00", "2026-11-21T10:00:00Z", id="unknown-offset"),
        pytest.param("2026-11-21T10:00:00.123456789Z", "2026-11-21T10:00:00.123456Z", id="nanoseconds-truncated"),
        pytest.param("2024-02-29T00:00:00Z", "2024-02-29T00:00:00Z", id="leap-day"),
    ],
)  # fmt: skip
def test_parse_time_accepts_rfc3339(text: str, utc: str) -> None:
    assert format_time(parse_time(text)) == utc


BAD_TIMES = [
    pytest.param("yesterday", id="word"),
    pytest.param("", id="empty"),
    pytest.param("2026-11-21T10:00:00", id="no-zone"),
    pytest.param("2026-11-21", id="date-only"),
    pytest.param("2026-11-21 10:00:00Z", id="space-separator"),
    pytest.param("2026-11-21T10:00Z", id="no-seconds"),
    pytest.param("2026-11-21T10:00:00+0100", id="offset-without-colon"),
    pytest.param("20261121T100000Z", id="iso-basic-format"),
    pytest.param("2026-11-21T10:00:00Z\n", id="trailing-newline"),
    pytest.param(" 2026-11-21T10:00:00Z", id="leading-space"),
    pytest.param("2026-13-01T00:00:00Z", id="month-13"),
    pytest.param("2026-02-29T00:00:00Z", id="not-a-leap-year"),
    pytest.param("2026-11-21T24:00:00Z", id="hour-24"),
    pytest.param("2026-12-31T23:59:60Z", id="leap-second"),
    pytest.param("2026-11-21T10:00:00+24:00", id="offset-out-of-range"),
    pytest.param("0001-01-01T00:00:00+01:00", id="before-year-1-in-utc"),
    pytest.param("\uff12\uff10\uff12\uff16-11-21T10:00:00Z", id="non-ascii-digits"),
    pytest.param("1732183200", id="unix-seconds"),
]  # fmt: skip


@pytest.mark.parametrize("text", BAD_TIMES)
def test_parse_time_is_strict(text: str) -> None:
    with pytest.raises(ValueError, match=r"RFC3339|range|offset"):
        parse_time(text)


@pytest.mark.parametrize(
    "annotation", [OPEN_REQUESTED_AT_ANNOTATION, CLOSE_REQUESTED_AT_ANNOTATION]
)
@pytest.mark.parametrize("text", BAD_TIMES)
def test_malformed_annotation_is_invalid(annotation: str, text: str) -> None:
    subject = (
        gate(open_at=text) if annotation == OPEN_REQUESTED_AT_ANNOTATION else gate(close_at=text)
    )
    with pytest.raises(InvalidGate) as raised:
        evaluate(subject, now=t("2026-11-21T10:00:00Z"))
    assert (
        raised.value.message
        == f"annotation {annotation}: {json.dumps(text, ensure_ascii=False)} is not an RFC3339 time"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            {"open_at": "yesterday"},
            'annotation open.gate.fluxcd.io/requestedAt: "yesterday" is not an RFC3339 time',
            id="contract-example",
        ),
        pytest.param(
            {"open_at": "x" * 150},
            f'annotation open.gate.fluxcd.io/requestedAt: "{"x" * 100}…" is not an RFC3339 time',
            id="long-value-shortened",
        ),
        pytest.param({"window": "0s"}, 'spec.window: "0s" must be longer than 0s', id="zero-window"),
        pytest.param(
            {"schedule": [("0 9 * * 2-4", "Mars/Olympus", "7h")]},
            'spec.schedule[0].timeZone: "Mars/Olympus" is not an IANA time zone',
            id="unknown-time-zone",
        ),
        pytest.param(
            {"schedule": [("0 9 * * 2-4", "europe/berlin", "7h")]},
            'spec.schedule[0].timeZone: "europe/berlin" is not an IANA time zone',
            id="time-zone-case",
        ),
        pytest.param(
            {"schedule": [("0 9 * * 2-4", "", "7h")]},
            'spec.schedule[0].timeZone: "" is not an IANA time zone',
            id="empty-time-zone",
        ),
        pytest.param(
            {"schedule": [("0 9 * * 2-4", "../../etc/passwd", "7h")]},
            'spec.schedule[0].timeZone: "../../etc/passwd" is not an IANA time zone',
            id="path-as-time-zone",
        ),
        pytest.param(
            {"schedule": [("0 9 * * 2-4", "Europe", "7h")]},
            'spec.schedule[0].timeZone: "Europe" is not an IANA time zone',
            id="directory-as-time-zone",
        ),
        pytest.param(
            {"schedule": [("61 9 * * *", "UTC", "1h")]},
            'spec.schedule[0].cron: "61 9 * * *" is not a valid cron expression (bad minute)',
            id="bad-minute",
        ),
        pytest.param(
            {"schedule": [("0 0 30 2 *", "UTC", "1h")]},
            'spec.schedule[0].cron: "0 0 30 2 *" is not a valid cron expression (bad day-of-month)',
            id="impossible-date",
        ),
        pytest.param(
            {"schedule": [("0 9 * * MOO", "UTC", "1h")]},
            'spec.schedule[0].cron: "0 9 * * MOO" is not a valid cron expression (bad day-of-week)',
            id="bad-weekday",
        ),
        pytest.param(
            {"schedule": [("0 0 9 * * 2", "UTC", "1h")]},
            'spec.schedule[0].cron: "0 0 9 * * 2" does not have five fields',
            id="six-fields",
        ),
        pytest.param(
            {"schedule": [("@daily", "UTC", "1h")]},
            'spec.schedule[0].cron: "@daily" does not have five fields',
            id="macro",
        ),
        pytest.param(
            {"schedule": [("0 9 * * *", "UTC", "0s")]},
            'spec.schedule[0].window: "0s" must be longer than 0s',
            id="zero-schedule-window",
        ),
        pytest.param(
            {"close_at": "soon", "schedule": [("0 9 * * *", "UTC", "1h"), ("0 25 * * *", "Nowhere", "1h")]},
            'annotation close.gate.fluxcd.io/requestedAt: "soon" is not an RFC3339 time; '
            'spec.schedule[1].timeZone: "Nowhere" is not an IANA time zone; '
            'spec.schedule[1].cron: "0 25 * * *" is not a valid cron expression (bad hour)',
            id="every-problem-at-once",
        ),
    ],
)  # fmt: skip
def test_invalid_gate(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidGate) as raised:
        evaluate(gate(**spec), now=t("2026-11-21T10:00:00Z"))
    assert raised.value.message == message
    assert str(raised.value) == message


def test_requested_by_never_makes_a_gate_invalid() -> None:
    state = evaluate(gate(**OPEN_10, open_by="::: \n"), now=t("2026-11-21T10:00:00Z"))
    assert state.opened


def test_now_must_be_aware() -> None:
    with pytest.raises(ValueError, match="aware"):
        evaluate(gate(), now=datetime(2026, 11, 21, 10))


def test_now_in_another_zone_is_the_same_instant() -> None:
    berlin_now = datetime(2026, 11, 21, 11, 30, tzinfo=BERLIN)
    assert evaluate(gate(**OPEN_10), now=berlin_now) == evaluate(
        gate(**OPEN_10), now=t("2026-11-21T10:30:00Z")
    )


def test_walking_a_day_by_next_transition_visits_every_change() -> None:
    """The controller requeues at next_transition only; it must see each state of the day."""
    subject = gate(
        default="closed",
        window="1h",
        open_at="2026-11-24T06:00:00Z",
        close_at="2026-11-24T12:00:00Z",
        schedule=[("0 9 * * *", "Europe/Berlin", "7h")],
    )
    now = t("2026-11-24T00:00:00Z")
    seen: list[tuple[str, bool, str]] = []
    while now < t("2026-11-25T00:00:00Z"):
        state = evaluate(subject, now=now)
        seen.append((format_time(now), state.opened, state.message))
        assert state.next_transition is not None and state.next_transition > now
        now = state.next_transition
    assert seen == [
        ("2026-11-24T00:00:00Z", False, CLOSED),
        ("2026-11-24T06:00:00Z", True, "Gate scheduled for closing at 2026-11-24T07:00:00Z"),
        ("2026-11-24T07:00:00Z", False, CLOSED),
        ("2026-11-24T08:00:00Z", True, "Gate scheduled for closing at 2026-11-24T12:00:00Z"),
        ("2026-11-24T12:00:00Z", False, "Gate close requested"),
        ("2026-11-24T13:00:00Z", True, "Gate scheduled for closing at 2026-11-24T15:00:00Z"),
        ("2026-11-24T15:00:00Z", False, CLOSED),
    ]
