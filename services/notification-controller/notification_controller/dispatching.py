"""Fair, bounded delivery: one tenant's slow Provider cannot stall everyone's alerts.

Deliveries run in a lane per Provider, each with its own small concurrency
(`--provider-concurrency`) and backlog (`--provider-backlog`): a Provider
that takes its whole timeout on every request fills its own lane, and the
others keep delivering. Everything the hub holds in memory, queued events and
pending deliveries alike, draws on one `ByteBudget` (`--event-queue-bytes`),
so a burst of large events is refused instead of exhausting memory. Every
drop is logged with its reason and counted in `Dropped`.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

log = structlog.get_logger(__name__)

Job = Callable[[], Awaitable[None]]


class Dropped(collections.Counter[str]):
    """Events or deliveries dropped, by reason; observable by tests and metrics."""


class ByteBudget:
    """Bytes the hub may hold at once; taken when something is queued, given back after."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> bool:
        if self.used + size > self.limit:
            return False
        self.used += size
        return True

    def give(self, size: int) -> None:
        self.used = max(0, self.used - size)


@dataclass
class _Lane:
    pending: collections.deque[tuple[Job, int]] = field(default_factory=collections.deque)
    running: set[asyncio.Task[None]] = field(default_factory=set)


class ProviderLanes:
    def __init__(
        self, *, concurrency: int, backlog: int, budget: ByteBudget, dropped: Dropped
    ) -> None:
        if concurrency < 1 or backlog < 0:
            raise ValueError("concurrency must be at least 1 and backlog not negative")
        self.concurrency = concurrency
        self.backlog = backlog
        self.budget = budget
        self.dropped = dropped
        self._lanes: dict[str, _Lane] = {}
        self._idle = asyncio.Event()
        self._idle.set()

    def submit(self, provider: str, job: Job, *, size: int) -> bool:
        """Run `job` in `provider`'s lane, or drop it (False) when the lane or the
        byte budget is full."""
        lane = self._lanes.setdefault(provider, _Lane())
        if len(lane.running) >= self.concurrency and len(lane.pending) >= self.backlog:
            return self._drop("provider backlog full", provider)
        if not self.budget.take(size):
            return self._drop("event queue bytes exhausted", provider)
        lane.pending.append((job, size))
        self._idle.clear()
        self._fill(provider, lane)
        return True

    async def drain(self) -> None:
        """Wait until every lane is empty (tests, shutdown)."""
        await self._idle.wait()

    async def stop(self) -> None:
        for lane in self._lanes.values():
            lane.pending.clear()
            for task in list(lane.running):
                task.cancel()
        tasks = [task for lane in self._lanes.values() for task in lane.running]
        await asyncio.gather(*tasks, return_exceptions=True)
        self._lanes.clear()
        self._idle.set()

    def busy(self, provider: str) -> int:
        lane = self._lanes.get(provider)
        return len(lane.running) + len(lane.pending) if lane else 0

    def _drop(self, reason: str, provider: str) -> bool:
        self.dropped[reason] += 1
        log.warning("notification dropped", reason=reason, provider=provider)
        return False

    def _fill(self, provider: str, lane: _Lane) -> None:
        while lane.pending and len(lane.running) < self.concurrency:
            job, size = lane.pending.popleft()
            task = asyncio.get_running_loop().create_task(
                self._run(job, size), name=f"deliver-{provider}"
            )
            lane.running.add(task)
            task.add_done_callback(lambda done: self._finished(provider, lane, done))

    async def _run(self, job: Job, size: int) -> None:
        try:
            await job()
        except Exception:  # a delivery bug must not stop the lane
            log.exception("notification delivery failed")
        finally:
            self.budget.give(size)

    def _finished(self, provider: str, lane: _Lane, task: asyncio.Task[None]) -> None:
        lane.running.discard(task)
        self._fill(provider, lane)
        if not lane.running and not lane.pending and self._lanes.get(provider) is lane:
            del self._lanes[provider]
        if not self._lanes:
            self._idle.set()
