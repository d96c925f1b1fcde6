"""kill -9 of the source- and kustomize-controller while they deliver a fleet.

Three revisions go out to N MTTP-shaped apps (OCI and Git sources, prune,
wait, a tenant): r1; r2, which the API server refuses (one invalid object
among valid ones); r3, which drops the Ingress so prune must find it through
the inventory. While each one is delivered, a random controller is SIGKILLed
at random moments (in the middle of fetches, artifact writes, dry-runs,
applies, prunes and status patches, wherever the moment falls) and started
again on the same ports and storage. Throughout and at the end, the
invariants of `fleet_checks` must hold. `SLUICE_CHAOS_APPS` sets N (small by
default, 200 under `tox -e chaos`); `SLUICE_CHAOS_SEED` replays a run.
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e.chaos.fleet_checks import (
    Killer,
    Violations,
    applied,
    apps,
    check_artifacts,
    check_fleet,
    check_inventories,
    manifests,
    poke_all,
    refused,
    report,
    revision_of,
    summary,
)
from e2e.fleet import (
    KUSTOMIZATION,
    Controller,
    Origin,
    create_apps,
    git_origin,
    kustomize_controller,
    oci_origin,
    prepare_namespace,
    source_controller,
)
from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.pytest_plugin import Cluster
from sluice_envtest.registry import OciRegistry
from sluice_envtest.workloads import simulated_rollouts
from sluice_runtime.kube.client import JSON, KubeClient

KILLS_PER_PHASE = int(os.environ.get("SLUICE_CHAOS_KILLS", "4"))
FLAGS = ["--min-retry-delay", "200ms", "--max-retry-delay", "5s"]


async def converge(
    client: KubeClient,
    ns: str,
    count: int,
    done: Callable[[JSON], bool],
    *,
    killer: Killer,
    kills: int,
    check: Callable[[], Any],
    limit: float,
) -> float:
    """Kill up to `kills` times while waiting for every Kustomization to be `done`.

    Answers the convergence time: from the last restart (or the start, with
    no kill) until all are done. The fleet invariants are checked each sweep.
    """
    start = time.monotonic()
    killer.last_restart = start
    finished = asyncio.Event()

    async def strikes() -> None:
        for _ in range(kills):
            if finished.is_set():
                return
            await killer.strike(asyncio.sleep)

    striking = asyncio.create_task(strikes(), name="chaos-strikes")
    try:
        while True:
            await check()
            listed = (await client.list(KUSTOMIZATION, namespace=ns)).items
            if sum(1 for ks in listed if done(ks)) >= count and striking.done():
                finished.set()
                return time.monotonic() - killer.last_restart
            if time.monotonic() - start > limit:
                stuck = next((ks for ks in listed if not done(ks)), {})
                raise AssertionError(
                    f"not converged in {limit}s: {stuck.get('metadata', {}).get('name')} "
                    f"{stuck.get('status')}"
                )
            await asyncio.sleep(0.5)
    finally:
        finished.set()
        striking.cancel()


@pytest.mark.parametrize("source", ["oci", "git"])
async def test_kill_9_controllers_while_delivering(
    source: str,
    cluster: Cluster,
    kube: KubeClient,
    namespace: str,
    oci_registry: OciRegistry,
    git_http: GitHttpServer,
    tmp_path: Path,
) -> None:
    count = apps(8)
    seed = int(os.environ.get("SLUICE_CHAOS_SEED") or secrets.randbits(32))
    print(f"chaos seed {seed}, {count} apps, {source}")
    origin: Origin = (
        oci_origin(oci_registry, f"chaos/{namespace}")
        if source == "oci"
        else git_origin(git_http, namespace)
    )
    await prepare_namespace(kube, namespace, create=False)
    watch = ["--watch-namespace", namespace, *FLAGS]
    controllers: list[Controller] = [
        source_controller(str(cluster.kubeconfig), tmp_path, extra=watch),
        kustomize_controller(str(cluster.kubeconfig), tmp_path, extra=watch),
    ]
    killer = Killer(controllers, random.Random(seed))
    phases: dict[str, str] = {}
    violations = Violations()
    times: list[float] = []
    limit = 240 + 3 * count

    async def sweep() -> None:
        await check_fleet(
            kube, namespace, phases=phases, order=["r1", "r3"], refused_phases={"r2"},
            violations=violations, removed={"r3": {"Ingress"}},
        )  # fmt: skip

    try:
        for controller in controllers:
            await asyncio.to_thread(controller.wait_ready)
        async with simulated_rollouts(kube, namespace=namespace, interval=0.5):
            phases["r1"] = revision_of(origin, origin.publish(manifests("r1")))
            await create_apps(kube, origin, namespace, count, retry_interval="5s")
            times.append(
                await converge(
                    kube, namespace, count, lambda ks: applied(ks, phases["r1"]),
                    killer=killer, kills=KILLS_PER_PHASE, check=sweep, limit=limit,
                )
            )  # fmt: skip

            phases["r2"] = revision_of(origin, origin.publish(manifests("r2", broken=True)))
            await poke_all(kube, origin, namespace, count, "r2")
            times.append(
                await converge(
                    kube, namespace, count, lambda ks: refused(ks, phases["r2"]),
                    killer=killer, kills=KILLS_PER_PHASE, check=sweep, limit=limit,
                )
            )  # fmt: skip

            phases["r3"] = revision_of(origin, origin.publish(manifests("r3", ingress=False)))
            await poke_all(kube, origin, namespace, count, "r3")
            times.append(
                await converge(
                    kube, namespace, count, lambda ks: applied(ks, phases["r3"]),
                    killer=killer, kills=KILLS_PER_PHASE, check=sweep, limit=limit,
                )
            )  # fmt: skip
        await check_inventories(
            kube, namespace, count, expect={"Deployment", "ServiceAccount", "Service"},
            violations=violations,
        )  # fmt: skip
        await check_artifacts(kube, origin, namespace, count, tmp_path / "storage", violations)
    finally:
        for controller in controllers:
            controller.stop()
    median, longest = summary(times)
    report(
        f"CHAOS kill-9 {source}: apps={count} injections={killer.injections} "
        f"convergence median={median:.1f}s max={longest:.1f}s "
        f"lost={len(violations.lost)} half_applied={len(violations.half_applied)} "
        f"from_refused={len(violations.from_refused)} artifacts={len(violations.artifacts)}"
    )
    assert violations.total() == 0, (
        violations.half_applied[:10]
        + violations.from_refused[:10]
        + (violations.lost[:10] + violations.artifacts[:10])
    )
    for controller in controllers:
        assert controller.tracebacks() == [], (controller.name, controller.log.read_text()[-3000:])
