"""A lane for requested work: what a webhook or the CLI asked for never queues behind bulk work.

The work queue hands requested keys to a worker kept for them (controller.py);
ahead of the queue is not enough when the reconcile then waits for a thread
in a pool that a thousand interval reconciles keep busy (asyncio's default
executor writing their artifacts, the ls-remote pool). `serving` marks a
worker's task while it reconciles a key taken from the requested lane (by
the kept worker, or by a bulk worker that was idle), and every task it
starts inherits the mark (a context variable); `executor` and `to_thread`
then give its blocking calls
a small pool of their own beside each bulk pool, so they wait only for other
requested work.

The event loop itself is the last queue on the way: asyncio runs ready
callbacks first come, first served, so under load each await of a requested
reconcile resumed only after every callback the bulk work had made ready
before it (with 1000 apps in delivery the loop is late most of the time).
`prioritize(loop)` splits the loop's ready queue into the same two lanes:
a callback whose context carries the mark (a requested task's every step,
the I/O of a connection opened by one) runs before bulk callbacks, first
come, first served within each lane. Nothing is dropped or delayed for
long: requested work is a push or a CLI call at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import ParamSpec, Protocol, TypeVar

from sluice_runtime import holding

P = ParamSpec("P")
T = TypeVar("T")

_REQUESTED: contextvars.ContextVar[bool | None] = contextvars.ContextVar(
    "sluice_serving_requests", default=None
)
"""True in requested work, False in bulk work (a reconcile nobody asked for),
None outside both: the controller's own machinery (informers, leader
election, the event sender), which never holds back for requested work."""

REQUESTED_THREADS = 2
"""Threads beside each bulk pool: requests come one at a time (a push, a CLI call)."""

_twins: dict[Executor | None, ThreadPoolExecutor] = {}
_twins_lock = threading.Lock()


def serving_requests() -> None:
    """Mark the running task (and every task it starts from now on) as serving requests."""
    _REQUESTED.set(True)


def is_requested() -> bool:
    return _REQUESTED.get() is True


def is_bulk() -> bool:
    """Inside a reconcile (or a request served for one) that nobody asked for."""
    return _REQUESTED.get() is False


HEADER = "X-Sluice-Lane"
"""Carries the mark across HTTP, from the kustomize-controller's artifact
download to the source-controller's file server. Anyone can send it: it
buys a place among a few threads, never access."""


def request_headers() -> dict[str, str]:
    """Headers that carry the mark to a server of ours, when serving requests."""
    return {HEADER: "requested"} if _REQUESTED.get() else {}


@contextlib.contextmanager
def serving(requested: bool) -> Iterator[None]:
    """Mark the running task as serving requests, or not, while the block runs.

    Reset after: a worker, or a server handling a keep-alive connection, goes
    on to other work in the same task.
    """
    token = _REQUESTED.set(requested)
    try:
        if requested:
            # Bulk API requests of the process hold back meanwhile (holding.py).
            with holding.HOLD.serving():
                yield
        else:
            yield
    finally:
        _REQUESTED.reset(token)


def serving_as(header: str | None) -> contextlib.AbstractContextManager[None]:
    """Mark a request handler while it runs, when its client was serving requests."""
    return serving(header == "requested")


def executor(bulk: Executor | None = None) -> Executor | None:
    """The pool for a blocking call: `bulk` (None: asyncio's default), or its requested twin.

    A twin per bulk pool, not one for all: a requested ls-remote that hangs
    holds its thread until libgit2's own timeout, and must not take the
    threads a requested artifact write needs.
    """
    if not _REQUESTED.get():
        return bulk
    with _twins_lock:
        twin = _twins.get(bulk)
        if twin is None:
            twin = _twins[bulk] = ThreadPoolExecutor(
                max_workers=REQUESTED_THREADS, thread_name_prefix="requested"
            )
        return twin


async def to_thread(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`asyncio.to_thread`, in the requested twin of the default executor when serving requests."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(executor(), call)


class ReadyObserver(Protocol):
    """Told of each requested callback the loop readies and runs (`--trace-requests`)."""

    def readied(self, handle: asyncio.Handle, bulk_ahead: int) -> None: ...
    def running(self, handle: asyncio.Handle) -> None: ...


class ReadyLanes:
    """An event loop's ready queue in two lanes: requested callbacks, then the rest.

    It stands in for the loop's `collections.deque` and offers what the loop
    uses of it (`append`, `popleft`, `len`, truth, `clear`): the loop still
    runs as many callbacks per turn as were ready when the turn began, only
    in this order. A handle's lane is read from its context when it is queued.
    """

    __slots__ = ("_bulk", "_requested", "observer", "requested_first")

    def __init__(
        self, handles: Iterable[asyncio.Handle] = (), *, requested_first: bool = True
    ) -> None:
        self._requested: deque[asyncio.Handle] = deque()
        self._bulk: deque[asyncio.Handle] = deque()
        self.requested_first = requested_first
        """False: one first-come, first-served queue as asyncio's, still observed."""
        self.observer: ReadyObserver | None = None
        for handle in handles:
            self.append(handle)

    def append(self, handle: asyncio.Handle) -> None:
        # Every asyncio Handle has a context (its creator's, copied, when none is given).
        if not handle._context.get(_REQUESTED, None):  # type: ignore[attr-defined]
            self._bulk.append(handle)
            return
        if self.observer is not None:
            self.observer.readied(handle, len(self._bulk))
        (self._requested if self.requested_first else self._bulk).append(handle)

    def popleft(self) -> asyncio.Handle:
        handle = self._requested.popleft() if self._requested else self._bulk.popleft()
        if self.observer is not None:
            self.observer.running(handle)
        return handle

    def __len__(self) -> int:
        return len(self._requested) + len(self._bulk)

    def __bool__(self) -> bool:
        return bool(self._requested or self._bulk)

    def clear(self) -> None:
        self._requested.clear()
        self._bulk.clear()


def prioritize(
    loop: asyncio.AbstractEventLoop, *, requested_first: bool = True
) -> ReadyLanes | None:
    """Serve requested callbacks first in `loop` (the running one, from its own thread);
    None when the loop keeps no ready deque of its own (not asyncio's)."""
    ready = getattr(loop, "_ready", None)
    if isinstance(ready, ReadyLanes):
        ready.requested_first = requested_first
        return ready
    if not isinstance(ready, deque):
        return None
    lanes = ReadyLanes(ready, requested_first=requested_first)
    loop._ready = lanes  # type: ignore[attr-defined]
    return lanes
