"""How often things may happen: duplicate alerts, and webhook bursts.

Pure state machines with the clock passed in (`now`, an aware datetime),
so tests step time instead of sleeping. None of them is thread-safe; the
controller uses each from its one event loop.

- `Dedup` is Flux's event rate limiter: an identical event for the same
  object is sent once per interval (`--rate-limit-interval`, 5m by default);
  the window starts at the send, so an event repeating every minute goes out
  every five, not never.
- `RateLimiter` is a token bucket per key: `burst` requests at once, then
  `rate` per second. Past it, a webhook is answered 429.
- `Debouncer` turns a burst of pushes to one Receiver into at most two
  actions per window: the first push acts at once (leading edge), and if more
  arrive within the window, one more action runs when it ends (trailing
  edge), which opens the next window. 50 pushes in a second make 2
  reconciles, not 50, and the last push is never lost.
- `WebhookLimiter` puts the two together behind `admit`, the one question the
  webhook handler asks. Ask it after the signature check, so that forged
  requests cannot spend a Receiver's budget.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

DEFAULT_DEDUP_INTERVAL = timedelta(minutes=5)


def event_key(event: Mapping[str, Any]) -> str:
    """The identity of an event for `Dedup`: the involved object, severity,
    reason, message and a hash of the metadata (revision, token, ...)."""
    involved = event.get("involvedObject")
    obj = involved if isinstance(involved, Mapping) else {}
    metadata = event.get("metadata")
    parts = {
        "object": [str(obj.get(field, "")) for field in ("kind", "namespace", "name", "uid")],
        "severity": str(event.get("severity", "")),
        "reason": str(event.get("reason", "")),
        "message": str(event.get("message", "")),
        "metadata": metadata if isinstance(metadata, Mapping) else {},
    }
    encoded = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(encoded.encode()).hexdigest()


class Dedup:
    """Lets one of each identical event through per interval."""

    def __init__(self, interval: timedelta = DEFAULT_DEDUP_INTERVAL, *, capacity: int = 65536):
        self.interval = interval
        self.capacity = capacity
        # key -> when it was last let through, oldest first.
        self._sent: OrderedDict[Hashable, datetime] = OrderedDict()

    def seen_recently(self, key: Hashable, now: datetime) -> bool:
        """True when `key` was let through less than an interval ago (drop it);
        otherwise remember it as sent now and answer False (send it)."""
        self._expire(now)
        sent = self._sent.get(key)
        if sent is not None and now - sent < self.interval:
            return True
        self._sent[key] = now
        self._sent.move_to_end(key)
        while len(self._sent) > self.capacity:
            self._sent.popitem(last=False)
        return False

    def __len__(self) -> int:
        return len(self._sent)

    def _expire(self, now: datetime) -> None:
        while self._sent:
            key, sent = next(iter(self._sent.items()))
            if now - sent < self.interval:
                return
            del self._sent[key]


class RateLimiter:
    """A token bucket per key: `burst` at once, refilled at `rate` per second."""

    def __init__(self, rate: float, burst: int, *, capacity: int = 65536) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be positive and burst at least 1")
        self.rate = rate
        self.burst = burst
        self.capacity = capacity
        # key -> (tokens left, when counted), least recently used first.
        self._buckets: OrderedDict[Hashable, tuple[float, datetime]] = OrderedDict()

    def allow(self, key: Hashable, now: datetime) -> bool:
        """Take a token for `key` if there is one."""
        tokens = self._tokens(key, now)
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            self._buckets.move_to_end(key)
            return False
        self._buckets[key] = (tokens - 1, now)
        self._buckets.move_to_end(key)
        while len(self._buckets) > self.capacity:
            self._buckets.popitem(last=False)
        return True

    def retry_after(self, key: Hashable, now: datetime) -> float:
        """Seconds until `key` has a token again (0 when it has one now)."""
        missing = 1 - self._tokens(key, now)
        return 0.0 if missing <= 0 else missing / self.rate

    def _tokens(self, key: Hashable, now: datetime) -> float:
        bucket = self._buckets.get(key)
        if bucket is None:
            return float(self.burst)
        tokens, counted = bucket
        elapsed = max((now - counted).total_seconds(), 0.0)
        return min(float(self.burst), tokens + elapsed * self.rate)


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer to one webhook request that passed authentication.

    - `accept` False: answer 429 (with `Retry-After: retry_after`), do nothing.
    - `act_now`: act (annotate the resources) for this request.
    - `act_later_at`: this request is folded into one trailing action the
      caller must schedule at that time; it is set on exactly one request per
      window, so the caller schedules at most one pending action per key.
    - neither: already covered by a scheduled trailing action; answer 200.
    """

    accept: bool
    act_now: bool = False
    act_later_at: datetime | None = None
    retry_after: float | None = None


class Debouncer:
    """At most one action per key per window: leading edge, plus one trailing."""

    def __init__(self, window: timedelta, *, capacity: int = 65536) -> None:
        self.window = window
        self.capacity = capacity
        # key -> (when the current window ends, when its trailing action runs).
        self._state: OrderedDict[Hashable, tuple[datetime, datetime | None]] = OrderedDict()

    def admit(self, key: Hashable, now: datetime) -> Decision:
        state = self._state.get(key)
        if state is not None:
            window_end, trailing_at = state
            if trailing_at is not None and now >= trailing_at:
                # The trailing action has run; it opened the next window.
                window_end, trailing_at = trailing_at + self.window, None
            if now < window_end:
                if trailing_at is not None:
                    self._remember(key, (window_end, trailing_at))
                    return Decision(accept=True)
                self._remember(key, (window_end, window_end))
                return Decision(accept=True, act_later_at=window_end)
        self._remember(key, (now + self.window, None))
        return Decision(accept=True, act_now=True)

    def _remember(self, key: Hashable, state: tuple[datetime, datetime | None]) -> None:
        self._state[key] = state
        self._state.move_to_end(key)
        while len(self._state) > self.capacity:
            self._state.popitem(last=False)


class WebhookLimiter:
    """The rate limit, then the debounce, for one Receiver's webhook."""

    def __init__(self, *, rate: float, burst: int, window: timedelta) -> None:
        self.rate_limiter = RateLimiter(rate, burst)
        self.debouncer = Debouncer(window)

    def admit(self, key: Hashable, now: datetime, *, debounce_key: Hashable = None) -> Decision:
        """`debounce_key` (default: `key`) folds only requests that would act alike:
        a Receiver with CEL filters folds identical bodies, never different ones."""
        if not self.rate_limiter.allow(key, now):
            wait = self.rate_limiter.retry_after(key, now)
            return Decision(accept=False, retry_after=float(max(1, math.ceil(wait))))
        return self.debouncer.admit(key if debounce_key is None else debounce_key, now)
