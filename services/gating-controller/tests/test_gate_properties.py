"""Hypothesis properties of a Gate's inputs: cron, time zones, windows, request annotations.

`evaluate` either answers a state or raises InvalidGate, whose message (the
Gate's Stalled condition) quotes the bad values; nothing else may escape.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gating_controller.evaluating import InvalidGate, evaluate

from .test_evaluating import gate

cron_field = st.one_of(
    st.sampled_from(
        ["*", "*/5", "0", "59", "60", "1-5", "5-1", "MON", "jan", "L", "?", "#", ",", "-"]
    ),
    st.text(alphabet="0123456789*/-,LW#?", min_size=1, max_size=6),
)
crons = st.one_of(st.lists(cron_field, min_size=0, max_size=7).map(" ".join), st.text(max_size=30))
zones = st.one_of(
    st.sampled_from(
        [
            "UTC",
            "Europe/Berlin",
            "America/St_Johns",
            "Nowhere/City",
            "",
            "../../etc/passwd",
            "UTC\x00",
        ]
    ),
    st.text(max_size=20),
)
windows = st.one_of(
    st.sampled_from(["1h", "0s", "-1m", "1e3h", "2562047h", ""]), st.text(max_size=8)
)
times = st.one_of(
    st.none(),
    st.sampled_from(["2026-01-01T00:00:00Z", "2026-13-40T99:00:00Z"]),
    st.text(max_size=25),
)


@settings(max_examples=400, deadline=None)
@given(
    schedule=st.lists(st.tuples(crons, zones, windows), max_size=2),
    window=windows,
    open_at=times,
    close_at=times,
    now=st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)),
)  # fmt: skip
@example(schedule=[("0 0 30 2 *", "UTC", "1h")], window="1h", open_at=None, close_at=None,
         now=datetime(2026, 1, 1, tzinfo=UTC))  # fmt: skip
def test_a_gate_evaluates_or_is_refused_by_name(
    schedule: list[tuple[str, str, str]],
    window: str,
    open_at: str | None,
    close_at: str | None,
    now: datetime,
) -> None:
    try:
        subject = gate(window=window, open_at=open_at, close_at=close_at, schedule=schedule)
    except ValueError:
        return  # the model refused it: the API server's schema answers the user
    try:
        state = evaluate(subject, now=now)
    except InvalidGate as error:
        message = error.message
    else:
        message = state.reason
    assert message
