"""Benchmark 1: Mean Time To Production, Flux's MTTP shape.

N apps are published at once, each as its own source plus a Kustomization
that applies four objects (a Deployment scaled to zero, a ServiceAccount, a
Service, an Ingress), as in fluxcd/flux-benchmark: `wait: true`, `prune:
true`, `timeout: 1m`, `targetNamespace`, post-build substitution, and a
tenant service account with admin rights in the namespace only. Measured: from
creating all 2N objects until every source has an artifact and until every
Kustomization is Ready; each controller's peak memory (VmHWM); apply
throughput, both end to end (objects over the time to all Ready) and while
applying (objects over the span between the kustomize-controller's first and
last apply, from the objects' managedFields); API requests per Kustomization (the kustomize-controller's own
`rest_client_requests_total`).

Everything runs on this machine: etcd, kube-apiserver, the OCI registry (or
Git server), the source-controller and kustomize-controller as separate
processes with Flux's benchmark concurrency (10 and 20), and a stand-in for
the deployment controller that reports Deployments as rolled out (there is
no kubelet or controller-manager here).

With `--sources helm`, Flux's HelmRelease run instead: one HelmRepository (a
loopback chart repository with basic auth) and N HelmReleases of its chart,
each creating its own HelmChart, released by the helm-controller (concurrency
10) with the real helm; measured until every HelmRelease is Ready, and the
helm-controller's peak memory (Flux v2.6: 100 in 27 s, 500 in 2m10s, 1000 in
5m12s, helm-controller 190-350 MiB).

With `--sources resourceset`, the same N apps driven by a ResourceSet, as in
Flux Operator's design note: one OCI repository with a tag
`app-<i>` per app, one ResourceSetInputProvider (OCIArtifactTag) exporting
the N tags with their digests, and one ResourceSet templating an
OCIRepository pinned by digest and the benchmark's Kustomization per input;
measured from creating the provider and the ResourceSet until every
Kustomization is Ready, and the resourceset-controller's peak memory.

Usage: python -m e2e.bench mttp [--apps 100 500] [--sources oci git helm resourceset] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import tempfile
import time
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from e2e.bench import ceilings, helm_ceilings, profiling
from e2e.bench.cluster import create_namespace
from e2e.bench.common import table, write
from e2e.bench.profiling import render
from e2e.fleet import (
    APP,
    APP_KINDS,
    KUSTOMIZATION,
    OCIREPO,
    Controller,
    Origin,
    all_ready,
    create_apps,
    git_origin,
    kustomize_controller,
    oci_origin,
    prepare_namespace,
    source_controller,
)
from sluice_cli.crds_command import all_crds
from sluice_envtest.controlplane import ControlPlane
from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.registry import OciRegistry
from sluice_envtest.workloads import simulated_rollouts
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.installing import install_crds
from sluice_runtime.kube.resources import ResourceType

HELMRELEASE = ResourceType("helm.toolkit.fluxcd.io", "v2", "helmreleases", "HelmRelease")
HELMREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "helmrepositories", "HelmRepository")
FLUX_V2_6_HELM = {100: "27s", 500: "2m10s", 1000: "5m12s"}
"""Flux v2.6 HelmRelease MTTP; its helm-controller peaked at 190-350 MiB."""

FLUX_V2_6 = {  # published figures, 16-core runner, kind with 3 nodes
    100: {"source": "24s", "kustomization": "28s", "source_mem": "38Mi", "ks_mem": "32Mi"},
    500: {"source": "43s", "kustomization": "2m2s", "source_mem": "65Mi", "ks_mem": "122Mi"},
    1000: {"source": "1m25s", "kustomization": "4m16s", "source_mem": "67Mi", "ks_mem": "175Mi"},
}


HELM_CONCURRENCY = 10
"""The helm-controller's workers, as in Flux's benchmark; the helm and SSA ceilings
run at the same concurrency."""


async def run_helm(
    apps: int, workdir: Path, *, concurrency: int = HELM_CONCURRENCY
) -> dict[str, Any]:
    """N HelmReleases of one chart from one HelmRepository, until all are Ready; before
    the controllers start, the helm and SSA ceilings for the same releases
    (`helm_ceilings`)."""
    from sluice_envtest.chartrepo import ChartRepository
    from sluice_envtest.harness import make_secret

    with ControlPlane(workdir=workdir / "cp", audit=True) as plane:
        assert plane.audit_log is not None
        audit = plane.audit_log
        client = await KubeClient.connect(kubeconfig=str(plane.kubeconfig), qps=0)
        await install_crds(client, all_crds())
        ns = "benchmark"
        await create_namespace(client, ns)
        kubeconfig = str(plane.kubeconfig)
        charts = ChartRepository(workdir / "charts", username="bench", password="bench-pw")
        chart = charts.add("podinfo", "6.5.3")
        await charts.start()
        source: Controller | None = None
        helm: Controller | None = None
        try:
            # The ceilings first, on the fresh server, with no controller running.
            helm_start = await helm_ceilings.helm_start_seconds()
            await create_namespace(client, "ceiling-helm")
            since = datetime.now(UTC)
            cpu_before = (helm_ceilings.children_cpu(), helm_ceilings.server_cpu(plane))
            helm_seconds = await helm_ceilings.helm_ceiling(
                kubeconfig, chart, namespace="ceiling-helm", releases=apps,
                concurrency=concurrency, workdir=workdir / "helm-ceiling",
            )  # fmt: skip
            helm_counts = helm_ceilings.read_audit(audit, since=since, until=datetime.now(UTC))
            ceiling_cpu = {
                "helm": helm_ceilings.children_cpu() - cpu_before[0],
                "api_server_and_etcd": helm_ceilings.server_cpu(plane) - cpu_before[1],
            }
            stored = await helm_ceilings.stored_releases(client, "ceiling-helm")
            await create_namespace(client, "ceiling-ssa")
            ssa_seconds = await helm_ceilings.ssa_ceiling(
                client, stored, namespace="ceiling-ssa", concurrency=concurrency
            )
            source = source_controller(kubeconfig, workdir, extra=["--profile-phases"])
            helm = Controller(
                "helm-controller",
                "helm_controller",
                ["--kubeconfig", kubeconfig, "--concurrent", str(concurrency), "--profile-phases"],
                workdir / "helm-controller.log",
            )
            source.wait_ready()
            helm.wait_ready()
            await make_secret(client, ns, "charts", {"username": "bench", "password": "bench-pw"})
            await client.create(
                HELMREPO,
                {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "HelmRepository",
                 "metadata": {"name": "podinfo", "namespace": ns},
                 "spec": {"url": charts.url, "interval": "60m", "secretRef": {"name": "charts"}}},
            )  # fmt: skip
            await all_ready(client, HELMREPO, ns, 1)
            requests_before = {"source": source.api_requests(), "helm": helm.api_requests()}
            sluice_before = helm_ceilings.sluice_cpu(plane, {"source": source, "helm": helm})
            start, since = time.monotonic(), datetime.now(UTC)
            for i in range(apps):
                await client.create(
                    HELMRELEASE,
                    {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                     "metadata": {"name": f"podinfo-{i}", "namespace": ns},
                     "spec": {"interval": "60m", "timeout": helm_ceilings.RELEASE_TIMEOUT,
                              "chart": {"spec": {"chart": "podinfo", "version": "*",
                                                 "sourceRef": {"kind": "HelmRepository", "name": "podinfo"}}},
                              "values": helm_ceilings.release_values(i)}},
                )  # fmt: skip
            created = time.monotonic() - start
            ready = await all_ready(client, HELMRELEASE, ns, apps) + created
            until = datetime.now(UTC)
            sluice_after = helm_ceilings.sluice_cpu(plane, {"source": source, "helm": helm})
            sluice_cpu = {k: sluice_after[k] - sluice_before[k] for k in sluice_after}
            peaks = {"source": source.peak_mib(), "helm": helm.peak_mib()}
            own = {
                "source": source.api_requests() - requests_before["source"],
                "helm": helm.api_requests() - requests_before["helm"],
            }
            counts = helm_ceilings.read_audit(audit, since=since, until=until)
            phases = profiling.profile({"source": source, "helm": helm})
            helm_runs = profiling.scrape(helm)
            runs = {
                labels["command"]: v for labels, v in helm_runs.get("sluice_helm_runs_total", [])
            }
            run_seconds = {
                labels["command"]: v for labels, v in helm_runs.get("sluice_helm_seconds_total", [])
            }
            return {
                "apps": apps,
                "source_kind": "helm",
                "concurrency": concurrency,
                "create_seconds": created,
                "helmreleases_ready_seconds": ready,
                "helm_ceiling_seconds": helm_seconds,
                "ssa_ceiling_seconds": ssa_seconds,
                "ratio_to_helm_ceiling": helm_seconds / ready,
                "ratio_to_ssa_ceiling": ssa_seconds / ready,
                "helm_ceiling_cpu_seconds": ceiling_cpu,
                "sluice_cpu_seconds": sluice_cpu,
                "cpu_ratio_to_helm_ceiling": sum(ceiling_cpu.values()) / sum(sluice_cpu.values()),
                "helm_start_seconds": helm_start,
                "source_controller_peak_mib": peaks["source"],
                "helm_controller_peak_mib": peaks["helm"],
                "api_requests_per_release": counts.total / apps,
                "requests_at_server": counts.as_json(),
                "helm_ceiling_requests_at_server": helm_counts.as_json(),
                "controller_requests": own,
                "helm_runs": runs,
                "helm_run_seconds": run_seconds,
                "profile": phases.as_json(),
                "profile_table": helm_profile_table(
                    phases,
                    apps,
                    counts=counts,
                    runs=runs,
                    run_seconds=run_seconds,
                    helm_start=helm_start,
                ),
                "load_average": os.getloadavg(),
            }
        finally:
            for controller in (source, helm):
                if controller is not None:
                    controller.stop()
            await charts.stop()
            await client.close()


def helm_profile_table(
    phases: profiling.Profile,
    apps: int,
    *,
    counts: helm_ceilings.AuditCounts,
    runs: dict[str, float],
    run_seconds: dict[str, float],
    helm_start: float,
) -> tuple[list[str], list[list[Any]]]:
    """The controllers' per-step profile, then helm's part: its processes (wall time,
    of which starting one is `helm_start` each), its discovery requests and its
    release's own requests, as the API server counted and timed them."""
    headers, rows = profiling.profile_table(phases, apps)
    processes = sum(runs.values())
    by_command = ", ".join(f"{c} {n / apps:.2f}" for c, n in sorted(runs.items()))
    rows.append(["helm", "processes (wall, all commands)", f"{sum(run_seconds.values()):.1f}", "-",
                 f"processes: {by_command or '-'}", "-"])  # fmt: skip
    rows.append(["helm", "process start (helm version, est.)", f"{processes * helm_start:.1f}",
                 "-", "-", "-"])  # fmt: skip
    rows.append(["helm", "discovery + OpenAPI", "-", "-",
                 f"get {counts.helm_discovery / apps:.2f}", f"{counts.helm_discovery_seconds:.1f}"])  # fmt: skip
    verbs = ", ".join(f"{v} {n / apps:.2f}" for v, n in sorted(counts.helm_by_verb.items()))
    rows.append(["helm", "release requests (install, status)", "-", "-", verbs or "-",
                 f"{counts.helm_other_seconds:.1f}"])  # fmt: skip
    return headers, rows


