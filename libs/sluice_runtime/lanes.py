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
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_REQUESTED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "sluice_serving_requests", default=False
)

REQUESTED_THREADS = 2
"""Threads beside each bulk pool: requests come one at a time (a push, a CLI call)."""

_twins: dict[Executor | None, ThreadPoolExecutor] = {}
_twins_lock = threading.Lock()


def serving_requests() -> None:
    """Mark the running task (and every task it starts from now on) as serving requests."""
    _REQUESTED.set(True)


def is_requested() -> bool:
    return _REQUESTED.get()


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
