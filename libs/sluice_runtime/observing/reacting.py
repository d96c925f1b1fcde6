"""Where a requested reconcile's time goes: one timeline per reconcile someone asked for.

A webhook's push crosses two controllers (the source fetch, then the
Kustomization), and under load its time can hide in places no per-phase sum
shows: the key waiting for a worker, each step, the API's answers, the
informer delivering the source's new status, or the event loop itself (a
requested reconcile's every await queues behind the ready callbacks of the
bulk work on the same loop; asyncio has no priorities). With
`--trace-requests FILE` a controller appends one JSON line per reconcile
that entered the REQUESTED lane: when the handler queued it (wall clock, so
lines of two processes line up), when a worker took it, each step's start
and end, every API request it sent (started, seconds to the answer, verb,
status), and the loop's lag while it ran, sampled every `LAG_PERIOD` by a
task that measures how late its own timer fires.

Off unless the flag is given (`e2e.bench reaction` gives it); then the
controller and the runner call `queued`/`begin`/`step`/`finish`, and a
request observer fills in the requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sluice_runtime.kube.attributing import Request
from sluice_runtime.lanes import ReadyLanes

LAG_PERIOD = 0.005
"""How often the loop-lag sampler asks to wake; its lateness is the lag."""

_LAG_KEPT = 60_000
"""Samples kept (about five minutes at LAG_PERIOD, less under load)."""


@dataclass
class Timeline:
    kind: str
    key: str
    cause: str
    """What queued it: `requestedAt`, or the watched kind whose change answers a request."""
    queued: float
    """Wall clock (time.time()) when the handler put the key in the REQUESTED lane."""
    started: float = 0.0
    ended: float = 0.0
    result: str = ""
    lane_worker: bool = False
    """Taken by the worker kept for requests (else by a bulk worker that was idle)."""
    steps: list[tuple[str, float, float]] = field(default_factory=list)
    requests: list[tuple[float, float, str, str, int, str]] = field(default_factory=list)
    """(started, seconds, verb, phase, status, path) of each API request."""
    lag: dict[str, float] = field(default_factory=dict)
    loop_cpu: float = 0.0
    """CPU the loop's thread used while the reconcile ran (all of its tasks)."""
    wakeups: int = 0
    """Callbacks of this reconcile the loop ran from its ready lane (`lanes.ReadyLanes`)."""
    bulk_passed: int = 0
    """Bulk callbacks that were ready ahead of those when each became ready: what they
    would have waited behind in a single first-come, first-served queue (a count)."""
    ready_wait: float = 0.0
    """Seconds those callbacks waited in the loop's ready queue, summed."""


@dataclass
class _State:
    path: Path
    samples: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=_LAG_KEPT))
    pending: dict[tuple[str, str], tuple[float, str]] = field(default_factory=dict)
    sampler: asyncio.Task[None] | None = None
    ready: ReadyLanes | None = None
    readied: dict[int, float] = field(default_factory=dict)
    """id(handle) → perf_counter when a requested callback became ready."""


_state: _State | None = None
_current: contextvars.ContextVar[Timeline | None] = contextvars.ContextVar(
    "sluice_requested_timeline", default=None
)


def enable(path: str, ready: ReadyLanes | None = None) -> None:
    """Trace requested reconciles into `path` from now on (in a running loop), and
    their callbacks' waits in the loop's `ready` lanes when the loop has them."""
    global _state
    _state = _State(Path(path), ready=ready)
    _state.sampler = asyncio.get_running_loop().create_task(_sample_lag(_state), name="loop-lag")
    if ready is not None:
        ready.observer = _ReadyTimes(_state)


def disable() -> None:
    global _state
    if _state is not None and _state.sampler is not None:
        _state.sampler.cancel()
    if _state is not None and _state.ready is not None:
        _state.ready.observer = None
    _state = None


class _ReadyTimes:
    """A ReadyObserver: each requested callback's wait in the loop, into its timeline."""

    def __init__(self, state: _State) -> None:
        self._state = state

    def readied(self, handle: asyncio.Handle, bulk_ahead: int) -> None:
        timeline = _timeline_of(handle)
        if timeline is not None:
            timeline.bulk_passed += bulk_ahead
            self._state.readied[id(handle)] = time.perf_counter()

    def running(self, handle: asyncio.Handle) -> None:
        since = self._state.readied.pop(id(handle), None)
        timeline = _timeline_of(handle)
        if since is not None and timeline is not None:
            timeline.wakeups += 1
            timeline.ready_wait += time.perf_counter() - since


def _timeline_of(handle: asyncio.Handle) -> Timeline | None:
    context: contextvars.Context | None = getattr(handle, "_context", None)
    return None if context is None else context.get(_current, None)


async def _sample_lag(state: _State) -> None:
    while True:
        due = time.time() + LAG_PERIOD
        await asyncio.sleep(LAG_PERIOD)
        now = time.time()
        state.samples.append((now, max(0.0, now - due)))


def queued(kind: str, key: str, cause: str) -> None:
    """The handler put `key` in the REQUESTED lane; the first request since its last
    reconcile began is the one timed."""
    if _state is not None:
        _state.pending.setdefault((kind, key), (time.time(), cause))


def begin(kind: str, key: str, *, lane_worker: bool) -> Timeline | None:
    """A worker took `key`: its timeline if it was requested, else None."""
    if _state is None:
        return None
    found = _state.pending.pop((kind, key), None)
    if found is None:
        return None
    return Timeline(kind, key, found[1], found[0], time.time(), lane_worker=lane_worker)


@contextlib.contextmanager
def recording(timeline: Timeline | None) -> Iterator[None]:
    """Attribute steps and requests inside this block to `timeline`."""
    token = _current.set(timeline)
    # Only for a traced reconcile: the thread's CPU clock is a system call (no vDSO),
    # on every reconcile of every controller otherwise.
    cpu = time.thread_time() if timeline is not None else 0.0
    try:
        yield
    finally:
        _current.reset(token)
        if timeline is not None:
            timeline.loop_cpu = time.thread_time() - cpu


def step(name: str, started: float, ended: float) -> None:
    """A step of the current reconcile ran from `started` to `ended` (perf_counter)."""
    timeline = _current.get()
    if timeline is not None:
        offset = time.time() - time.perf_counter()
        timeline.steps.append((name, started + offset, ended + offset))


class RequestTimes:
    """A request observer: each answered request, into the current timeline."""

    def requested(self, request: Request) -> None:
        timeline = _current.get()
        if timeline is not None:
            r = request
            timeline.requests.append(
                (time.time() - r.seconds, r.seconds, r.verb, r.phase, r.status, r.path)
            )


def finish(timeline: Timeline | None, result: str) -> None:
    if timeline is None or _state is None:
        return
    timeline.ended = time.time()
    timeline.result = result
    timeline.lag = lag_between(_state.samples, timeline.started, timeline.ended)
    with _state.path.open("a") as handle:
        handle.write(json.dumps(asdict(timeline)) + "\n")


def lag_between(samples: Any, start: float, end: float) -> dict[str, float]:
    """The loop-lag samples taken in [start, end]: how many, their mean and max, and the
    share of the window the sampler spent late (sum of lags over the window)."""
    lags = [lag for at, lag in samples if start <= at <= end]
    if not lags:
        return {"samples": 0, "mean": 0.0, "max": 0.0, "late_share": 0.0}
    window = max(end - start, 1e-9)
    return {
        "samples": len(lags),
        "mean": sum(lags) / len(lags),
        "max": max(lags),
        "late_share": min(1.0, sum(lags) / window),
    }