RSET = ResourceType("fluxcd.controlplane.io", "v1", "resourcesets", "ResourceSet")
RSIP = ResourceType(
    "fluxcd.controlplane.io", "v1", "resourcesetinputproviders", "ResourceSetInputProvider"
)


def app_tags(count: int) -> list[str]:
    """`count` tags whose Flux Operator ids (adler32 of the tag) differ. adler32 of
    short, similar strings collides often (`app-131` and `app-213`; 576 pairs among
    `app-0`..`app-999`), and a provider exporting one id twice is refused."""
    tags: list[str] = []
    ids: set[int] = set()
    n = 0
    while len(tags) < count:
        tag = "app-" + hashlib.sha256(str(n).encode()).hexdigest()[:10]
        n += 1
        if zlib.adler32(tag.encode()) not in ids:
            ids.add(zlib.adler32(tag.encode()))
            tags.append(tag)
    return tags


def tag_all(registry: OciRegistry, repository: str, source: str, tags: list[str]) -> None:
    """Put the manifest of tag `source` under every tag of `tags` (one PUT each), as
    `sluice tag artifact` would: N apps published without N uploads."""
    client = registry.client()
    base = f"{registry.url}/v2/{repository}/manifests"
    accept = {"Accept": "application/vnd.oci.image.manifest.v1+json"}
    got = client.do_request(f"{base}/{source}", "GET", headers=accept)
    media = got.headers.get("Content-Type", "application/vnd.oci.image.manifest.v1+json")
    for tag in tags:
        put = client.do_request(
            f"{base}/{tag}", "PUT", data=got.content, headers={"Content-Type": media}
        )
        if put.status_code != 201:
            raise RuntimeError(f"tagging {tag}: {put.status_code}")


