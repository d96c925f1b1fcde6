"""The work queue between informers and reconcile workers.

Semantics follow controller-runtime's queue, because they are what makes a
controller both prompt and calm:

- a key is either waiting or being processed; adding a waiting key again is a
  no-op, so a burst of 50 updates becomes one reconcile;
- a key being processed is never handed to a second worker; if it is added
  meanwhile it is marked dirty and queued again when the first worker is done;
- `add_after` schedules a key for later, keeping the earliest time when
  scheduled twice; `requeue_after` replaces the schedule instead, because a
  reconcile's outcome says when the next one is due, and a timer left by an
  earlier outcome (a 30 s dependency wait) must not cut a `retryInterval` short;
  for the same reason a schedule that comes due while its key is being
  processed is dropped, not marked dirty: the outcome of that reconcile
  replaces it;
- `add_rate_limited` backs a failing key off exponentially, per key, so one
  broken object never slows the others; `forget` resets its backoff;
- every key waits in one of three lanes, served in this order (`Lane`):
  REQUESTED, reconciles someone asked for (`reconcile.fluxcd.io/requestedAt`
  from a webhook or the CLI), so a receiver's push does not wait behind a
  thousand queued reconciles; FOLLOW_UP, the continuation of work already
  applied (a health wait's re-check), which is a read or two and is what
  turns an applied app Ready, so it must not queue behind first reconciles
  of apps not yet applied; NORMAL, everything else (new objects, intervals,
  watches, retries). A waiting key added again in a better lane moves to
  that lane, never to a worse one; keys keep their order within a lane.
  `add_after` and `requeue_after` carry the lane the key enters when due;
- `get(urgent_only=True)` is for a worker kept for requests: with every
  other worker busy in a long reconcile, a requested key would still wait
  for one of them to finish, however far ahead of the queue it stands.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable
from enum import IntEnum
from typing import Protocol


class Lane(IntEnum):
    """Where a queued key waits; lower lanes are served first."""

    REQUESTED = 0
    FOLLOW_UP = 1
    NORMAL = 2


class Clock(Protocol):
    def __call__(self) -> float: ...


class QueueObserver(Protocol):
    """Hooks for metrics; the queue itself knows nothing of Prometheus."""

    def added(self) -> None: ...
    def depth(self, depth: int) -> None: ...
    def waited(self, seconds: float) -> None: ...
    def retried(self) -> None: ...


class _NoObserver:
    def added(self) -> None:
        pass

    def depth(self, depth: int) -> None:
        pass

    def waited(self, seconds: float) -> None:
        pass

    def retried(self) -> None:
        pass


class QueueShutDown(Exception):
    """`get()` after `shutdown()`: the worker should exit."""


class ExponentialBackoff:
    """Per-key delay doubling from `base` up to `cap` (Flux's min/max retry delay)."""

    def __init__(self, *, base: float = 0.75, cap: float = 900.0) -> None:
        self.base = base
        self.cap = cap
        self._failures: dict[str, int] = {}

    def next_delay(self, key: str) -> float:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        return float(min(self.cap, self.base * (2**failures)))

    def failures(self, key: str) -> int:
        return self._failures.get(key, 0)

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)


