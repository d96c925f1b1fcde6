"""Bulk API requests hold back while requested work is in flight.

The lanes (`sluice_runtime.lanes`) put a requested reconcile first in every
queue of ours: the work queue, the event loop, the thread pools, the API
connections. Under load that is not enough: what is left of a webhook's
time is its API round trips, each served by an API server (and etcd) that
is busy with the bulk requests of the same controllers (1,000 apps being
delivered: a status patch 0.3 s, an apply 0.35 s instead of 0.03 s). The
server serves what it has in flight; the only way to put our requested
request first there is to send fewer others meanwhile.

So while a process has requested work in flight, or expects some (a source
a Kustomization follows was just asked to reconcile: its new artifact will
come as requested work in a moment; a source's new artifact fetched
because someone asked is about to be applied as requested work elsewhere:
`followed`, for half the limit), its bulk API requests wait before
they are sent, and its bulk workers start no new reconcile; what is in
flight finishes. Only work nobody asked for waits: never a requested task,
nor the controller's machinery (watches and lists deliver what requested
work waits for; a leader must renew its lease whatever happens).

A hold is short and bounded: it ends when the requested work is done, and
never lasts longer than `limit` seconds (`--requested-hold`, 2 s by
default); after a hold that ran out, bulk work has `limit` seconds before
the next hold can begin, so a stream of requests cannot starve the
interval reconciles. `limit` 0 turns holding off.

`settle` is the decision, pure; `BulkHold` keeps its state, the timer of
its next transition and the waiting bulk requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

LIMIT = 2.0
"""Seconds a hold lasts at most (`--requested-hold`)."""


@dataclass(frozen=True, slots=True)
class HoldState:
    serving: int = 0
    """Requested tasks running now (a reconcile, a download a requested reconcile asked for)."""
    expected_until: float = 0.0
    """Requested work is announced until then (monotonic seconds)."""
    following_until: float = 0.0
    """Requested work elsewhere follows what requested work here produced (a
    consumer applies a source's new artifact) until about then."""
    started: float | None = None
    """When the hold in force began; None when bulk requests go."""
    cooldown_until: float = 0.0
    """After a hold that ran out, bulk requests go until then whatever is requested."""


@dataclass(frozen=True, slots=True)
class Settled:
    state: HoldState
    holding: bool
    next_check: float | None
    """When the answer may change on its own (a hold runs out, an expectation lapses)."""


def settle(state: HoldState, now: float, limit: float) -> Settled:
    """Whether bulk requests hold at `now`, and the state to keep."""
    expected = max(state.expected_until, state.following_until)
    wanted = state.serving > 0 or now < expected
    if limit <= 0 or not wanted:
        return Settled(replace(state, started=None), holding=False, next_check=None)
    if now < state.cooldown_until:
        return Settled(replace(state, started=None), holding=False, next_check=state.cooldown_until)
    started = now if state.started is None else state.started
    if now - started >= limit:
        cooled = replace(state, started=None, cooldown_until=now + limit)
        return Settled(cooled, holding=False, next_check=cooled.cooldown_until)
    ends = started + limit
    if state.serving == 0:
        ends = min(ends, expected)
    return Settled(replace(state, started=started), holding=True, next_check=ends)


class BulkHold:
    """The process's hold: requested work enters it, bulk requests wait for it."""

    def __init__(self, limit: float = LIMIT, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._clock = clock
        self._state = HoldState()
        self._holding = False
        self._timer: asyncio.TimerHandle | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self.held = 0
        """Bulk requests and reconciles that waited (tests read it)."""

    @property
    def holding(self) -> bool:
        return self._holding

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Requested work in flight while the block runs."""
        self._state = replace(self._state, serving=self._state.serving + 1)
        self._update()
        try:
            yield
        finally:
            serving = self._state.serving - 1
            # The work announced has come and gone: no need to wait for more.
            expected = self._state.expected_until if serving else 0.0
            self._state = replace(self._state, serving=serving, expected_until=expected)
            self._update()

    def expect(self) -> None:
        """Requested work is on its way (at most `limit` seconds away)."""
        until = self._clock() + self.limit
        self._state = replace(self._state, expected_until=max(until, self._state.expected_until))
        self._update()

    def followed(self) -> None:
        """Requested work here produced what others follow (a source's new artifact,
        the kustomize-controller applies it as requested work): hold on for them,
        half the limit, since nothing here tells when they are done. The
        artifact's download comes back to this process as requested work, and its
        apply takes a few round trips more."""
        until = self._clock() + self.limit / 2
        self._state = replace(self._state, following_until=max(until, self._state.following_until))
        self._update()

    def answered(self) -> None:
        """What was expected will not come (a source answered without a new revision)."""
        self._state = replace(self._state, expected_until=0.0)
        self._update()

    async def turn(self) -> None:
        """Return when a bulk request may go."""
        if not self._holding:
            return
        self.held += 1
        while self._holding:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)

    def _update(self) -> None:
        settled = settle(self._state, self._clock(), self.limit)
        self._state, self._holding = settled.state, settled.holding
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if settled.next_check is not None:
            with contextlib.suppress(RuntimeError):  # no running loop: nothing waits either
                loop = asyncio.get_running_loop()
                delay = max(settled.next_check - self._clock(), 0.0)
                self._timer = loop.call_later(delay, self._update)
        if not self._holding:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done() and not waiter.get_loop().is_closed():
                    waiter.set_result(None)


HOLD = BulkHold()
"""The process's hold (one per process: every client of it talks to the same servers)."""