def resourceset_of(registry: OciRegistry, repository: str, ns: str) -> dict[str, Any]:
    """The seed's ResourceSet in the benchmark's shape: OCIRepository by digest and
    Flux's benchmark Kustomization per exported tag."""
    url = registry.oci_url(repository)
    return {
        "apiVersion": "fluxcd.controlplane.io/v1",
        "kind": "ResourceSet",
        "metadata": {"name": "apps", "namespace": ns},
        "spec": {
            "inputsFrom": [{"kind": "ResourceSetInputProvider", "name": "tags"}],
            "resources": [
                {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
                 "metadata": {"name": "<< inputs.tag >>", "namespace": ns},
                 "spec": {"interval": "60m", "url": url, "insecure": True,
                          "ref": {"digest": "<< inputs.digest | quote >>"}}},
                {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                 "metadata": {"name": "<< inputs.tag >>", "namespace": ns},
                 "spec": {"sourceRef": {"kind": "OCIRepository", "name": "<< inputs.tag >>"},
                          "interval": "60m", "retryInterval": "2m", "path": "./",
                          "prune": True, "wait": True, "timeout": "1m",
                          "serviceAccountName": "flux", "targetNamespace": ns,
                          "postBuild": {"substitute": {"INDEX": "<< inputs.tag >>",
                                                       "PODS": "1", "MCPU": "1m"}}}},
            ],
        },
    }  # fmt: skip


