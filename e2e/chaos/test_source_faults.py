"""Source servers that fail: 500s, resets, truncated bodies and hangs, behind a proxy.

Every source of the fleet reaches its server (the git http-backend, the
docker registry, the chart repository) through a `FaultyProxy`, each source
under a URL prefix of its own so the proxy counts its requests. Per phase a
new revision is published (a commit, an OCI tag, a chart version), the
fault is switched on and the sources are asked to fetch; for the fault
window the test checks, every half second, that:

- every source keeps its last good artifact: the same revision, the file
  hashing to its recorded digest, and the artifact server serving it;
- no Kustomization applies anything of the new revision (no object carries
  its annotation), so nothing is applied from a partial download;
- at the end of the window every source that the fault hits is Ready=False
  with a message naming the failed fetch;
- the requests each source made stay within what the retry backoff allows.

Then the fault is switched off and, without any further poke (only the
backoff's retries), everything must converge to the new revision. The
phases: 500 on everything; connection resets; truncated payloads only (git
packs, OCI blobs, chart tarballs: refs, manifests and index.yaml pass);
truncated everything; hangs longer than the sources' timeout.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest_asyncio

from e2e.chaos.fleet_checks import (
    PHASE,
    app_objects,
    applied,
    apps,
    manifests,
    report,
    revision_of,
    summary,
)
from e2e.chaos.source_faults import (
    FLAGS,
    PAYLOADS,
    attempts_bound,
    convergence_bound,
    cpu_seconds,
    download,
    fault_window,
    queue_figures,
    selected_phases,
    source_timeout,
    traffic_since,
)
from e2e.fleet import (
    KUSTOMIZATION,
    Controller,
    create_apps,
    git_origin,
    kustomize_controller,
    oci_origin,
    prepare_namespace,
    source_controller,
)
from sluice_envtest.chartrepo import ChartRepository
from sluice_envtest.faulty_proxy import Fault, FaultyProxy, oci_route, prefix_route
from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.harness import condition, is_ready
from sluice_envtest.pytest_plugin import Cluster
from sluice_envtest.registry import OciRegistry
from sluice_envtest.workloads import simulated_rollouts
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import ResourceType

HELMREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "helmrepositories", "HelmRepository")
HELMCHART = ResourceType("source.toolkit.fluxcd.io", "v1", "helmcharts", "HelmChart")
GITREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")
OCIREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "ocirepositories", "OCIRepository")


@dataclass
class Sources:
    """The fleet's sources, by kind, and the name of each one's proxy prefix."""

    git: list[str]
    oci: list[str]
    helmrepos: list[str]
    helmcharts: list[str]

    def all(self) -> Iterator[tuple[ResourceType, str]]:
        yield from ((GITREPO, n) for n in self.git)
        yield from ((OCIREPO, n) for n in self.oci)
        yield from ((HELMREPO, n) for n in self.helmrepos)
        yield from ((HELMCHART, n) for n in self.helmcharts)


@pytest_asyncio.fixture(loop_scope="session")
async def charts(tmp_path: Path) -> AsyncIterator[ChartRepository]:
    # Relative chart URLs: HelmCharts resolve them against their proxy prefix.
    repo = ChartRepository(tmp_path / "charts", chart_urls="charts")
    await repo.start()
    try:
        yield repo
    finally:
        await repo.stop()


async def artifact_problems(
    client: KubeClient, ns: str, sources: Sources, storage: Path, expect: dict[str, str]
) -> list[str]:
    """Each source's artifact: revision still `expect[name]`, file and server match its digest."""
    problems = []
    for rt, name in sources.all():
        obj = await client.get(rt, name, ns)
        artifact = (obj.get("status") or {}).get("artifact") or {}
        revision = str(artifact.get("revision", ""))
        if not revision.endswith(expect[f"{rt.kind}/{name}"]):
            problems.append(f"{rt.kind}/{name} serves {revision}, not the last good revision")
            continue
        path = storage / artifact.get("path", "missing")
        if not path.is_file():
            problems.append(f"{rt.kind}/{name}: {path} missing")
            continue
        if "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest() != artifact["digest"]:
            problems.append(f"{rt.kind}/{name}: {path.name} does not match its digest")
        served = await asyncio.to_thread(download, artifact["url"])
        if "sha256:" + hashlib.sha256(served).hexdigest() != artifact["digest"]:
            problems.append(f"{rt.kind}/{name}: the served artifact does not match its digest")
    return problems