class WorkQueue:
    def __init__(
        self,
        *,
        backoff: ExponentialBackoff | None = None,
        clock: Callable[[], float] = time.monotonic,
        observer: QueueObserver | None = None,
    ) -> None:
        self._backoff = backoff or ExponentialBackoff()
        self._clock = clock
        self._observer = observer or _NoObserver()
        self._lanes: tuple[deque[str], ...] = tuple(deque() for _ in Lane)
        self._lane_of: dict[str, Lane] = {}
        """The lane of every dirty key (waiting, or to requeue when its worker is done)."""
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._added_at: dict[str, float] = {}
        self._delayed: list[tuple[float, int, str]] = []
        self._delayed_at: dict[str, float] = {}
        self._delayed_lane: dict[str, Lane] = {}
        self._seq = itertools.count()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._urgent_waiters: deque[asyncio.Future[None]] = deque()
        """Workers that take only urgent keys."""
        self._timer_wakeup = asyncio.Event()
        self._shutdown = False
        self._timer: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return sum(len(lane) for lane in self._lanes)

    @property
    def processing(self) -> frozenset[str]:
        return frozenset(self._processing)

    def start(self) -> None:
        if self._timer is None:
            self._timer = asyncio.get_running_loop().create_task(
                self._run_timer(), name="workqueue-delays"
            )

    def add(self, key: str, *, lane: Lane = Lane.NORMAL) -> None:
        if self._shutdown:
            return
        if key in self._dirty:
            was = self._lane_of[key]
            if lane < was:
                self._lane_of[key] = lane
                if key not in self._processing:
                    self._lanes[was].remove(key)
                    self._lanes[lane].append(key)
                    if lane is Lane.REQUESTED:
                        self._notify(urgent=True)  # the kept worker may take it now
            return
        self._observer.added()
        self._dirty.add(key)
        self._lane_of[key] = lane
        self._added_at.setdefault(key, self._clock())
        if key in self._processing:
            return  # done() queues it again
        self._push(key)

    def _push(self, key: str) -> None:
        lane = self._lane_of[key]
        self._lanes[lane].append(key)
        self._observer.depth(len(self))
        self._notify(urgent=lane is Lane.REQUESTED)

    def add_after(self, key: str, delay: float, *, lane: Lane = Lane.NORMAL) -> None:
        if self._shutdown:
            return
        if delay <= 0:
            self.add(key, lane=lane)
            return
        when = self._clock() + delay
        # Whichever schedule stands, the key enters the best lane asked for.
        self._delayed_lane[key] = min(self._delayed_lane.get(key, lane), lane)
        current = self._delayed_at.get(key)
        if current is not None and current <= when:
            return
        self._delayed_at[key] = when
        heapq.heappush(self._delayed, (when, next(self._seq), key))
        self._timer_wakeup.set()

    def requeue_after(self, key: str, delay: float, *, lane: Lane = Lane.NORMAL) -> None:
        """Schedule `key` after `delay` (to enter `lane`), replacing whatever was
        scheduled for it."""
        self.cancel_delayed(key)
        self.add_after(key, delay, lane=lane)

    def add_rate_limited(self, key: str) -> float:
        """Requeue a failed key after its backoff, replacing its schedule; returns the delay."""
        self._observer.retried()
        delay = self._backoff.next_delay(key)
        self.requeue_after(key, delay)
        return delay

    def due_in(self, key: str) -> float | None:
        """Seconds, by the queue's clock, until `key` is due; None when not scheduled."""
        when = self._delayed_at.get(key)
        return None if when is None else max(0.0, when - self._clock())

    def failures(self, key: str) -> int:
        return self._backoff.failures(key)

    def forget(self, key: str) -> None:
        self._backoff.forget(key)

    def cancel_delayed(self, key: str) -> None:
        """Drop a pending `add_after` (the heap entry is skipped lazily)."""
        self._delayed_at.pop(key, None)
        self._delayed_lane.pop(key, None)

    async def get(self, *, urgent_only: bool = False) -> str:
        """The next key to reconcile, by lane; with `urgent_only`, the next requested one."""
        key, _ = await self.take(urgent_only=urgent_only)
        return key

    async def take(self, *, urgent_only: bool = False) -> tuple[str, Lane]:
        """`get`, with the lane the key waited in (a requested key's reconcile is
        served as requested by whichever worker takes it)."""
        requested = self._lanes[Lane.REQUESTED]
        while not requested and (urgent_only or not len(self)):
            if self._shutdown:
                raise QueueShutDown
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            (self._urgent_waiters if urgent_only else self._waiters).append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():
                    waiter.cancel()
        key = next(lane for lane in self._lanes if lane).popleft()
        lane = self._lane_of.pop(key)
        self._observer.depth(len(self))
        self._processing.add(key)
        self._dirty.discard(key)
        added = self._added_at.pop(key, None)
        if added is not None:
            self._observer.waited(self._clock() - added)
        return key, lane

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty and not self._shutdown:
            self._push(key)

    def shutdown(self) -> None:
        self._shutdown = True
        if self._timer is not None:
            self._timer.cancel()
        self._notify()

    def _notify(self, *, urgent: bool = False) -> None:
        # Wake one idle worker per queued key (an urgent key: the kept worker
        # first, if idle); on shutdown wake them all.
        for waiters in (self._urgent_waiters, self._waiters) if urgent else (self._waiters,):
            while waiters:
                waiter = waiters.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    if not self._shutdown:
                        return
        if self._shutdown:
            for waiter in self._urgent_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._urgent_waiters.clear()

    async def _run_timer(self) -> None:
        while not self._shutdown:
            self._timer_wakeup.clear()
            now = self._clock()
            while self._delayed and self._delayed[0][0] <= now:
                when, _, key = heapq.heappop(self._delayed)
                if self._delayed_at.get(key) != when:
                    continue
                del self._delayed_at[key]
                lane = self._delayed_lane.pop(key, Lane.NORMAL)
                # Due while its key is reconciled: that reconcile is the one it was
                # due for, and its outcome schedules the next. Added, it would mark
                # the key dirty and run it again at once for nothing: a health
                # wait's timed re-check, due while the watch's re-check ended the
                # wait, ran as a full reconcile (9% of the MTTP run's apps).
                if key not in self._processing:
                    self.add(key, lane=lane)
            timeout = (self._delayed[0][0] - now) if self._delayed else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._timer_wakeup.wait(), timeout)