async def run_resourceset(apps: int, workdir: Path) -> dict[str, Any]:
    """N apps from N tags of one repository, through a provider and a ResourceSet."""
    with ControlPlane(workdir=workdir / "cp") as plane:
        client = await KubeClient.connect(kubeconfig=str(plane.kubeconfig), qps=0)
        await install_crds(client, all_crds())
        ns = "benchmark"
        await prepare_namespace(client, ns)
        kubeconfig = str(plane.kubeconfig)
        source = source_controller(kubeconfig, workdir)
        kustomize = kustomize_controller(kubeconfig, workdir)
        rsets = Controller(
            "resourceset-controller",
            "resourceset_controller",
            ["--kubeconfig", kubeconfig, "--concurrent", "4"],
            workdir / "resourceset-controller.log",
        )
        registry = OciRegistry(workdir=workdir / "registry")
        registry.start()
        try:
            source.wait_ready()
            kustomize.wait_ready()
            rsets.wait_ready()
            repository = "mono-repo"
            tags = app_tags(apps)
            registry.push_artifact(repository, tags[0], files={"podinfo.yaml": APP})
            tag_all(registry, repository, tags[0], tags[1:])
            async with simulated_rollouts(client, namespace=ns, interval=0.5):
                start = time.monotonic()
                await client.create(
                    RSIP,
                    {"apiVersion": "fluxcd.controlplane.io/v1",
                     "kind": "ResourceSetInputProvider",
                     "metadata": {"name": "tags", "namespace": ns},
                     "spec": {"type": "OCIArtifactTag", "url": registry.oci_url(repository),
                              "insecure": True,
                              "filter": {"includeTag": "^app-", "limit": apps}}},
                )  # fmt: skip
                await client.create(RSET, resourceset_of(registry, repository, ns))
                exported = await all_ready(client, RSIP, ns, 1)
                applied = await all_ready(client, RSET, ns, 1)
                sources_ready = await all_ready(client, OCIREPO, ns, apps)
                await all_ready(client, KUSTOMIZATION, ns, apps)
                total = time.monotonic() - start
            return {
                "apps": apps,
                "source_kind": "resourceset",
                "inputs_exported_seconds": exported,
                "resourceset_applied_seconds": exported + applied,
                "sources_ready_seconds": exported + applied + sources_ready,
                "kustomizations_ready_seconds": total,
                "source_controller_peak_mib": source.peak_mib(),
                "kustomize_controller_peak_mib": kustomize.peak_mib(),
                "resourceset_controller_peak_mib": rsets.peak_mib(),
            }
        finally:
            source.stop()
            kustomize.stop()
            rsets.stop()
            registry.stop()
            await client.close()


