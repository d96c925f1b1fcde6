"""Duplicate alerts, token buckets and webhook debouncing, on a fake clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from notification_controller.limiting import (
    Debouncer,
    Decision,
    Dedup,
    RateLimiter,
    WebhookLimiter,
    event_key,
)

T0 = datetime(2025, 1, 2, 3, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def event(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "involvedObject": {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "name": "apps",
            "namespace": "flux-system",
            "uid": "1234",
        },
        "severity": "error",
        "timestamp": "2025-01-02T03:04:05Z",
        "message": "health check failed",
        "reason": "HealthCheckFailed",
        "metadata": {"kustomize.toolkit.fluxcd.io/revision": "main@sha1:abc"},
        "reportingController": "kustomize-controller",
    }
    body.update(changes)
    return body


# event_key -----------------------------------------------------------------------


def test_event_key_ignores_time_and_reporter() -> None:
    assert event_key(event()) == event_key(
        event(timestamp="2030-01-01T00:00:00Z", reportingInstance="other")
    )


def test_event_key_ignores_metadata_order() -> None:
    a = event(metadata={"x/a": "1", "x/b": "2"})
    b = event(metadata={"x/b": "2", "x/a": "1"})
    assert event_key(a) == event_key(b)


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"severity": "info"}, id="severity"),
        pytest.param({"reason": "ReconciliationFailed"}, id="reason"),
        pytest.param({"message": "other"}, id="message"),
        pytest.param(
            {"metadata": {"kustomize.toolkit.fluxcd.io/revision": "main@sha1:def"}},
            id="revision",
        ),
        pytest.param({"metadata": {}}, id="no-metadata"),
        pytest.param(
            {
                "involvedObject": {
                    "kind": "Kustomization",
                    "name": "other",
                    "namespace": "flux-system",
                }
            },
            id="object",
        ),
    ],
)
def test_event_key_distinguishes(changes: dict[str, Any]) -> None:
    assert event_key(event()) != event_key(event(**changes))


def test_event_key_survives_odd_shapes() -> None:
    assert event_key({}) == event_key({"involvedObject": None, "metadata": "nonsense"})


# Dedup --------------------------------------------------------------------------


def test_dedup_sends_an_identical_event_once_per_interval() -> None:
    dedup = Dedup(timedelta(minutes=5))
    key = event_key(event())
    assert not dedup.seen_recently(key, at(0))
    assert dedup.seen_recently(key, at(1))
    assert dedup.seen_recently(key, at(299))
    assert not dedup.seen_recently(key, at(300))
    assert dedup.seen_recently(key, at(301))


def test_dedup_window_starts_at_the_send_not_the_last_sighting() -> None:
    dedup = Dedup(timedelta(minutes=5))
    sent = [t for t in range(0, 1200, 60) if not dedup.seen_recently("k", at(t))]
    assert sent == [0, 300, 600, 900]


def test_dedup_keys_are_independent() -> None:
    dedup = Dedup(timedelta(minutes=5))
    assert not dedup.seen_recently("a", at(0))
    assert not dedup.seen_recently("b", at(1))
    assert dedup.seen_recently("a", at(2))


def test_dedup_forgets_expired_keys_and_stays_bounded() -> None:
    dedup = Dedup(timedelta(seconds=10), capacity=3)
    for i in range(5):
        dedup.seen_recently(f"k{i}", at(i))
    assert len(dedup) == 3
    assert not dedup.seen_recently("k0", at(5)), "evicted, so sent again"
    dedup.seen_recently("later", at(100))
    assert len(dedup) == 1


# RateLimiter ---------------------------------------------------------------------


def test_rate_limiter_allows_a_burst_then_the_rate() -> None:
    limiter = RateLimiter(rate=1.0, burst=3)
    assert [limiter.allow("r", at(0)) for _ in range(5)] == [True, True, True, False, False]
    assert limiter.retry_after("r", at(0)) == pytest.approx(1.0)
    assert limiter.retry_after("r", at(0.5)) == pytest.approx(0.5)
    assert limiter.allow("r", at(1))
    assert not limiter.allow("r", at(1.5))
    assert limiter.allow("r", at(2))


def test_rate_limiter_refills_up_to_burst_only() -> None:
    limiter = RateLimiter(rate=10.0, burst=2)
    assert limiter.allow("r", at(0))
    assert [limiter.allow("r", at(100)) for _ in range(3)] == [True, True, False]
    assert limiter.retry_after("r", at(1000)) == 0.0


def test_rate_limiter_keys_are_independent() -> None:
    limiter = RateLimiter(rate=0.1, burst=1)
    assert limiter.allow("a", at(0))
    assert not limiter.allow("a", at(1))
    assert limiter.allow("b", at(1))


@pytest.mark.parametrize(("rate", "burst"), [(0, 1), (-1, 1), (1, 0)])
def test_rate_limiter_rejects_nonsense(rate: float, burst: int) -> None:
    with pytest.raises(ValueError, match="rate"):
        RateLimiter(rate=rate, burst=burst)


# Debouncer ----------------------------------------------------------------------


def test_debouncer_leading_then_one_trailing() -> None:
    debouncer = Debouncer(timedelta(seconds=10))
    decisions = [debouncer.admit("r", at(i * 0.1)) for i in range(50)]
    assert decisions[0] == Decision(accept=True, act_now=True)
    assert decisions[1] == Decision(accept=True, act_later_at=at(10))
    assert all(d == Decision(accept=True) for d in decisions[2:])
    actions = sum(d.act_now for d in decisions) + sum(d.act_later_at is not None for d in decisions)
    assert actions == 2


def test_debouncer_single_push_acts_once() -> None:
    debouncer = Debouncer(timedelta(seconds=10))
    assert debouncer.admit("r", at(0)).act_now
    assert debouncer.admit("r", at(10)).act_now, "the window is over"


def test_debouncer_trailing_action_opens_the_next_window() -> None:
    debouncer = Debouncer(timedelta(seconds=10))
    assert debouncer.admit("r", at(0)).act_now
    assert debouncer.admit("r", at(5)).act_later_at == at(10)
    # The trailing action ran at 10 and holds the window until 20.
    assert debouncer.admit("r", at(12)) == Decision(accept=True, act_later_at=at(20))
    assert debouncer.admit("r", at(15)) == Decision(accept=True)
    # Quiet after the trailing action at 20: the next push acts at once.
    assert debouncer.admit("r", at(31)).act_now


def test_debouncer_steady_pushes_act_once_per_window() -> None:
    debouncer = Debouncer(timedelta(seconds=10))
    decisions = [debouncer.admit("r", at(t)) for t in range(0, 60)]
    moments = [at(t) for t, d in zip(range(60), decisions, strict=True) if d.act_now]
    moments += [d.act_later_at for d in decisions if d.act_later_at is not None]
    assert sorted(moments) == [at(0), at(10), at(20), at(30), at(40), at(50), at(60)]


def test_debouncer_keys_are_independent() -> None:
    debouncer = Debouncer(timedelta(seconds=10))
    assert debouncer.admit("a", at(0)).act_now
    assert debouncer.admit("b", at(1)).act_now
    assert debouncer.admit("a", at(2)).act_later_at == at(10)


# WebhookLimiter -----------------------------------------------------------------


def test_webhook_limiter_burst_of_fifty() -> None:
    limiter = WebhookLimiter(rate=1.0, burst=20, window=timedelta(seconds=10))
    decisions = [limiter.admit("flux-system/github", at(i * 0.01)) for i in range(50)]
    accepted = [d for d in decisions if d.accept]
    rejected = [d for d in decisions if not d.accept]
    assert len(accepted) == 20
    assert len(rejected) == 30
    assert all(d.retry_after is not None and d.retry_after >= 1 for d in rejected)
    assert not any(d.act_now or d.act_later_at for d in rejected)
    assert sum(d.act_now for d in accepted) == 1
    assert [d.act_later_at for d in accepted if d.act_later_at] == [at(10)]


def test_webhook_limiter_rejections_do_not_touch_the_debounce() -> None:
    limiter = WebhookLimiter(rate=0.01, burst=1, window=timedelta(seconds=10))
    assert limiter.admit("r", at(0)).act_now
    assert limiter.admit("r", at(1)) == Decision(accept=False, retry_after=99.0)
    # Past the window, with a token again: acts at once, no trailing was scheduled.
    assert limiter.admit("r", at(100)).act_now
