"""Two replicas of the kustomize-controller with leader election; the leader is SIGKILLed.

The standby must take the Lease within the lease duration plus a retry
period, finish the delivery the dead leader was in the middle of, and never
reconcile while it is not the leader (no double apply): its reconcile count
stays zero until it holds the Lease, and so does the restarted replica's.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from e2e.chaos.fleet_checks import (
    Violations,
    applied,
    apps,
    check_fleet,
    check_inventories,
    manifests,
    poke_all,
    report,
    revision_of,
)
from e2e.fleet import (
    KUSTOMIZATION,
    all_ready,
    create_apps,
    kustomize_controller,
    oci_origin,
    prepare_namespace,
    source_controller,
)
from sluice_envtest.pytest_plugin import Cluster
from sluice_envtest.registry import OciRegistry
from sluice_envtest.workloads import simulated_rollouts
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import ResourceType

LEASE = ResourceType("coordination.k8s.io", "v1", "leases", "Lease")
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 4.0, 3.0, 0.5


async def holder(client: KubeClient, ns: str) -> str:
    lease = await client.get(LEASE, "kustomize-controller-leader-election", ns)
    return str(lease.get("spec", {}).get("holderIdentity") or "")


async def test_the_standby_takes_over_when_the_leader_is_killed(
    cluster: Cluster, kube: KubeClient, namespace: str, oci_registry: OciRegistry, tmp_path: Path
) -> None:
    count = apps(8)
    kubeconfig = str(cluster.kubeconfig)
    origin = oci_origin(oci_registry, f"chaos-leader/{namespace}")
    await prepare_namespace(kube, namespace, create=False)
    watch = [
        "--watch-namespace",
        namespace,
        "--min-retry-delay",
        "200ms",
        "--max-retry-delay",
        "5s",
    ]
    election = [
        "--enable-leader-election",
        "--leader-election-lease-duration", f"{LEASE_DURATION}s",
        "--leader-election-renew-deadline", f"{RENEW_DEADLINE}s",
        "--leader-election-retry-period", f"{RETRY_PERIOD}s",
    ]  # fmt: skip
    env = {"RUNTIME_NAMESPACE": namespace}
    source = source_controller(kubeconfig, tmp_path, extra=watch)
    replicas = [
        kustomize_controller(
            kubeconfig, tmp_path, extra=[*watch, *election], replica=f"-{i}", env=env
        )
        for i in (0, 1)
    ]
    phases: dict[str, str] = {}
    violations = Violations()
    try:
        await asyncio.to_thread(source.wait_ready)
        for replica in replicas:
            await asyncio.to_thread(replica.wait_ready)
        async with simulated_rollouts(kube, namespace=namespace, interval=0.5):
            phases["r1"] = revision_of(origin, origin.publish(manifests("r1")))
            await create_apps(kube, origin, namespace, count, retry_interval="5s")
            await all_ready(kube, KUSTOMIZATION, namespace, count, limit=300,
                            check=lambda ks: applied(ks, phases["r1"]))  # fmt: skip
            by_pid = {r.proc.pid: r for r in replicas}
            leader = by_pid[int((await holder(kube, namespace)).rsplit("_", 1)[1])]
            standby = next(r for r in replicas if r is not leader)
            assert standby.reconciles() == 0, "the standby reconciled while not the leader"

            phases["r2"] = revision_of(origin, origin.publish(manifests("r2")))
            await poke_all(kube, origin, namespace, count, "r2")
            await asyncio.sleep(0.3)
            leader.kill()
            killed = time.monotonic()
            while not (await holder(kube, namespace)).endswith(f"_{standby.proc.pid}"):
                assert time.monotonic() - killed < 60, "no failover within 60s"
                await asyncio.sleep(0.1)
            failover = time.monotonic() - killed
            leader.restart()
            await asyncio.to_thread(leader.wait_ready)
            await all_ready(kube, KUSTOMIZATION, namespace, count, limit=300,
                            check=lambda ks: applied(ks, phases["r2"]))  # fmt: skip
            converged = time.monotonic() - killed
            restarted_reconciles = leader.reconciles()
        await check_fleet(kube, namespace, phases=phases, order=["r1", "r2"],
                          refused_phases=set(), violations=violations)  # fmt: skip
        await check_inventories(
            kube, namespace, count, expect={"Deployment", "ServiceAccount", "Service", "Ingress"},
            violations=violations,
        )  # fmt: skip
    finally:
        source.stop()
        for replica in replicas:
            replica.stop()
    report(
        f"CHAOS leader-failover: apps={count} failover={failover:.1f}s "
        f"(bound {LEASE_DURATION + RETRY_PERIOD:.1f}s) converged={converged:.1f}s "
        f"restarted_replica_reconciles={restarted_reconciles:.0f} violations={violations.total()}"
    )
    assert failover <= LEASE_DURATION + 2 * RETRY_PERIOD + 1.0
    assert restarted_reconciles == 0, "the restarted replica reconciled as a standby"
    assert violations.total() == 0, violations