async def run_one(
    apps: int,
    kind: str,
    workdir: Path,
    *,
    source_concurrency: int = 10,
    kustomize_concurrency: int = 20,
) -> dict[str, Any]:
    if kind == "helm":
        return await run_helm(apps, workdir)
    if kind == "resourceset":
        return await run_resourceset(apps, workdir)
    with ControlPlane(workdir=workdir / "cp") as plane:
        client = await KubeClient.connect(kubeconfig=str(plane.kubeconfig), qps=0)
        await install_crds(client, all_crds())
        ns = "benchmark"
        await prepare_namespace(client, ns)
        kubeconfig = str(plane.kubeconfig)
        # The ceilings first, on the fresh server: the same objects, no controller.
        limits = await ceilings.measure(client, render(APP, apps))
        raw_rate = limits.ssa
        source = source_controller(
            kubeconfig, workdir, concurrent=source_concurrency, extra=["--profile-phases"]
        )
        kustomize = kustomize_controller(
            kubeconfig, workdir, concurrent=kustomize_concurrency, extra=["--profile-phases"]
        )
        servers: list[Any] = []
        try:
            source.wait_ready()
            kustomize.wait_ready()
            origin: Origin
            if kind == "oci":
                registry = OciRegistry(workdir=workdir / "registry")
                registry.start()
                servers.append(registry)
                origin = oci_origin(registry)
            else:
                git = GitHttpServer(root=workdir / "git")
                git.start()
                servers.append(git)
                origin = git_origin(git)
            origin.publish({"podinfo.yaml": APP})
            requests_before = kustomize.api_requests()

            async with simulated_rollouts(client, namespace=ns, interval=0.5):
                start, started_at = time.monotonic(), datetime.now(UTC)
                await create_apps(client, origin, ns, apps)
                created = time.monotonic() - start
                # Both from the start of creation: waiting for the sources first
                # must not take their time out of the Kustomizations' figure.
                sources_ready = await all_ready(client, origin.rt, ns, apps) + created
                ks_ready = await all_ready(client, KUSTOMIZATION, ns, apps) + sources_ready
            # VmHWM before the bench's own /metrics scrapes of the profile: whether
            # rendering them (1,000 per-object series) is what sets the peak.
            peaks_before_scrape = {"source": source.peak_mib(), "kustomize": kustomize.peak_mib()}
            requests = kustomize.api_requests() - requests_before
            phases = profiling.profile({"source": source, "kustomize": kustomize})
            rate = 4 * apps / ks_ready
            first, last, applied = await profiling.apply_window(
                client, ns, APP_KINDS, "kustomize-controller"
            )
            # managedFields times have a resolution of one second.
            applying = max(1.0, (last - first).total_seconds())
            return {
                "apps": apps,
                "source_kind": origin.kind,
                "create_seconds": created,
                "sources_ready_seconds": sources_ready,
                "kustomizations_ready_seconds": ks_ready,
                "source_controller_peak_mib": source.peak_mib(),
                "kustomize_controller_peak_mib": kustomize.peak_mib(),
                "peaks_before_scrape_mib": peaks_before_scrape,
                "objects_applied": 4 * apps,
                "apply_objects_per_second": rate,
                "raw_ssa_objects_per_second": raw_rate,
                "ratio_to_raw": rate / raw_rate,
                "raw_dry_run_then_apply_objects_per_second": limits.promise,
                "raw_dry_run_objects_per_second": limits.dry_run,
                "raw_contract_objects_per_second": limits.contract,
                "ratio_to_contract": rate / limits.contract,
                "applying_ratio_to_contract": applied / applying / limits.contract,
                "ratio_to_dry_run_then_apply": rate / limits.promise,
                "first_apply_after_seconds": (first - started_at).total_seconds(),
                "applying_seconds": applying,
                "applying_objects_per_second": applied / applying,
                "applying_ratio_to_raw": applied / applying / raw_rate,
                "applying_ratio_to_dry_run_then_apply": applied / applying / limits.promise,
                "api_requests_per_kustomization": requests / apps,
                "requests_per_kustomization_by_verb": {
                    verb: count / apps
                    for verb, count in phases.requests_by_verb("kustomize").items()
                },
                "profile": phases.as_json(),
                "profile_table": profiling.profile_table(phases, apps),
                "concurrency": {"source": source_concurrency, "kustomize": kustomize_concurrency},
                "load_average": os.getloadavg(),
            }
        finally:
            source.stop()
            kustomize.stop()
            for server in servers:
                server.stop()
            await client.close()


