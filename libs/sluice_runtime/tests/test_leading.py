"""Leader election on a real Lease."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import KubeError
from sluice_runtime.kube.resources import LEASE
from sluice_runtime.leading import LeaderElector

from .conftest import eventually


def elector(kube: KubeClient, namespace: str, identity: str) -> LeaderElector:
    return LeaderElector(
        kube,
        name="test-leader-election",
        namespace=namespace,
        identity=identity,
        lease_duration=2.0,
        renew_deadline=1.5,
        retry_period=0.2,
    )


async def test_one_leader_at_a_time_and_release_hands_over(
    kube: KubeClient, namespace: str
) -> None:
    first, second = elector(kube, namespace, "first"), elector(kube, namespace, "second")
    await asyncio.wait_for(first.acquire(), 5)
    first.keep(lambda: None)
    waiting = asyncio.create_task(second.acquire())
    # Well past the lease duration: the holder keeps renewing, so no takeover.
    await asyncio.sleep(3.0)
    assert not waiting.done(), "a second leader while the first renews"

    await first.release()
    await asyncio.wait_for(waiting, 5)
    lease = await kube.get(LEASE, "test-leader-election", namespace)
    assert lease["spec"]["holderIdentity"] == "second"
    assert lease["spec"]["leaseTransitions"] >= 1
    await second.release()


async def test_a_leader_that_cannot_renew_steps_down(kube: KubeClient, namespace: str) -> None:
    leader = elector(kube, namespace, "leader")
    await asyncio.wait_for(leader.acquire(), 5)
    lost = asyncio.Event()
    leader.keep(lost.set)

    async def intrude() -> None:
        # Someone else keeps taking the lease (as after a network partition).
        while not lost.is_set():
            lease = await kube.get(LEASE, "test-leader-election", namespace)
            lease["spec"]["holderIdentity"] = "intruder"
            lease["spec"]["renewTime"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            # Races with the leader's renewal are expected.
            with contextlib.suppress(KubeError):
                await kube.replace(LEASE, lease)
            await asyncio.sleep(0.1)

    intruder = asyncio.create_task(intrude())
    await eventually(lost.is_set, timeout=10, message="leadership lost")
    intruder.cancel()
    assert not leader.is_leader


class CancelledAsItRenews(LeaderElector):
    """`release()` cancels the renewer in the very loop turn a renewal's answer arrives:
    the race behind a release that hung (and a leader-election stop() that timed out)
    under load, where on Python 3.11 `asyncio.wait_for` swallowed the cancellation."""

    renewals = 0

    async def _try_acquire_or_renew(self) -> bool:
        renewed = await super()._try_acquire_or_renew()
        if self.is_leader:
            self.renewals += 1
            if self.renewals == 1 and self._renewer is not None:
                self._renewer.cancel()
        return renewed


async def test_a_release_landing_as_a_renewal_answers_stops_the_renewing(
    kube: KubeClient, namespace: str
) -> None:
    leader = CancelledAsItRenews(
        kube,
        name="test-leader-election",
        namespace=namespace,
        identity="leader",
        lease_duration=2.0,
        renew_deadline=1.5,
        retry_period=0.05,
    )
    await asyncio.wait_for(leader.acquire(), 5)
    leader.keep(lambda: None)
    renewer = leader._renewer
    assert renewer is not None
    await eventually(
        lambda: renewer.done() or leader.renewals > 1, message="cancelled or renewed again"
    )
    assert renewer.cancelled(), f"still renewing after its cancellation: {leader.renewals}"
    await asyncio.wait_for(leader.release(), 5)
