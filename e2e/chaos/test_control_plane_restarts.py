"""The API server and etcd restart while a fleet is being delivered.

The controllers keep running; their watches break (the API server goes away,
or etcd does and the API server's watch cache with it) and must resume,
relisting on 410 Gone, so that a change made after the restart is still
delivered. The reconciles run meanwhile are counted against the apps: a
restart may cost each app a retry or two within the backoff, not a storm.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

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
from sluice_cli.crds_command import all_crds
from sluice_envtest.controlplane import ControlPlane
from sluice_envtest.registry import OciRegistry
from sluice_envtest.workloads import simulated_rollouts
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.installing import install_crds

FLAGS = ["--min-retry-delay", "200ms", "--max-retry-delay", "5s"]
# Each app may retry while the part is down; more than this per app is a storm.
MAX_RECONCILES_PER_APP = 12


@pytest.mark.parametrize("part", ["kube-apiserver", "etcd"])
async def test_a_fleet_converges_across_a_control_plane_restart(
    part: str, oci_registry: OciRegistry, tmp_path: Path
) -> None:
    count = apps(8)
    ns = "chaos"
    plane = ControlPlane(workdir=tmp_path / "cp")
    await asyncio.to_thread(plane.start)
    client = await KubeClient.connect(kubeconfig=str(plane.kubeconfig), qps=0)
    kubeconfig = str(plane.kubeconfig)
    watch = ["--watch-namespace", ns, *FLAGS]
    # The controllers refuse to start until every CRD they serve is installed.
    await install_crds(client, all_crds())
    source = source_controller(kubeconfig, tmp_path, extra=watch)
    kustomize = kustomize_controller(kubeconfig, tmp_path, extra=watch)
    origin = oci_origin(oci_registry, f"chaos-{part}/{tmp_path.name}")
    phases: dict[str, str] = {}
    violations = Violations()
    try:
        await prepare_namespace(client, ns)
        for controller in (source, kustomize):
            await asyncio.to_thread(controller.wait_ready)
        async with simulated_rollouts(client, namespace=ns, interval=0.5):
            phases["r1"] = revision_of(origin, origin.publish(manifests("r1")))
            await create_apps(client, origin, ns, count, retry_interval="5s")
            await all_ready(client, KUSTOMIZATION, ns, count, limit=300,
                            check=lambda ks: applied(ks, phases["r1"]))  # fmt: skip

            # r2 goes out, and the part restarts while it is being delivered.
            reconciles_before = kustomize.reconciles() + source.reconciles()
            phases["r2"] = revision_of(origin, origin.publish(manifests("r2")))
            await poke_all(client, origin, ns, count, "r2")
            await asyncio.sleep(0.5)
            down = time.monotonic()
            await asyncio.to_thread(plane.restart_part, part, kill=True, down=2.0)
            restarted = time.monotonic()
            await all_ready(client, KUSTOMIZATION, ns, count, limit=300,
                            check=lambda ks: applied(ks, phases["r2"]))  # fmt: skip
            converged_r2 = time.monotonic() - restarted

            # r3 is published and requested only after the restart: only
            # informers that resumed watching can see it.
            phases["r3"] = revision_of(origin, origin.publish(manifests("r3", ingress=False)))
            poked = time.monotonic()
            await poke_all(client, origin, ns, count, "r3")
            await all_ready(client, KUSTOMIZATION, ns, count, limit=300,
                            check=lambda ks: applied(ks, phases["r3"]))  # fmt: skip
            converged_r3 = time.monotonic() - poked
            reconciles = kustomize.reconciles() + source.reconciles() - reconciles_before
        await check_fleet(client, ns, phases=phases, order=["r1", "r2", "r3"],
                          refused_phases=set(), violations=violations)  # fmt: skip
        await check_inventories(
            client, ns, count, expect={"Deployment", "ServiceAccount", "Service"},
            violations=violations,
        )  # fmt: skip
        await check_artifacts(client, origin, ns, count, tmp_path / "storage", violations)
    finally:
        source.stop()
        kustomize.stop()
        await client.close()
        plane.stop()
    report(
        f"CHAOS restart {part}: apps={count} down={restarted - down:.1f}s "
        f"converged_after_restart={converged_r2:.1f}s next_change={converged_r3:.1f}s "
        f"reconciles_per_app={reconciles / count:.1f} violations={violations.total()}"
    )
    assert violations.total() == 0, violations
    assert reconciles / count <= MAX_RECONCILES_PER_APP
    assert source.tracebacks() == [] and kustomize.tracebacks() == []