def _fmt_seconds(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


def _print_run(r: dict[str, Any]) -> None:
    """One run's per-phase profile and requests per Kustomization, as it finishes."""
    apps = r["apps"]
    print(f"\nN={apps} {r['source_kind']}: raw SSA {r['raw_ssa_objects_per_second']:.0f} obj/s, "
          f"Sluice {r['apply_objects_per_second']:.1f} obj/s ({r['ratio_to_raw']:.0%}) from "
          f"creation to all Ready; {r['applying_objects_per_second']:.1f} obj/s "
          f"({r['applying_ratio_to_raw']:.0%}) while applying (first apply "
          f"{r['first_apply_after_seconds']:.0f}s after creation, last "
          f"{r['applying_seconds']:.0f}s later); "
          f"Kustomizations Ready in {_fmt_seconds(r['kustomizations_ready_seconds'])}, "
          f"sources in {_fmt_seconds(r['sources_ready_seconds'])}; peak "
          f"source {r['source_controller_peak_mib']:.0f}Mi, "
          f"kustomize {r['kustomize_controller_peak_mib']:.0f}Mi")  # fmt: skip
    print(ceilings.ceiling_line(ceilings.of_result(r), end_to_end=r["apply_objects_per_second"],
                                applying=r["applying_objects_per_second"]))  # fmt: skip
    if "peaks_before_scrape_mib" in r:
        before = r["peaks_before_scrape_mib"]
        print(f"peak before the profile's /metrics scrape: source {before['source']:.0f}Mi, "
              f"kustomize {before['kustomize']:.0f}Mi")  # fmt: skip
    verbs = ", ".join(
        f"{verb} {n:.2f}" for verb, n in sorted(r["requests_per_kustomization_by_verb"].items())
    )
    print(f"requests per Kustomization: {r['api_requests_per_kustomization']:.2f} ({verbs})")
    headers, rows = r["profile_table"]
    print(table(headers, rows))


def _print_helm_run(r: dict[str, Any]) -> None:
    """One helm run: both ceilings, Sluice against them, requests and the profile."""
    apps = r["apps"]
    at_server = r["requests_at_server"]
    ceiling = r["helm_ceiling_requests_at_server"]
    print(f"\nN={apps} helm (concurrency {r['concurrency']}): helm ceiling "
          f"{_fmt_seconds(r['helm_ceiling_seconds'])} ({ceiling['total'] / apps:.1f} requests "
          f"per release, {ceiling['helm_discovery'] / apps:.1f} of them discovery), SSA ceiling "
          f"{_fmt_seconds(r['ssa_ceiling_seconds'])}; Sluice {_fmt_seconds(r['helmreleases_ready_seconds'])} "
          f"to every HelmRelease Ready = {r['ratio_to_helm_ceiling']:.0%} of the helm ceiling, "
          f"{r['ratio_to_ssa_ceiling']:.0%} of the SSA ceiling; peak helm-controller "
          f"{r['helm_controller_peak_mib']:.0f}Mi, source-controller "
          f"{r['source_controller_peak_mib']:.0f}Mi; helm start {r['helm_start_seconds']:.2f}s")  # fmt: skip
    agents = ", ".join(f"{a} {n / apps:.1f}" for a, n in sorted(at_server["by_agent"].items()))
    own = ", ".join(f"{c}-controller {n / apps:.1f}" for c, n in r["controller_requests"].items())
    print(f"requests per release at the API server: {r['api_requests_per_release']:.1f} "
          f"({agents}; of sluice's: {own}); helm's discovery "
          f"{at_server['helm_discovery'] / apps:.1f}")  # fmt: skip
    ceiling_cpu, sluice_cpu = r["helm_ceiling_cpu_seconds"], r["sluice_cpu_seconds"]
    print(f"CPU-seconds per release (independent of the machine's other load): helm ceiling "
          f"{sum(ceiling_cpu.values()) / apps:.2f} ("
          + ", ".join(f"{k} {v / apps:.2f}" for k, v in ceiling_cpu.items())
          + f"), Sluice {sum(sluice_cpu.values()) / apps:.2f} ("
          + ", ".join(f"{k} {v / apps:.2f}" for k, v in sluice_cpu.items())
          + f"): Sluice at {r['cpu_ratio_to_helm_ceiling']:.0%} of the ceiling's CPU efficiency")  # fmt: skip
    headers, rows = r["profile_table"]
    print(table(headers, rows))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="e2e.bench mttp", description=__doc__)
    parser.add_argument("--apps", type=int, nargs="+", default=[100])
    parser.add_argument(
        "--sources",
        nargs="+",
        choices=["oci", "git", "helm", "resourceset"],
        default=["oci", "git"],
    )
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--concurrent",
        type=int,
        nargs=2,
        metavar=("SOURCE", "KUSTOMIZE"),
        default=None,
        help="workers of the source- and kustomize-controller (default: Flux's benchmark settings, 10 and 20)",
    )
    args = parser.parse_args(argv)
    concurrency = (
        {"source_concurrency": args.concurrent[0], "kustomize_concurrency": args.concurrent[1]}
        if args.concurrent
        else {}
    )
    results = []
    for apps in args.apps:
        for kind in args.sources:
            print(f"running MTTP with {apps} apps from {kind} sources ...", flush=True)
            with tempfile.TemporaryDirectory(prefix="sluice-mttp-") as tmp:
                result = asyncio.run(run_one(apps, kind, Path(tmp), **concurrency))
            results.append(result)
            if kind == "helm":
                _print_helm_run(result)
            else:
                _print_run(result)
    helm_rows = [
        [r["apps"], _fmt_seconds(r["helm_ceiling_seconds"]), _fmt_seconds(r["ssa_ceiling_seconds"]),
         _fmt_seconds(r["helmreleases_ready_seconds"]), FLUX_V2_6_HELM.get(r["apps"], "-"),
         f"{r['ratio_to_helm_ceiling']:.0%}", f"{r['cpu_ratio_to_helm_ceiling']:.0%}",
         f"{r['ratio_to_ssa_ceiling']:.0%}",
         f"{r['api_requests_per_release']:.1f}",
         f"{r['requests_at_server']['by_agent'].get('helm', 0) / r['apps']:.1f}",
         f"{r['helm_controller_peak_mib']:.0f}Mi", "190-350Mi",
         f"{r['source_controller_peak_mib']:.0f}Mi",
         "{:.1f}/{:.1f}/{:.1f}".format(*r["load_average"])]
        for r in results if r["source_kind"] == "helm"
    ]  # fmt: skip
    rset_rows = [
        [r["apps"], _fmt_seconds(r["inputs_exported_seconds"]),
         _fmt_seconds(r["resourceset_applied_seconds"]), _fmt_seconds(r["sources_ready_seconds"]),
         _fmt_seconds(r["kustomizations_ready_seconds"]),
         f"{r['resourceset_controller_peak_mib']:.0f}Mi",
         f"{r['source_controller_peak_mib']:.0f}Mi", f"{r['kustomize_controller_peak_mib']:.0f}Mi"]
        for r in results if r["source_kind"] == "resourceset"
    ]  # fmt: skip
    results_ks = [r for r in results if r["source_kind"] not in ("helm", "resourceset")]
    rows = []
    for r in results_ks:
        flux = FLUX_V2_6.get(r["apps"], {})
        rows.append([
            r["apps"], r["source_kind"],
            _fmt_seconds(r["sources_ready_seconds"]), flux.get("source", "-"),
            _fmt_seconds(r["kustomizations_ready_seconds"]), flux.get("kustomization", "-"),
            f"{r['source_controller_peak_mib']:.0f}Mi", flux.get("source_mem", "-"),
            f"{r['kustomize_controller_peak_mib']:.0f}Mi", flux.get("ks_mem", "-"),
            f"{r['raw_ssa_objects_per_second']:.0f}", f"{r['apply_objects_per_second']:.1f}",
            f"{r['ratio_to_raw']:.0%}",
            f"{r['applying_objects_per_second']:.1f} ({r['applying_ratio_to_raw']:.0%})",
            *ceilings.table_cells(ceilings.of_result(r), end_to_end=r["apply_objects_per_second"],
                                  applying=r["applying_objects_per_second"]),
            f"{r['api_requests_per_kustomization']:.1f}",
            "{:.1f}/{:.1f}/{:.1f}".format(*r["load_average"]),
        ])  # fmt: skip
    if rows:
        print()
        print(table(
            ["N", "source", "sources ready", "Flux 2.6", "Kustomizations ready", "Flux 2.6",
             "source-ctrl peak", "Flux 2.6", "kustomize-ctrl peak", "Flux 2.6",
             "raw SSA obj/s", "Sluice obj/s", "ratio", "while applying",
             *ceilings.TABLE_HEADERS, "API req/ks",
             "load avg at end"],
            rows,
        ))  # fmt: skip
    if helm_rows:
        print()
        print(table(
            ["N", "helm ceiling", "SSA ceiling", "HelmReleases ready", "Flux 2.6",
             "of helm ceiling", "(by CPU)", "of SSA ceiling", "API req/release", "of which helm's",
             "helm-ctrl peak", "Flux 2.6", "source-ctrl peak", "load avg at end"],
            helm_rows,
        ))  # fmt: skip
    if rset_rows:
        print()
        print(table(
            ["N", "inputs exported", "ResourceSet applied", "sources ready",
             "Kustomizations ready", "resourceset-ctrl peak", "source-ctrl peak",
             "kustomize-ctrl peak"],
            rset_rows,
        ))  # fmt: skip
    print(f"\nmachine: {os.cpu_count()} cores, everything on one host; Flux: 16-core runner, kind")
    write(
        args.out,
        "mttp",
        {"results": results, "flux_v2_6": FLUX_V2_6, "flux_v2_6_helm": FLUX_V2_6_HELM},
    )
