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
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

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
            started = self.clock()
            outcome = "refused (held by another replica, a conflicting write or an API error)"
            try:
                # Not asyncio.wait_for: on Python 3.11 it returns the renewal's answer
                # when release() cancels this task in the loop turn that answer
                # arrives, and the loop then renewed on while release() waited for
                # it forever (a release that hung, an ElectionThread stop that timed
                # out, both under load). asyncio.timeout lets the cancellation through.
                async with asyncio.timeout(self.renew_deadline):
                    renewed = await self._try_acquire_or_renew()
            except TimeoutError:
                renewed, outcome = False, "no answer within the renew deadline"
            if renewed:
                last_renewed = self.clock()
            else:
                # Says where the time went when a leader steps down under load.
                log.warning(
                    "renewing the lease failed",
                    lease=f"{self.namespace}/{self.name}",
                    reason=outcome,
                    attempt_seconds=round(self.clock() - started, 2),
                    since_renewed_seconds=round(self.clock() - last_renewed, 2),
                )
            if not renewed and self.clock() - last_renewed >= self.renew_deadline:
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


class ElectionThread:
    """A LeaderElector on a thread with an event loop and API connection of its own.

    On the controller's loop, a renewal waits its turn behind every ready
    reconcile callback: with 200 sources fetched on a starved node one turn
    took longer than the renew deadline, the leader stepped down mid-delivery
    and exited (the chaos suite's source-controller failover at 200 apps).
    client-go renews on a goroutine of its own, which reconcile load does not
    hold up; a thread is Python's nearest equivalent (the interpreter hands it
    the GIL every few milliseconds however busy the loop is). A loop wedged
    for good then keeps the Lease, as a wedged Go reconciler does: the
    liveness probe, which fails once that loop's heartbeat is stale
    (endpoints.Heartbeat), is what restarts it.
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[KubeClient]],
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float,
        renew_deadline: float,
        retry_period: float,
    ) -> None:
        self._connect = connect
        self._settings: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "identity": identity,
            "lease_duration": lease_duration,
            "renew_deadline": renew_deadline,
            "retry_period": retry_period,
        }
        self._elector: LeaderElector | None = None
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()  # bound to the thread's loop on first use
        self._thread: threading.Thread | None = None

    @property
    def is_leader(self) -> bool:
        return self._elector is not None and self._elector.is_leader

    async def acquire(self, on_lost: Callable[[], None]) -> None:
        """Return once we hold the lease; `on_lost` then runs on the caller's loop
        if the lease slips away."""
        caller = asyncio.get_running_loop()
        acquired: concurrent.futures.Future[None] = concurrent.futures.Future()

        def lost() -> None:
            with contextlib.suppress(RuntimeError):  # the caller's loop already closed
                caller.call_soon_threadsafe(on_lost)

        self._thread = threading.Thread(
            target=self._loop.run_until_complete,
            args=(self._elect(acquired, lost),),
            name="leader-election",
            daemon=True,
        )
        self._thread.start()
        try:
            await asyncio.wrap_future(acquired)
        except BaseException:
            self._signal_stop()  # stopped (or failed) while standing by
            raise

    async def release(self) -> None:
        """Stop renewing and hand the lease over (the thread releases it)."""
        self._signal_stop()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        self._loop.close()

    def _signal_stop(self) -> None:
        with contextlib.suppress(RuntimeError):  # the thread's loop already finished
            self._loop.call_soon_threadsafe(self._stop.set)

    async def _elect(
        self, acquired: concurrent.futures.Future[None], lost: Callable[[], None]
    ) -> None:
        try:
            client = await self._connect()
        except BaseException as error:
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                acquired.set_exception(error)
            return
        try:
            self._elector = elector = LeaderElector(client, **self._settings)
            acquiring = asyncio.create_task(elector.acquire())
            stopping = asyncio.create_task(self._stop.wait())
            await asyncio.wait({acquiring, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if acquiring.done() and acquiring.exception() is not None:
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    acquired.set_exception(acquiring.exception())
            elif acquiring.done():
                try:
                    acquired.set_result(None)
                except concurrent.futures.InvalidStateError:
                    pass  # the caller gave up waiting: release below
                else:
                    elector.keep(lost)
                await stopping
            acquiring.cancel()
            stopping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await acquiring
            await elector.release()
        finally:
            await client.close()