def describe(obj: JSON) -> str:
    """Kind/name, revision and Ready condition: what a convergence failure must show."""
    status = obj.get("status") or {}
    ready = condition(obj, "Ready") or {}
    revision = status.get("lastAppliedRevision") or (status.get("artifact") or {}).get("revision")
    return (
        f"{obj.get('kind', '')}/{obj['metadata']['name']} at {revision}: Ready={ready.get('status')} "
        f"{ready.get('reason')} {str(ready.get('message'))[:200]}"
    )


async def wait_for(
    what: str,
    check: Any,
    limit: float,
    lagging: list[str] | None = None,
    explain: Callable[[], str] | None = None,
) -> float:
    start = time.monotonic()
    while not await check():
        if time.monotonic() - start > limit:
            behind = lagging or []
            raise AssertionError(
                f"{what} not reached in {limit}s; {len(behind)} behind: "
                + "; ".join(behind[:15])
                + (f"; {await asyncio.to_thread(explain)}" if explain is not None else "")
            )
        await asyncio.sleep(0.5)
    return time.monotonic() - start


async def test_source_servers_that_fail_keep_the_last_artifact_and_recover(
    cluster: Cluster,
    kube: KubeClient,
    namespace: str,
    oci_registry: OciRegistry,
    git_http: GitHttpServer,
    charts: ChartRepository,
    tmp_path: Path,
) -> None:
    count = min(apps(2), 50)
    ns = namespace
    git = git_origin(git_http, ns)
    oci = oci_origin(oci_registry, f"chaos-src/{ns}")
    proxies = {
        "git": FaultyProxy(git_http.base_url, route=prefix_route),
        "oci": FaultyProxy(oci_registry.url, route=oci_route),
        "helm": FaultyProxy(charts.url, route=prefix_route),
    }
    for proxy in proxies.values():
        proxy.start()
    await prepare_namespace(kube, ns, create=False)
    # SLUICE_CHAOS_LOG_LEVEL=info keeps every failed fetch in the controllers' logs.
    level = os.environ.get("SLUICE_CHAOS_LOG_LEVEL", "warning")
    watch = ["--watch-namespace", ns, *FLAGS, "--log-level", level]
    controllers: list[Controller] = [
        source_controller(str(cluster.kubeconfig), tmp_path, extra=watch),
        kustomize_controller(str(cluster.kubeconfig), tmp_path, extra=watch),
    ]
    timeout = f"{source_timeout(count):g}s"
    sources = Sources(
        git=[f"podinfo-{i}" for i in range(count)],
        oci=[f"podinfo-{i}" for i in range(count, 2 * count)],
        helmrepos=[f"charts-{i}" for i in range(count)],
        helmcharts=[f"chart-{i}" for i in range(count)],
    )
    storage = tmp_path / "storage"
    names = {"git": sources.git, "oci": sources.oci, "helm": sources.helmrepos}
    published: dict[str, dict[str, str]] = {}
    figures: dict[str, Any] = {}
    converge_times: list[float] = []

    def publish(phase: str) -> dict[str, str]:
        """The new revision of every source, keyed `Kind/name` (tails of status revisions)."""
        rev_git = revision_of(git, git.publish(manifests(phase)))
        rev_oci = revision_of(oci, oci.publish(manifests(phase)))
        version = f"0.{len(published) + 1}.0"
        charts.add("podinfo", version, values={"greeting": phase})
        revisions = {f"GitRepository/{n}": rev_git for n in sources.git}
        revisions |= {f"OCIRepository/{n}": rev_oci for n in sources.oci}
        revisions |= {f"HelmChart/{n}": version for n in sources.helmcharts}
        # An index's revision is its own digest, known once it is stored.
        revisions |= {f"HelmRepository/{n}": "" for n in sources.helmrepos}
        revisions |= {f"Kustomization/{n}": rev_git for n in sources.git}
        revisions |= {f"Kustomization/{n}": rev_oci for n in sources.oci}
        published[phase] = revisions
        return revisions

    lagging: list[str] = []  # what the last `delivered` found behind, for a failure's message

    async def delivered(revisions: dict[str, str]) -> bool:
        behind: list[str] = []
        for ks in (await kube.list(KUSTOMIZATION, namespace=ns)).items:
            if not applied(ks, revisions[f"Kustomization/{ks['metadata']['name']}"]):
                behind.append(describe(ks))
        for chart in (await kube.list(HELMCHART, namespace=ns)).items:
            revision = ((chart.get("status") or {}).get("artifact") or {}).get("revision")
            if (
                not is_ready(chart)
                or revision != revisions[f"HelmChart/{chart['metadata']['name']}"]
            ):
                behind.append(describe(chart))
        behind += [describe(r) for r in (await kube.list(HELMREPO, namespace=ns)).items
                   if not is_ready(r)]  # fmt: skip
        if behind:  # sources too: a Kustomization waits on its source
            # One list per kind, not a GET per source: this runs every half second
            # on the API server the controllers need (200 GETs a turn at size).
            for rt in (GITREPO, OCIREPO):
                behind += [describe(s) for s in (await kube.list(rt, namespace=ns)).items
                           if not is_ready(s)]  # fmt: skip
        lagging[:] = behind
        return not behind

    async def stored_revisions() -> dict[str, str]:
        """What every source and Kustomization holds now: the last good revisions."""
        now: dict[str, str] = {}
        for rt, name in sources.all():
            obj = await kube.get(rt, name, ns)
            now[f"{rt.kind}/{name}"] = str(obj["status"]["artifact"]["revision"])
        for ks in (await kube.list(KUSTOMIZATION, namespace=ns)).items:
            now[f"Kustomization/{ks['metadata']['name']}"] = ks["status"]["lastAppliedRevision"]
        return now

    async def poke(token: str) -> None:
        patch = {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}}
        for rt, name in sources.all():
            await kube.merge_patch(rt, name, patch, namespace=ns)

    try:
        for controller in controllers:
            await asyncio.to_thread(controller.wait_ready)
        async with simulated_rollouts(kube, namespace=ns, interval=0.5):
            first = publish("r0")
            src = {"timeout": timeout}
            await create_apps(
                kube, git, ns, count, retry_interval="2s",
                source_spec=lambda i: {**git.spec, **src,
                                       "url": f"{proxies['git'].url}/podinfo-{i}/{ns}.git"},
            )  # fmt: skip
            await create_apps(
                kube, oci, ns, count, retry_interval="2s", first=count,
                source_spec=lambda i: {**oci.spec, **src, "url":
                                       f"oci://{proxies['oci'].host}/podinfo-{i}/chaos-src/{ns}"},
            )  # fmt: skip
            for i in range(count):
                await kube.create(
                    HELMREPO,
                    {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "HelmRepository",
                     "metadata": {"name": f"charts-{i}", "namespace": ns},
                     "spec": {"url": f"{proxies['helm'].url}/charts-{i}/", "interval": "1h",
                              "timeout": timeout}},
                )  # fmt: skip
                await kube.create(
                    HELMCHART,
                    {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "HelmChart",
                     "metadata": {"name": f"chart-{i}", "namespace": ns},
                     "spec": {"chart": "podinfo", "version": "*", "interval": "1h",
                              "sourceRef": {"kind": "HelmRepository", "name": f"charts-{i}"}}},
                )  # fmt: skip
            first_delivery = await wait_for(
                "the first revision", lambda: delivered(first), 240 + 3 * count, lagging
            )
            figures["first revision"] = {"delivered": round(first_delivery, 1)}

            for index, (phase, fault, only) in enumerate(selected_phases(), start=1):
                good = await stored_revisions()
                for proxy in proxies.values():
                    proxy.set(fault, only=only)
                revision = f"r{index}"
                revisions = publish(revision)
                started = time.monotonic()
                window = fault_window(count, hang=fault is Fault.HANG)
                await poke(revision)
                seen_problems: list[str] = []
                while time.monotonic() - started < window:
                    objects = await app_objects(kube, ns)
                    seen_problems += [
                        f"{kind}/{name} carries {revision} during the fault"
                        for (kind, name), obj in objects.items()
                        if (obj["metadata"].get("annotations") or {}).get(PHASE) == revision
                    ]
                    for ks in (await kube.list(KUSTOMIZATION, namespace=ns)).items:
                        key = f"Kustomization/{ks['metadata']['name']}"
                        if ks["status"].get("lastAppliedRevision") != good[key]:
                            seen_problems.append(f"{key} moved during the fault")
                    await asyncio.sleep(0.5)
                ended = time.monotonic()
                # A HelmChart reads its repository's stored index, so it fetches
                # (and fails) only once a new index is through: with payload-only
                # faults. Then the HelmRepository itself is fine and moves on.
                hit = [
                    (rt, n) for rt, n in sources.all()
                    if (rt is HELMREPO) == (only != PAYLOADS) or rt in (GITREPO, OCIREPO)
                ]  # fmt: skip
                expect = {k: v for k, v in good.items()}
                if only == PAYLOADS:
                    for name in sources.helmrepos:
                        obj = await kube.get(HELMREPO, name, ns)
                        expect[f"HelmRepository/{name}"] = obj["status"]["artifact"]["revision"]
                seen_problems += await artifact_problems(kube, ns, sources, storage, expect)
                messages: dict[str, str] = {}
                for rt, name in hit:
                    obj = await kube.get(rt, name, ns)
                    ready = condition(obj, "Ready") or {}
                    if ready.get("status") != "False":
                        seen_problems.append(f"{rt.kind}/{name} not Ready=False: {ready}")
                    messages.setdefault(rt.kind, str(ready.get("message", "")))
                bound = attempts_bound(ended - started)
                per_source = {
                    kind: max(proxy.attempts(since=started, until=ended).values(), default=0)
                    for kind, proxy in proxies.items()
                }
                requests = {
                    kind: max(proxy.counts(since=started, until=ended).values(), default=0)
                    for kind, proxy in proxies.items()
                }
                figures[phase] = {
                    "window": window, "messages": messages, "max_attempts": per_source,
                    "max_requests": requests, "bound": bound,
                }  # fmt: skip
                assert seen_problems == [], (phase, seen_problems[:10])
                for kind, most in per_source.items():
                    assert most <= bound, f"{phase}: {kind} made {most} fetch attempts > {bound}"
                # The message names the server that failed (a user must know where to look).
                ports = {
                    "GitRepository": "git", "OCIRepository": "oci", "HelmRepository": "helm",
                    "HelmChart": "helm",
                }  # fmt: skip
                for kind, message in messages.items():
                    assert str(proxies[ports[kind]].port) in message, (phase, kind, message)
                    assert "internal error" not in message, (phase, kind, message)
                for proxy in proxies.values():
                    proxy.set(Fault.NONE)
                cleared = time.monotonic()
                cpu_before = {c.name: cpu_seconds(c) for c in controllers}
                load_before = os.getloadavg()[0]
                # No poke: the backoff's retries alone must bring the new revision.
                converge_times.append(
                    await wait_for(
                        f"{phase}: convergence",
                        lambda r=revisions: delivered(r),
                        convergence_bound(count, first_delivery),
                        lagging,
                        explain=lambda c=cleared: "; ".join(
                            [traffic_since(proxies, names, c)]
                            + [queue_figures(controller) for controller in controllers]
                        ),
                    )
                )
                figures[phase]["converged"] = round(converge_times[-1], 1)
                # CPU spent converging: the figure load does not change, unlike the time.
                figures[phase]["convergence_cpu_s"] = {
                    c.name: round(cpu_seconds(c) - cpu_before[c.name], 1) for c in controllers
                }
                figures[phase]["load_avg"] = (round(load_before, 1), round(os.getloadavg()[0], 1))
    finally:
        for controller in controllers:
            controller.stop()
        for proxy in proxies.values():
            proxy.stop()
    median, longest = summary(converge_times)
    for phase, found in figures.items():
        report(f"CHAOS source-fault {phase}: {found}")
    report(
        f"CHAOS source-faults: apps={count}x3 phases={len(converge_times)} "
        f"windows={fault_window(count, hang=False):g}s (hang {fault_window(count, hang=True):g}s) "
        f"timeout={source_timeout(count):g}s "
        f"convergence median={median:.1f}s max={longest:.1f}s"
    )
    for controller in controllers:
        assert controller.tracebacks() == [], (controller.name, controller.log.read_text()[-3000:])
