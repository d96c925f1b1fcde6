"""kill -9 at a named point of a reconcile, one case per point (`sluice_runtime.failpoints`).

`test_kills` kills at random moments, so the narrow windows of a reconcile
are hit only by chance. Here each case makes a controller die exactly at
one: a fleet of MTTP-shaped apps (half OCIRepository, half GitRepository;
prune, wait, a tenant) gets r1 out; the controller is stopped and started
again with `SLUICE_FAILPOINTS=<point>=kill`; r2 (which drops the Ingress,
and for the prune case the Service too) is published and every source
poked. The controller must die by SIGKILL with the failpoint's line in its
output (the point was reached), then be started again unarmed on the same
ports and storage, and the fleet must converge to r2 with every invariant
of `fleet_checks` holding throughout and at the end: nothing half-applied
shown as applied, every inventory exactly r2's objects and the dropped ones
pruned, every artifact matching its digest. `SLUICE_CHAOS_APPS` sets the
fleet (6 by default).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from e2e.chaos.fleet_checks import (
    PHASE,
    Violations,
    app_objects,
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
from sluice_runtime import failpoints
from sluice_runtime.kube.client import JSON, KubeClient

FLAGS = ["--min-retry-delay", "200ms", "--max-retry-delay", "5s"]
KINDS = {"Deployment", "ServiceAccount", "Service", "Ingress"}


@pytest.mark.parametrize(
    ("point", "victim", "dropped"),
    [
        pytest.param("ssa.apply.after-dry-run", "kustomize", {"Ingress"}, id="after-dry-run"),
        pytest.param("ssa.apply.mid-apply", "kustomize", {"Ingress"}, id="mid-apply"),
        pytest.param("ssa.prune.mid-prune", "kustomize", {"Ingress", "Service"}, id="mid-prune"),
        pytest.param(
            "kustomize.status.before-patch", "kustomize", {"Ingress"}, id="kustomization-status"
        ),
        pytest.param("storage.artifact.mid-write", "source", {"Ingress"}, id="artifact-write"),
        pytest.param("source.status.before-patch", "source", {"Ingress"}, id="source-status"),
    ],
)
async def test_a_kill_at_a_named_point_converges(
    point: str,
    victim: str,
    dropped: set[str],
    cluster: Cluster,
    kube: KubeClient,
    namespace: str,
    oci_registry: OciRegistry,
    git_http: GitHttpServer,
    tmp_path: Path,
) -> None:
    half = max(apps(6) // 2, 1)
    ns = namespace
    fleet: list[tuple[Origin, int]] = [
        (oci_origin(oci_registry, f"points/{ns}"), 0),
        (git_origin(git_http, ns), half),
    ]
    await prepare_namespace(kube, ns, create=False)
    watch = ["--watch-namespace", ns, *FLAGS]
    controllers = {
        "source": source_controller(str(cluster.kubeconfig), tmp_path, extra=watch),
        "kustomize": kustomize_controller(str(cluster.kubeconfig), tmp_path, extra=watch),
    }
    target = controllers[victim]
    storage = tmp_path / "storage"
    phases: dict[str, dict[str, str]] = {origin.kind: {} for origin, _ in fleet}
    violations = Violations()
    limit = 240 + 6 * half

    async def sweep() -> None:
        # One pass per origin: a Kustomization whose revision names no phase of
        # this origin's is the other origin's, and is skipped by check_fleet.
        for origin, _ in fleet:
            await check_fleet(
                kube, ns, phases=phases[origin.kind], order=["r1", "r2"], refused_phases=set(),
                violations=violations, removed={"r2": dropped},
            )  # fmt: skip

    def done(phase: str) -> Callable[[JSON], bool]:
        return lambda ks: applied(ks, phases[ks["spec"]["sourceRef"]["kind"]][phase])

    async def until(what: str, reached: Callable[[], object]) -> float:
        """Seconds until `reached()` (awaited when it is a coroutine), sweeping meanwhile."""
        start = time.monotonic()
        while True:
            await sweep()
            outcome = reached()
            if asyncio.iscoroutine(outcome):
                outcome = await outcome
            if outcome:
                return time.monotonic() - start
            if time.monotonic() - start > limit:
                raise AssertionError(f"{what} not reached in {limit}s")
            await asyncio.sleep(0.5)

    async def delivered(phase: str) -> bool:
        listed = (await kube.list(KUSTOMIZATION, namespace=ns)).items
        return len(listed) == 2 * half and all(map(done(phase), listed))

    async def publish(phase: str, without: set[str] | None = None) -> None:
        for origin, first in fleet:
            published = origin.publish(manifests(phase, without=without or set()))
            phases[origin.kind][phase] = revision_of(origin, published)
            if phase != "r1":
                await poke_all(kube, origin, ns, half, phase, first=first)

    try:
        for controller in controllers.values():
            await asyncio.to_thread(controller.wait_ready)
        async with simulated_rollouts(kube, namespace=ns, interval=0.5):
            await publish("r1")
            for origin, first in fleet:
                await create_apps(kube, origin, ns, half, first=first, retry_interval="5s")
            first_delivery = await until("r1 delivered", lambda: delivered("r1"))

            # Armed only from the next start: stopped gracefully, so that the one
            # SIGKILL of this test is the failpoint's.
            await asyncio.to_thread(_stop_for_restart, target)
            mark = target.log.stat().st_size
            target.env[failpoints.ENV] = f"{point}=kill"
            target.restart()
            await asyncio.to_thread(target.wait_ready)
            await publish("r2", without=dropped)
            to_death = await until("the failpoint's kill", lambda: target.proc.poll() is not None)
            assert target.proc.returncode == -signal.SIGKILL, target.proc.returncode
            said = target.log.read_bytes()[mark:].decode(errors="replace")
            assert f"sluice failpoint {point}: kill (hit 1)" in said, said[-3000:]
            at_death = await app_objects(kube, ns)
            left = [key for key in at_death if key[0] in dropped]
            written_r2 = sum(1 for obj in at_death.values() if _phase(obj) == "r2")
            if point == "ssa.apply.mid-apply":
                assert written_r2 >= 1, "the kill came after an apply: something carries r2"
            if point == "ssa.prune.mid-prune":
                assert len(left) < len(dropped) * 2 * half, "the kill came after a delete"
            # Every path to a status naming r2 passes the point first (each r2 changes,
            # drops and stores something), so its first hit comes before any such status.
            for origin, _ in fleet:
                r2 = phases[origin.kind]["r2"]
                for ks in (await kube.list(KUSTOMIZATION, namespace=ns)).items:
                    if ks["spec"]["sourceRef"]["kind"] == origin.kind:
                        shown = (ks.get("status") or {}).get("lastAppliedRevision", "")
                        assert not str(shown).endswith(r2), ks["metadata"]["name"]
                sources = (await kube.list(origin.rt, namespace=ns)).items
                for source in sources if victim == "source" else []:
                    shown = ((source.get("status") or {}).get("artifact") or {}).get("revision")
                    assert not str(shown).endswith(r2), source["metadata"]["name"]
            temps = [p for p in storage.rglob("*.tmp") if p.name.startswith(".")]
            # What the statuses name at the death is on disk and whole, whatever the
            # killed write or patch was doing.
            for origin, first in fleet:
                await check_artifacts(kube, origin, ns, half, storage, violations, first=first)

            del target.env[failpoints.ENV]
            target.restart()
            restarted = time.monotonic()
            await asyncio.to_thread(target.wait_ready)
            if point == "storage.artifact.mid-write":
                # Died between the bytes and the rename: the half-written file is
                # there, and the file server never serves it.
                assert temps, "no temporary file left by the killed write"
                for temp in temps:
                    code = _status_of(target, temp.relative_to(storage).as_posix())
                    assert code == 404, (temp, code)
            await until("r2 delivered", lambda: delivered("r2"))
            converged = time.monotonic() - restarted
            reconciles = await asyncio.to_thread(target.reconciles)
        await check_inventories(kube, ns, 2 * half, expect=KINDS - dropped, violations=violations)
        for origin, first in fleet:
            await check_artifacts(kube, origin, ns, half, storage, violations, first=first)
    finally:
        for controller in controllers.values():
            controller.stop()
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    report(
        f"CHAOS kill-point {point}: apps={2 * half} r1={first_delivery:.1f}s "
        f"death={to_death:.1f}s after r2 converged={converged:.1f}s after the restart "
        f"reconciles_after_restart={reconciles:.0f} "
        f"objects_at_r2_at_death={written_r2} "
        f"dropped_left_at_death={len(left)} temp_files={len(temps)} "
        f"lost={len(violations.lost)} half_applied={len(violations.half_applied)} "
        f"artifacts={len(violations.artifacts)} load={load}"
    )
    assert violations.total() == 0, (
        violations.half_applied[:10] + violations.lost[:10] + violations.artifacts[:10]
    )
    for controller in controllers.values():
        assert controller.tracebacks() == [], (controller.name, controller.log.read_text()[-3000:])


def _phase(obj: JSON) -> str:
    return str((obj["metadata"].get("annotations") or {}).get(PHASE, ""))


def _stop_for_restart(controller: Controller) -> None:
    controller.proc.send_signal(signal.SIGTERM)
    controller.proc.wait(timeout=60)


def _status_of(controller: Controller, rel: str) -> int:
    url = f"http://127.0.0.1:{controller.storage_port}/{rel}"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
