"""Two replicas of the kustomize-controller with leader election; the leader is SIGKILLed.

The standby must take the Lease within the lease duration plus a retry
period, finish the delivery the dead leader was in the middle of, and never
reconcile while it is not the leader (no double apply): its reconcile count
stays zero until it holds the Lease, and so does the restarted replica's.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import time
import urllib.request
from pathlib import Path

from e2e.chaos.fleet_checks import (
    Violations,
    applied,
    apps,
    check_artifacts,
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
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import ResourceType

LEASE = ResourceType("coordination.k8s.io", "v1", "leases", "Lease")
# 4 s at the CI size. At the chaos size (200 apps) the host's two cores run at a load of
# 20-40, the API server and etcd included: a renewal (a GET and a PUT of the Lease) missed a
# 3 s deadline there, the leader stepped down mid-delivery as it must, and the test then took
# the dead replica for the standby. Flux's defaults are 35 s / 30 s / 5 s; the promise checked
# (failover within the lease plus a retry period) is the same at either size.
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = (
    (4.0, 3.0, 0.5) if apps(8) <= 8 else (15.0, 10.0, 1.0)
)


async def holder(client: KubeClient, ns: str, service: str = "kustomize-controller") -> str:
    lease = await client.get(LEASE, f"{service}-leader-election", ns)
    return str(lease.get("spec", {}).get("holderIdentity") or "")


def download(url: str) -> bytes:
    assert url.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - checked above
        return bytes(answer.read())


def on_port(source: JSON, port: int) -> bool:
    """The source's artifact is stored and served by the replica on `port`."""
    url = str(((source.get("status") or {}).get("artifact") or {}).get("url", ""))
    return url.startswith(f"http://127.0.0.1:{port}/")


def serves(port: int) -> bool:
    """Whether anything listens on the artifact server's port."""
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


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
            assert standby.proc.poll() is None, (
                f"{standby.name} exited (lost the Lease?): {standby.log.read_text()[-3000:]}"
            )
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


async def test_the_source_controller_standby_takes_over_and_serves_artifacts(
    cluster: Cluster, kube: KubeClient, namespace: str, oci_registry: OciRegistry, tmp_path: Path
) -> None:
    """Two source-controller replicas, each with its own storage (an emptyDir per pod).

    The standby neither serves artifacts nor is Ready (so a Service would not
    send downloads to its empty storage) and never reconciles; when the leader
    is SIGKILLed mid-delivery, it takes the Lease, fetches every source into
    its own storage and serves every artifact under its own address.
    """
    count = apps(8)
    kubeconfig = str(cluster.kubeconfig)
    origin = oci_origin(oci_registry, f"chaos-source-leader/{namespace}")
    await prepare_namespace(kube, namespace, create=False)
    watch = ["--watch-namespace", namespace, "--min-retry-delay", "200ms",
             "--max-retry-delay", "5s"]  # fmt: skip
    election = [
        "--enable-leader-election",
        "--leader-election-lease-duration", f"{LEASE_DURATION}s",
        "--leader-election-renew-deadline", f"{RENEW_DEADLINE}s",
        "--leader-election-retry-period", f"{RETRY_PERIOD}s",
    ]  # fmt: skip
    env = {"RUNTIME_NAMESPACE": namespace}
    replicas = [
        source_controller(kubeconfig, tmp_path, extra=[*watch, *election], replica=f"-{i}", env=env)
        for i in (0, 1)
    ]
    ks = kustomize_controller(kubeconfig, tmp_path, extra=watch)
    phases: dict[str, str] = {}
    violations = Violations()
    try:
        await asyncio.to_thread(ks.wait_ready)
        for replica in replicas:
            await asyncio.to_thread(replica.wait_ready, probe="healthz")
        async with simulated_rollouts(kube, namespace=namespace, interval=0.5):
            phases["r1"] = revision_of(origin, origin.publish(manifests("r1")))
            await create_apps(kube, origin, namespace, count, retry_interval="5s")
            await all_ready(kube, KUSTOMIZATION, namespace, count, limit=300,
                            check=lambda k: applied(k, phases["r1"]))  # fmt: skip
            by_pid = {r.proc.pid: r for r in replicas}
            identity = await holder(kube, namespace, "source-controller")
            leader = by_pid[int(identity.rsplit("_", 1)[1])]
            standby = next(r for r in replicas if r is not leader)
            assert standby.proc.poll() is None, (
                f"{standby.name} exited (lost the Lease?): {standby.log.read_text()[-3000:]}"
            )
            assert leader.ready() and serves(leader.storage_port)
            assert not standby.ready(), "the standby is Ready: a Service would route to it"
            assert not serves(standby.storage_port), "the standby serves its empty storage"
            assert standby.reconciles() == 0, "the standby reconciled while not the leader"

            phases["r2"] = revision_of(origin, origin.publish(manifests("r2")))
            await poke_all(kube, origin, namespace, count, "r2")
            await asyncio.sleep(0.3)
            leader.kill()
            killed = time.monotonic()
            while not (await holder(kube, namespace, "source-controller")).endswith(
                f"_{standby.proc.pid}"
            ):
                assert time.monotonic() - killed < 60, "no failover within 60s"
                await asyncio.sleep(0.1)
            failover = time.monotonic() - killed
            await asyncio.to_thread(standby.wait_ready)
            serving_after = time.monotonic() - killed
            leader.restart()
            await asyncio.to_thread(leader.wait_ready, probe="healthz")
            await all_ready(kube, KUSTOMIZATION, namespace, count, limit=300,
                            check=lambda k: applied(k, phases["r2"]))  # fmt: skip
            converged = time.monotonic() - killed
            # Kustomizations that got r2 from the dead leader before the kill converge at
            # once; their sources move to the new leader's storage only as its workers
            # reach them (at 200 apps, after the sweep below had begun: 108 "missing").
            await all_ready(kube, origin.rt, namespace, count, limit=300,
                            check=lambda s: on_port(s, standby.storage_port))  # fmt: skip
            restarted_reconciles = leader.reconciles()
            restarted_ready = leader.ready()
        await check_fleet(kube, namespace, phases=phases, order=["r1", "r2"],
                          refused_phases=set(), violations=violations)  # fmt: skip
        await check_artifacts(kube, origin, namespace, count, tmp_path / f"storage{standby.name.removeprefix('source-controller')}",
                              violations)  # fmt: skip
        served = 0
        for i in range(count):
            source = await kube.get(origin.rt, f"podinfo-{i}", namespace)
            artifact = source["status"]["artifact"]
            assert artifact["url"].startswith(f"http://127.0.0.1:{standby.storage_port}/")
            body = await asyncio.to_thread(download, artifact["url"])
            assert "sha256:" + hashlib.sha256(body).hexdigest() == artifact["digest"]
            served += 1
    finally:
        ks.stop()
        for replica in replicas:
            replica.stop()
    report(
        f"CHAOS source-leader-failover: apps={count} failover={failover:.1f}s "
        f"(bound {LEASE_DURATION + RETRY_PERIOD:.1f}s) serving={serving_after:.1f}s "
        f"converged={converged:.1f}s artifacts_served_by_new_leader={served}/{count} "
        f"restarted_replica_reconciles={restarted_reconciles:.0f} violations={violations.total()}"
    )
    assert failover <= LEASE_DURATION + 2 * RETRY_PERIOD + 1.0
    assert restarted_reconciles == 0 and not restarted_ready, (
        "the restarted replica is not standing by"
    )
    assert violations.total() == 0, violations
    for replica in replicas:
        assert replica.tracebacks() == [], (replica.name, replica.log.read_text()[-3000:])
