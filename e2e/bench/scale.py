"""Benchmark 4: the scale of one object.

One Kustomization of N ConfigMaps (four keys each, one of them substituted
post-build), generated into a Git repository as `--files` files, applied
into one namespace. The source- and kustomize-controller run as separate
processes with their default flags against the local control plane. Each
run uses a fresh namespace, GitRepository and Kustomization; the figures are
medians over `--runs`:

- build: `sluice_runtime.building.build` (in-process for these plain
  manifests, no kustomize process) + `substituting.substitute`,
  called in this process on a copy of the same tree with the same spec (the
  controller's build and substitution steps; no download, no API).
- apply: from creating the Kustomization (its source already has the
  artifact) to the watch delivering it Ready with the revision applied.
- no-change: from the `reconcile.fluxcd.io/requestedAt` patch to
  `lastHandledReconcileAt` equal to it, Ready; every object unchanged.
- prune: a commit removes half the objects; from the GitRepository's
  reconcile request to the Kustomization Ready with that revision applied
  (so it includes the fetch, also shown alone); the remaining objects are
  then counted through the API.

Also per phase: the controller's own reconcile time
(`gotk_reconcile_duration_seconds`), its process CPU (its own and its
children's, a kustomize process's: unlike wall time, independent of the
load) and API requests (`rest_client_requests_total`); and the kustomize-controller's idle RSS and
peak memory (VmHWM, over every run). Kustomizations of finished runs are
deleted with `deletionPolicy: Orphan`, so they do not stay in its cache.

The kustomize-controller's client-side rate limit (`--kube-api-qps`, 50 by
default) applies only to API servers without API Priority and Fairness; this
one (v1.20) has it, so the controller sends as fast as the server answers.

Usage: python -m e2e.bench scale [--objects 5000] [--files 10] [--runs 3]
       [--kube-api-qps 50] [--kube-api-burst 300] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from e2e.bench.cluster import (
    CONFIG_MAP,
    GITREPO,
    KUSTOMIZATION,
    REQUESTED_AT,
    Controller,
    Watching,
    applied,
    create_namespace,
    git_repository,
    has_artifact,
    kustomization,
    metric,
    ready,
    rss_mib,
)
from e2e.bench.common import median, table, write
from e2e.bench.profiling import cpu_seconds
from sluice_api.kustomize import KustomizationSpec
from sluice_cli.crds_command import all_crds
from sluice_envtest.controlplane import ControlPlane, free_port
from sluice_envtest.gitserver import GitHttpServer
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.installing import install_crds

NS = "bench"
SUBSTITUTE = {"COLOR": "blue"}
OWNER_LABEL = "kustomize.toolkit.fluxcd.io/name"


def _config_map(index: int, rng: random.Random) -> str:
    return (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{index:05d}\n"
        f"  labels:\n    app.kubernetes.io/part-of: scale\ndata:\n"
        f"  index: '{index}'\n  color: ${{COLOR}}\n  owner: team-a\n"
        f"  payload: {rng.getrandbits(128):032x}\n"
    )


def tree(objects: int, files: int) -> dict[str, str]:
    """`files` files of consecutive ConfigMaps; the same content for the same arguments."""
    rng = random.Random(objects)
    documents = [_config_map(i, rng) for i in range(objects)]
    per_file = -(-objects // files)
    return {
        f"configmaps-{k:03d}.yaml": "---\n".join(documents[k * per_file : (k + 1) * per_file])
        for k in range(files)
        if documents[k * per_file : (k + 1) * per_file]
    }


def _spec(target: str) -> dict[str, Any]:
    return {"targetNamespace": target, "postBuild": {"substitute": SUBSTITUTE}}


async def measure_build(files: dict[str, str], runs: int, workdir: Path) -> list[dict[str, float]]:
    from sluice_runtime import building, substituting

    kustomize = building.find_kustomize()
    spec = KustomizationSpec.model_validate(
        {
            "interval": "1h",
            "path": "./",
            "prune": True,
            "sourceRef": {"kind": "GitRepository", "name": "scale"},
            **_spec("scale-0"),
        }
    )
    source = workdir / "tree"
    source.mkdir()
    for name, text in files.items():
        (source / name).write_text(text)
    results = []
    for run in range(runs):
        root = workdir / f"build-{run}"
        shutil.copytree(source, root)
        start = time.perf_counter()
        objects = await building.build(root, spec, kustomize=kustomize)
        built = time.perf_counter()
        objects = substituting.substitute(objects, SUBSTITUTE)
        substituted = time.perf_counter()
        if len(objects) != sum(text.count("kind: ConfigMap") for text in files.values()):
            raise RuntimeError(f"built {len(objects)} objects")
        results.append({"build": built - start, "substitution": substituted - built})
        shutil.rmtree(root)
    return results


async def _count(client: KubeClient, namespace: str, name: str) -> int:
    listed = await client.list(
        CONFIG_MAP, namespace=namespace, label_selector=f"{OWNER_LABEL}={name}"
    )
    return len(listed.items)


class _Phase:
    """Wall time from the caller's start, plus the controller's counters over the phase."""

    def __init__(self, controller: Controller, name: str) -> None:
        self.controller = controller
        self.name = name

    def __enter__(self) -> _Phase:
        self.requests = metric(self.controller, "rest_client_requests_total")
        self.reconcile = self._reconcile_seconds()
        self.cpu = sum(cpu_seconds(self.controller))
        return self

    def __exit__(self, *_: object) -> None:
        self.requests = metric(self.controller, "rest_client_requests_total") - self.requests
        self.reconcile = self._reconcile_seconds() - self.reconcile
        # Its own CPU and its children's (a kustomize process): on a shared
        # machine this, unlike wall time, does not depend on the load.
        self.cpu = sum(cpu_seconds(self.controller)) - self.cpu

    def _reconcile_seconds(self) -> float:
        return metric(
            self.controller,
            "gotk_reconcile_duration_seconds_sum",
            kind="Kustomization",
            name=self.name,
        )


async def _one_run(
    run: int,
    client: KubeClient,
    git: GitHttpServer,
    kustomize: Controller,
    repos: Watching,
    kss: Watching,
    args: argparse.Namespace,
) -> dict[str, Any]:
    name = ns = f"scale-{run}"
    await create_namespace(client, ns)
    repo = git.create_repo(name)
    files = tree(args.objects, args.files)
    revision = f"main@sha1:{repo.commit('all objects', files=files)}"
    repo.push()
    await client.create(GITREPO, git_repository(name, git.url(name)), namespace=NS)
    await repos.until(name, has_artifact(revision), timeout=300)
    result: dict[str, Any] = {}

    # First reconcile: N new objects.
    with _Phase(kustomize, name) as phase:
        done = kss.expect(name, applied(revision))
        start = time.monotonic()
        await client.create(
            KUSTOMIZATION,
            kustomization(name, name, deletionPolicy="Orphan", **_spec(ns)),
            namespace=NS,
        )
        _, at = await kss.wait(name, done, timeout=args.timeout)
    result["apply"] = {
        "seconds": at - start,
        "cpu": phase.cpu,
        "reconcile": phase.reconcile,
        "requests": phase.requests,
    }
    result["applied_objects"] = await _count(client, ns, name)

    # Nothing changed.
    token = secrets.token_hex(4)
    with _Phase(kustomize, name) as phase:
        done = kss.expect(
            name, lambda o: ready(o) and o["status"].get("lastHandledReconcileAt") == token
        )
        start = time.monotonic()
        await client.merge_patch(
            KUSTOMIZATION, name, {"metadata": {"annotations": {REQUESTED_AT: token}}}, namespace=NS
        )
        _, at = await kss.wait(name, done, timeout=args.timeout)
    result["no_change"] = {
        "seconds": at - start,
        "cpu": phase.cpu,
        "reconcile": phase.reconcile,
        "requests": phase.requests,
    }

    # Prune half: remove the first half of the files.
    removed = sorted(files)[: len(files) // 2]
    expected = args.objects - sum(files[f].count("kind: ConfigMap") for f in removed)
    revision = f"main@sha1:{repo.commit('prune half', remove=removed)}"
    repo.push()
    with _Phase(kustomize, name) as phase:
        fetched = repos.expect(name, has_artifact(revision))
        done = kss.expect(name, applied(revision))
        start = time.monotonic()
        await client.merge_patch(
            GITREPO,
            name,
            {"metadata": {"annotations": {REQUESTED_AT: secrets.token_hex(4)}}},
            namespace=NS,
        )
        _, fetched_at = await repos.wait(name, fetched, timeout=args.timeout)
        _, at = await kss.wait(name, done, timeout=args.timeout)
    result["prune"] = {
        "seconds": at - start,
        "cpu": phase.cpu,
        "fetch_seconds": fetched_at - start,
        "reconcile": phase.reconcile,
        "requests": phase.requests,
    }
    result["remaining_objects"] = await _count(client, ns, name)
    result["expected_remaining"] = expected
    if result["applied_objects"] != args.objects or result["remaining_objects"] != expected:
        raise RuntimeError(f"object counts are wrong: {result}")

    gone = kss.expect(name, lambda o: o is None)
    await client.delete(KUSTOMIZATION, name, namespace=NS)
    await kss.wait(name, gone, timeout=args.timeout)
    return result


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    with (
        ControlPlane(workdir=workdir / "cp") as plane,
        GitHttpServer(workdir=workdir / "git") as git,
    ):
        client = await KubeClient.connect(kubeconfig=str(plane.kubeconfig), qps=0)
        await install_crds(client, all_crds())
        await create_namespace(client, NS)
        kubeconfig = str(plane.kubeconfig)
        storage_port = free_port()
        source = Controller(
            "source-controller",
            "source_controller",
            ["--kubeconfig", kubeconfig, "--storage-path", str(workdir / "storage"),
             "--storage-addr", f"127.0.0.1:{storage_port}",
             "--storage-adv-addr", f"127.0.0.1:{storage_port}"],
            workdir / "source-controller.log",
        )  # fmt: skip
        kustomize = Controller(
            "kustomize-controller",
            "kustomize_controller",
            ["--kubeconfig", kubeconfig, "--kube-api-qps", str(args.kube_api_qps),
             "--kube-api-burst", str(args.kube_api_burst)],
            workdir / "kustomize-controller.log",
        )  # fmt: skip
        try:
            source.wait_ready()
            kustomize.wait_ready()
            idle = rss_mib(kustomize)
            runs = []
            async with (
                Watching(client, GITREPO, NS).running() as repos,
                Watching(client, KUSTOMIZATION, NS).running() as kss,
            ):
                for index in range(args.runs):
                    print(f"run {index + 1}/{args.runs}: {args.objects} objects", flush=True)
                    runs.append(await _one_run(index, client, git, kustomize, repos, kss, args))
                    print(
                        "  apply {apply[seconds]:.2f}s, no-change {no_change[seconds]:.2f}s, "
                        "prune {prune[seconds]:.2f}s".format(**runs[-1]),
                        flush=True,
                    )
            peak = kustomize.peak_mib()
        finally:
            source.stop()
            kustomize.stop()
            await client.close()
    return {"runs": runs, "idle_rss_mib": idle, "peak_mib": peak}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="e2e.bench scale", description=__doc__)
    parser.add_argument("--objects", type=int, default=5000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per phase")
    parser.add_argument(
        "--kube-api-qps",
        type=float,
        default=50.0,
        help="the kustomize-controller's client-side limit (its default: 50)",
    )
    parser.add_argument("--kube-api-burst", type=int, default=300, help="(its default: 300)")
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sluice-scale-") as tmp:
        print(f"build: {args.objects} objects in {args.files} files, {args.runs} runs", flush=True)
        builds = asyncio.run(measure_build(tree(args.objects, args.files), args.runs, Path(tmp)))
        measured = asyncio.run(run(args, Path(tmp)))
    runs = measured["runs"]

    def med(phase: str, key: str) -> float:
        return median([r[phase][key] for r in runs])

    build = median([b["build"] for b in builds])
    substitution = median([b["substitution"] for b in builds])
    half = runs[0]["applied_objects"] - runs[0]["remaining_objects"]
    summary = {
        "build_seconds": build,
        "substitution_seconds": substitution,
        "apply_seconds": med("apply", "seconds"),
        "apply_reconcile_seconds": med("apply", "reconcile"),
        "apply_controller_cpu_seconds": med("apply", "cpu"),
        "apply_api_requests": med("apply", "requests"),
        "apply_objects_per_second": args.objects / med("apply", "seconds"),
        "no_change_seconds": med("no_change", "seconds"),
        "no_change_reconcile_seconds": med("no_change", "reconcile"),
        "no_change_controller_cpu_seconds": med("no_change", "cpu"),
        "no_change_api_requests": med("no_change", "requests"),
        "prune_seconds": med("prune", "seconds"),
        "prune_fetch_seconds": med("prune", "fetch_seconds"),
        "prune_reconcile_seconds": med("prune", "reconcile"),
        "prune_controller_cpu_seconds": med("prune", "cpu"),
        "prune_api_requests": med("prune", "requests"),
        "pruned_objects": half,
        "kustomize_controller_idle_rss_mib": measured["idle_rss_mib"],
        "kustomize_controller_peak_mib": measured["peak_mib"],
    }
    rows = [
        ["build (in-process: plain manifests)", build, "-", "-", "-"],
        ["substitution", substitution, "-", "-", "-"],
        [f"apply: {args.objects} new objects", summary["apply_seconds"],
         summary["apply_reconcile_seconds"], summary["apply_controller_cpu_seconds"],
         int(summary["apply_api_requests"])],
        [f"no change: {args.objects} unchanged", summary["no_change_seconds"],
         summary["no_change_reconcile_seconds"], summary["no_change_controller_cpu_seconds"],
         int(summary["no_change_api_requests"])],
        [f"prune {half} (incl. fetch {summary['prune_fetch_seconds']:.2f}s)",
         summary["prune_seconds"], summary["prune_reconcile_seconds"],
         summary["prune_controller_cpu_seconds"], int(summary["prune_api_requests"])],
    ]  # fmt: skip
    print()
    print(
        f"one Kustomization of {args.objects} ConfigMaps, median of {args.runs} runs; "
        f"kustomize-controller --kube-api-qps {args.kube_api_qps:g} "
        f"--kube-api-burst {args.kube_api_burst}"
    )
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (2 cores shared)")
    headers = ["phase", "wall s", "reconcile s (controller)", "controller CPU s", "API requests"]
    print(table(headers, rows))
    print(
        f"\nkustomize-controller memory: idle {measured['idle_rss_mib']:.0f} MiB RSS, "
        f"peak {measured['peak_mib']:.0f} MiB (VmHWM); "
        f"apply {summary['apply_objects_per_second']:.0f} objects/s"
    )
    write(
        args.out,
        "scale",
        {
            "objects": args.objects,
            "files": args.files,
            "runs": args.runs,
            "kube_api_qps": args.kube_api_qps,
            "kube_api_burst": args.kube_api_burst,
            "summary": summary,
            "builds": builds,
            "phases": runs,
        },
    )
