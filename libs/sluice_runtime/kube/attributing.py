"""Who a request was for: observers of every request, and the reconcile it counts for.

Each request of a client's connection pool is told, once answered, to the
observers registered with `KubeClient.observe` (metrics, the benchmark's
per-phase counts), attributed to the object being reconciled and its step
through `attributed`, which the runner enters around each step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

from sluice_runtime.kube.writing import APPLY_PATCH


@dataclass(frozen=True, slots=True)
class Request:
    """One request as an observer sees it: what it did and on whose behalf."""

    verb: str
    """get, list, watch, create, update, patch, apply, dry-run or delete."""
    path: str
    key: str
    """The `namespace/name` of the object being reconciled ("" outside a reconcile)."""
    phase: str
    """The step of that reconcile ("" outside a reconcile)."""
    seconds: float = 0.0
    """From sending to the answer's headers (a throttled wait excluded)."""
    status: int = 0
    """The HTTP status; 0 when no answer came."""
    query: Sequence[tuple[str, str]] = ()
    """The query parameters sent (a GET's resourceVersion, an apply's dryRun)."""


class RequestObserver(Protocol):
    """Told of every request once answered (metrics, the benchmark's per-phase counts)."""

    def requested(self, request: Request) -> None: ...


_attribution: ContextVar[tuple[str, str]] = ContextVar(
    "sluice_request_attribution", default=("", "")
)


@contextlib.contextmanager
def attributed(*, key: str | None = None, phase: str | None = None) -> Iterator[None]:
    """Requests sent inside this block are counted for `key` (the reconciled object)
    and `phase` (its step); either left out keeps the enclosing one."""
    outer_key, outer_phase = _attribution.get()
    token = _attribution.set(
        (outer_key if key is None else key, outer_phase if phase is None else phase)
    )
    try:
        yield
    finally:
        _attribution.reset(token)


def verb(method: str, query: Sequence[tuple[str, str]], content_type: str) -> str:
    names = {name for name, _ in query}
    if method == "GET":
        return "watch" if "watch" in names else "list" if "limit" in names else "get"
    if method == "PATCH" and content_type == APPLY_PATCH:
        return "dry-run" if "dryRun" in names else "apply"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower()
    )


def tell_observers(
    observers: Sequence[RequestObserver],
    method: str,
    path: str,
    query: Sequence[tuple[str, str]],
    content_type: str,
    seconds: float,
    status: int,
) -> None:
    """Tell each observer of one answered request, attributed to the current reconcile."""
    key, phase = _attribution.get()
    request = Request(verb(method, query, content_type), path, key, phase, seconds, status, query)
    for observer in observers:
        observer.requested(request)
