"""What the reaction, scale and webhook-load benchmarks share.

Controllers run as separate processes (`e2e.fleet.Controller`), as they do in a
cluster, so the benchmark's own work (polling, load generation) never runs
on a controller's event loop. What the benchmark observes it reads through
API watches (`e2e.watching.follow`): `Watching` stamps every change of a kind
with the moment it arrived, so a trial stops at the event, not at the next poll.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from e2e.fleet import Controller
from e2e.watching import Listed, follow
from sluice_api.meta import format_time
from sluice_envtest import harness
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import NAMESPACE, SECRET, ResourceType

__all__ = ["Controller"]

GITREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")
KUSTOMIZATION = ResourceType("kustomize.toolkit.fluxcd.io", "v1", "kustomizations", "Kustomization")
RECEIVER = ResourceType("notification.toolkit.fluxcd.io", "v1", "receivers", "Receiver")
GATE = ResourceType("gating.toolkit.fluxcd.io", "v1alpha1", "gates", "Gate")
CONFIG_MAP = ResourceType("", "v1", "configmaps", "ConfigMap")

REQUESTED_AT = "reconcile.fluxcd.io/requestedAt"


def condition(obj: JSON | None, type_: str) -> JSON | None:
    """The condition of `type_`; None too when the object is gone."""
    return harness.condition(obj, type_) if obj is not None else None


def ready(obj: JSON | None) -> bool:
    """Ready for its current generation; a deleted object (None) is not."""
    return obj is not None and harness.is_ready(obj)


def applied(revision: str) -> Callable[[JSON | None], bool]:
    """Ready, with `revision` (`main@sha1:<id>`) the last one applied."""
    return lambda o: ready(o) and (o or {}).get("status", {}).get("lastAppliedRevision") == revision


def has_artifact(revision: str) -> Callable[[JSON | None], bool]:
    return lambda o: ((o or {}).get("status") or {}).get("artifact", {}).get("revision") == revision


def now_rfc3339() -> str:
    """Now, with microseconds: two requests within one second stay ordered."""
    return format_time(datetime.now(UTC), fraction="micro")


def metric(controller: Controller, name: str, /, **labels: str) -> float:
    """The sum of every series of `name` whose labels include `labels`."""
    url = f"http://127.0.0.1:{controller.port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    total = 0.0
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? ([0-9.e+-]+|NaN)$", re.MULTILINE)
    for found in pattern.finditer(text):
        series = dict(re.findall(r'(\w+)="([^"]*)"', found.group(1) or ""))
        if all(series.get(k) == v for k, v in labels.items()):
            total += float(found.group(2))
    return total


def rss_mib(controller: Controller) -> float:
    with open(f"/proc/{controller.proc.pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def create_namespace(client: KubeClient, name: str) -> None:
    await client.create(
        NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )


async def create_receiver(
    client: KubeClient, namespace: str, name: str, *, token: str, resources: list[JSON]
) -> None:
    await client.create(
        SECRET,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{name}-token", "namespace": namespace},
            "data": {"token": base64.b64encode(token.encode()).decode()},
        },
    )
    await client.create(
        RECEIVER,
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1",
            "kind": "Receiver",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "type": "github",
                "events": ["push"],
                "secretRef": {"name": f"{name}-token"},
                "resources": resources,
            },
        },
    )


def git_repository(name: str, url: str) -> JSON:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": name},
        "spec": {"url": url, "interval": "1h", "ref": {"branch": "main"}},
    }


def kustomization(name: str, source: str, **spec: Any) -> JSON:
    return {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": name},
        "spec": {
            "interval": "1h",
            "path": "./",
            "prune": True,
            "sourceRef": {"kind": "GitRepository", "name": source},
            **spec,
        },
    }


@dataclass
class _Waiter:
    name: str
    check: Callable[[JSON | None], bool]
    found: asyncio.Future[tuple[JSON, float]]


@dataclass
class Watching:
    """The latest version of every object of one kind in one namespace, kept by a watch.

    `events` is every change seen, as (arrival time, object); `until` returns
    the first version that satisfies a check and when it arrived.
    """

    client: KubeClient
    rt: ResourceType
    namespace: str
    objects: dict[str, JSON] = field(default_factory=dict)
    events: list[tuple[float, JSON]] = field(default_factory=list)
    _waiters: list[_Waiter] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None
    _listed: asyncio.Event = field(default_factory=asyncio.Event)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Watching]:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"bench-watch-{self.rt.plural}"
        )
        await self._listed.wait()
        try:
            yield self
        finally:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def expect(
        self, name: str, check: Callable[[JSON | None], bool]
    ) -> asyncio.Future[tuple[JSON, float]]:
        """A future for the first change of `name` from now on that passes `check`.

        Registered at once, so calling it before the action that causes the
        change cannot miss the change.
        """
        waiter = _Waiter(name, check, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        waiter.found.add_done_callback(
            lambda _: self._waiters.remove(waiter) if waiter in self._waiters else None
        )
        return waiter.found

    async def until(
        self, name: str, check: Callable[[JSON | None], bool], *, timeout: float = 300
    ) -> tuple[JSON, float]:
        """The first version of `name` that passes `check`, now or later, and when it arrived."""
        current = self.objects.get(name)
        if check(current):
            assert current is not None
            return current, time.monotonic()
        return await self.wait(name, self.expect(name, check), timeout=timeout)

    async def wait(
        self, name: str, found: asyncio.Future[tuple[JSON, float]], *, timeout: float = 300
    ) -> tuple[JSON, float]:
        try:
            return await asyncio.wait_for(found, timeout)
        except TimeoutError:
            raise TimeoutError(
                f"{self.rt.kind}/{name}: not reached in {timeout}s; "
                f"last status: {(self.objects.get(name) or {}).get('status')}"
            ) from None

    def _seen(self, obj: JSON, deleted: bool = False) -> None:
        at = time.monotonic()
        name = obj["metadata"]["name"]
        if deleted:
            self.objects.pop(name, None)
        else:
            self.objects[name] = obj
        self.events.append((at, obj))
        for waiter in list(self._waiters):
            seen = None if deleted else obj
            if waiter.name == name and not waiter.found.done() and waiter.check(seen):
                waiter.found.set_result((obj, at))

    async def _run(self) -> None:
        async for change in follow(self.client, self.rt, self.namespace):
            if isinstance(change, Listed):
                self.objects = {o["metadata"]["name"]: o for o in change.objects}
                self._listed.set()
            else:
                self._seen(change.object, deleted=change.deleted)
