"""Leader election on a coordination.k8s.io Lease, as client-go does it.

With several replicas of a controller only the leader runs reconcile
workers; the others keep their informers warm so a failover is quick. Expiry
is judged by our own clock from when we last saw the lease change (not by
the holder's timestamps), so clock skew between nodes cannot make two
leaders. A leader that cannot renew within the renew deadline steps down and
the process exits, as controller-runtime does; on a clean shutdown the lease
is released so the next leader need not wait for it to expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from datetime import UTC, datetime

import structlog

from sluice_api.meta import format_time
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import Conflict, KubeError, NotFound
from sluice_runtime.kube.resources import LEASE

log = structlog.get_logger(__name__)


def _micro_time(moment: float) -> str:
    return format_time(datetime.fromtimestamp(moment, UTC), fraction="micro")


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 35.0,
        renew_deadline: float = 30.0,
        retry_period: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock
        self.is_leader = False
        self._observed: tuple[str, float] | None = None  # (resourceVersion, local time seen)
        self._renewer: asyncio.Task[None] | None = None

    async def acquire(self) -> None:
        """Return once we hold the lease."""
        log.info("waiting for leadership", lease=f"{self.namespace}/{self.name}")
        # Polling the Lease is the protocol; there is no event to wait on.
        while not await self._try_acquire_or_renew():  # noqa: ASYNC110
            await asyncio.sleep(self.retry_period)
        self.is_leader = True
        log.info("became leader", lease=f"{self.namespace}/{self.name}", identity=self.identity)

    def keep(self, on_lost: Callable[[], None]) -> None:
        """Renew in the background; call `on_lost` if the lease slips away."""
        self._renewer = asyncio.get_running_loop().create_task(
            self._renew_loop(on_lost), name="leader-renew"
        )

    async def release(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        if not self.is_leader:
            return
        self.is_leader = False
        with contextlib.suppress(KubeError):
            lease = await self.client.get(LEASE, self.name, self.namespace)
            if lease.get("spec", {}).get("holderIdentity") == self.identity:
                now = self.clock()
                lease["spec"].update(
                    {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": _micro_time(now)}
                )
                await self.client.replace(LEASE, lease)
                log.info("released leadership", lease=f"{self.namespace}/{self.name}")

    async def _renew_loop(self, on_lost: Callable[[], None]) -> None:
        last_renewed = self.clock()
        while True:
            await asyncio.sleep(self.retry_period)
            try:
                renewed = await asyncio.wait_for(
                    self._try_acquire_or_renew(), timeout=self.renew_deadline
                )
            except TimeoutError:
                renewed = False
            if renewed:
                last_renewed = self.clock()
            elif self.clock() - last_renewed >= self.renew_deadline:
                self.is_leader = False
                log.error("lost leadership", lease=f"{self.namespace}/{self.name}")
                on_lost()
                return

    async def _try_acquire_or_renew(self) -> bool:
        now = self.clock()
        spec: JSON = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": _micro_time(now),
            "renewTime": _micro_time(now),
            "leaseTransitions": 0,
        }
        try:
            lease = await self.client.get(LEASE, self.name, self.namespace)
        except NotFound:
            try:
                created = await self.client.create(
                    LEASE,
                    {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace},
                        "spec": spec,
                    },
                )
            except (Conflict, KubeError):
                return False
            self._observe(created, now)
            return True
        except KubeError as error:
            log.warning("reading lease failed", error=str(error))
            return False

        current = lease.get("spec") or {}
        holder = current.get("holderIdentity") or ""
        version = str(lease["metadata"].get("resourceVersion", ""))
        if self._observed is None or self._observed[0] != version:
            self._observe(lease, now)
        assert self._observed is not None
        duration = float(current.get("leaseDurationSeconds") or self.lease_duration)
        held_by_other = holder not in ("", self.identity)
        if held_by_other and self._observed[1] + duration > now:
            return False
        if holder == self.identity:
            spec["acquireTime"] = current.get("acquireTime") or spec["acquireTime"]
            spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0)
        else:
            spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + 1
        lease["spec"] = spec
        try:
            updated = await self.client.replace(LEASE, lease)
        except KubeError:
            return False  # a conflict means someone else wrote first
        self._observe(updated, now)
        return True

    def _observe(self, lease: JSON, now: float) -> None:
        self._observed = (str(lease["metadata"].get("resourceVersion", "")), now)
