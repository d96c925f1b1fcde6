"""Client-side throttling: a token bucket, API Priority and Fairness, 429 retries.

Like client-go, a client limits itself (QPS/burst) only when the server
does not protect itself with API Priority and Fairness, and a request the
server sheds with 429 is sent again after the Retry-After it names.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sluice_runtime.kube.errors import ApiError, ApiUnavailable

MAX_RETRIES_ON_429 = 10
"""client-go's default: a request refused with 429 is sent again up to ten times."""


def retry_after(value: str | None) -> float:
    """Seconds to wait before sending again, from a Retry-After header (1 s when
    missing or unreadable, capped so a confused server cannot park us for long)."""
    try:
        seconds = float(value) if value is not None else 1.0
    except ValueError:
        seconds = 1.0
    return min(max(seconds, 0.0), 30.0)


FLOWCONTROL_VERSIONS = ("v1", "v1beta3", "v1beta2", "v1beta1")
"""flowcontrol.apiserver.k8s.io versions that mean API Priority and Fairness is on
(v1.20 serves v1beta1; current servers v1 and v1beta3)."""


class TokenBucket:
    """Client-side rate limit (like client-go's QPS/burst) so a busy controller
    never floods a shared API server."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.capacity = float(max(burst, 1))
        self.tokens = self.capacity
        self.stamp = time.monotonic()
        self.lock = asyncio.Lock()

    async def take(self) -> None:
        if self.qps <= 0:
            return
        async with self.lock:
            now = time.monotonic()
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.qps)
            self.stamp = now
            if self.tokens < 1:
                await asyncio.sleep((1 - self.tokens) / self.qps)
                self.stamp = time.monotonic()
                self.tokens = 0
            else:
                self.tokens -= 1


async def has_priority_and_fairness(request: Callable[..., Awaitable[Any]]) -> bool:
    """Whether the server serves API Priority and Fairness (any known version);
    `request` is a client's `request`."""
    try:
        group = await request("GET", "/apis/flowcontrol.apiserver.k8s.io", timeout=10.0)
    except (ApiError, ApiUnavailable):
        return False
    served = {str(v.get("version")) for v in (group or {}).get("versions") or []}
    return any(version in served for version in FLOWCONTROL_VERSIONS)
