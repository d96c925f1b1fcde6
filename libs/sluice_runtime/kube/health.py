"""Waiting for a set of applied objects to be healthy: a poller over the API server.

The verdict on one reading is `kstatus.compute_status` (pure, table-tested);
this module reads, re-reads what is not Current yet, and reports. The kstatus
names are re-exported so callers judge and wait through one module.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sluice_runtime import evaluating
from sluice_runtime.describing import describe
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import ApiError, ApiUnavailable, NotFound
from sluice_runtime.kube.kstatus import (
    Health,
    Status,
    compute_status,
    current,
    failed,
    in_progress,
)
from sluice_runtime.kube.resources import ObjectRef

__all__ = [
    "Health",
    "HealthReport",
    "ObjectHealth",
    "Status",
    "StatusRule",
    "check_health",
    "compute_status",
    "current",
    "failed",
    "in_progress",
    "read_health",
    "wait_for_health",
]


@dataclass(frozen=True, slots=True)
class ObjectHealth:
    subject: str
    health: Health
    resource_version: str = ""
    """Of the object as read ("" when it was not read, or not found): a later
    change to it (a watch event past this version) is news for a wait."""

    def __str__(self) -> str:
        return f"{self.subject}: {self.health.status}: {self.health.message}"


@dataclass(frozen=True, slots=True)
class HealthReport:
    """The last reading of every object, and why the wait ended."""

    objects: list[ObjectHealth] = field(default_factory=list)
    timed_out: bool = False
    cancelled: bool = False

    @property
    def healthy(self) -> bool:
        return all(o.health.is_current for o in self.objects) and not self.cancelled

    @property
    def unhealthy(self) -> list[ObjectHealth]:
        return [o for o in self.objects if not o.health.is_current]

    @property
    def failed(self) -> list[ObjectHealth]:
        return [o for o in self.objects if o.health.status == "Failed"]

    def summary(self) -> str:
        if self.healthy:
            return f"{len(self.objects)} objects are healthy"
        if self.cancelled:
            why = "wait cancelled"
        elif self.timed_out:
            why = "timeout waiting for health"
        else:
            why = "health check failed"
        return "\n".join([f"{why}:", *(str(o) for o in self.unhealthy)])

    def __str__(self) -> str:
        return self.summary()


StatusRule = Callable[[Mapping[str, Any]], Health]


async def read_health(
    client: KubeClient,
    target: ObjectRef,
    status: StatusRule = compute_status,
    *,
    not_older_than: str = "",
) -> ObjectHealth:
    """One reading of `target`; `status` judges it (kstatus unless a caller has its own rules).

    `not_older_than`, a resourceVersion a watch told of, asks for the object as
    it was then or later: the API server answers that from its watch cache,
    where a GET without one is a quorum read through etcd (Kubernetes API
    concepts, "Resource versions": unset is "Most Recent", set is "Not older
    than"; the apiserver's cacher serves a Get with a resourceVersion from the
    cache, 1.20 as 1.30 and later)."""
    rt, subject = target.rt, target.display
    try:
        obj = await _get(client, target, not_older_than)
    except NotFound:
        return ObjectHealth(subject, Health("NotFound", f"{rt.kind} not found"))
    except (ApiError, ApiUnavailable) as error:
        # A 403 or a blip is not a verdict on the object; keep polling.
        return ObjectHealth(subject, Health("Unknown", f"cannot read {rt.kind}: {describe(error)}"))
    obj.setdefault("kind", rt.kind)
    obj.setdefault("apiVersion", rt.api_version)
    version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    if status is compute_status:
        return ObjectHealth(subject, compute_status(obj), version)
    # A caller's own rules are CEL (healthCheckExprs): tenant expressions over a
    # tenant's object, judged in the CEL threads within a budget and a timeout.
    try:
        health = await evaluating.off_loop(lambda: status(obj))
    except evaluating.BudgetExceeded as error:
        health = Health("Failed", f"{rt.kind} health check: {error}")
    return ObjectHealth(subject, health, version)


async def _get(client: KubeClient, target: ObjectRef, not_older_than: str) -> JSON:
    if not not_older_than:
        return await client.get(target.rt, target.name, target.namespace)
    path = target.rt.path(namespace=target.namespace, name=target.name)
    try:
        obj: JSON = await client.request("GET", path, query=[("resourceVersion", not_older_than)])
    except ApiError as error:
        if error.status != 504:
            raise
        # A cache that has not caught up with that version in time answers 504
        # "Too large resource version" (an API server behind the one whose watch
        # told of it); a quorum read has it.
        return await client.get(target.rt, target.name, target.namespace)
    return obj


async def check_health(
    client: KubeClient,
    objects: Sequence[ObjectRef],
    *,
    known: Mapping[ObjectRef, Health] | None = None,
    status: StatusRule = compute_status,
    concurrency: int = 8,
    not_older_than: Mapping[ObjectRef, str] | None = None,
) -> HealthReport:
    """One reading of every object `known` has no reading of: a single round of
    `wait_for_health`, for callers that look again later on their own (a
    reconcile that releases its worker between rounds instead of sleeping).
    An object in `not_older_than` is read as of that resourceVersion or later
    (see `read_health`)."""
    limit = asyncio.Semaphore(max(concurrency, 1))
    versions = not_older_than or {}

    async def read(target: ObjectRef) -> ObjectHealth:
        async with limit:
            return await read_health(
                client, target, status, not_older_than=versions.get(target, "")
            )

    known = known or {}
    unread = [t for t in objects if t not in known]
    readings = dict(zip(unread, await asyncio.gather(*(read(t) for t in unread)), strict=True))
    return HealthReport([readings.get(t) or ObjectHealth(t.display, known[t]) for t in objects])


async def wait_for_health(
    client: KubeClient,
    objects: Sequence[ObjectRef],
    *,
    timeout: float,
    interval: float = 2.0,
    cancel: asyncio.Event | None = None,
    concurrency: int = 8,
    clock: Callable[[], float] = time.monotonic,
    on_waiting: Callable[[], Awaitable[None]] | None = None,
    known: Mapping[ObjectRef, Health] | None = None,
    status: StatusRule = compute_status,
    first_interval: float | None = None,
) -> HealthReport:
    """Poll until every object is Current, one is Failed, `timeout` passes or `cancel` is set.

    Failed ends the wait at once: waiting cannot fix what kstatus calls
    Failed. NotFound counts as unhealthy (it may still be on its way).
    `on_waiting` runs once, when the first reading shows there is something
    to wait for (a caller reports progress then, not for instant successes).
    `known` holds first readings the caller already has (the API's answers to
    an apply): those objects are not read in the first round. `status` judges
    each reading (kstatus by default; custom health checks replace it).
    `first_interval` starts the polling sooner, doubling up to `interval`: most
    objects that are not Current in the apply's answer are a moment later,
    and a reconcile should not hold its worker for a whole interval then.
    """
    limit = asyncio.Semaphore(max(concurrency, 1))

    async def read(target: ObjectRef) -> ObjectHealth:
        async with limit:
            return await read_health(client, target, status)

    deadline = clock() + timeout
    results: dict[ObjectRef, ObjectHealth] = {
        t: ObjectHealth(t.display, known[t]) for t in objects if known and t in known
    }
    unread = [t for t in objects if t not in results]
    delay = min(first_interval, interval) if first_interval else interval
    while True:
        if cancel is not None and cancel.is_set():
            return HealthReport([results.get(t) or _unread(t) for t in objects], cancelled=True)
        readings = await asyncio.gather(*(read(t) for t in unread))
        results.update(zip(unread, readings, strict=True))
        # Current objects are not read again: a rollout that finished stays finished
        # for the purpose of this wait, and it halves the requests of big sets.
        pending = [t for t in objects if not results[t].health.is_current]
        report = [results[t] for t in objects]
        if not pending or any(r.health.status == "Failed" for r in report):
            return HealthReport(report)
        remaining = deadline - clock()
        if remaining <= 0:
            return HealthReport(report, timed_out=True)
        if on_waiting is not None:
            await on_waiting()
            on_waiting = None
        await _sleep_or_cancel(min(delay, remaining), cancel)
        delay = min(delay * 2, interval)
        unread = pending


def _unread(target: ObjectRef) -> ObjectHealth:
    return ObjectHealth(target.display, Health("Unknown", "not read yet"))


async def _sleep_or_cancel(seconds: float, cancel: asyncio.Event | None) -> None:
    if cancel is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(cancel.wait(), timeout=seconds)
