"""Benchmark 2: what a GitRepository reconcile costs.

A repository with thousands of commits (tens of MB of history) and a
working tree of a few MB is served by `git http-backend`; a source-controller
runs in-process with its real wiring against the local control plane. For
each case the wall time is measured from the API's point of view (from the
request to the status showing the result) and the bytes are what the Git
server sent for upload-pack:

  (a) first reconcile (shallow clone of the branch)
  (a') first reconcile of a pinned commit (full history, for reference)
  (b) nothing changed: the no-op fetch
  (c) only spec.ignore changed: must rebuild from a checkout
  (d) one new commit

Usage: python -m e2e.bench noop-fetch [--commits 3000] [--runs 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e.bench.cluster import create_namespace
from e2e.bench.common import median, table, write
from sluice_cli.crds_command import all_crds
from sluice_envtest.controlplane import ControlPlane, free_port
from sluice_envtest.gitserver import GitHttpServer, generate_history
from sluice_runtime import app
from sluice_runtime.controller import ReconcileLog
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.installing import install_crds
from sluice_runtime.kube.resources import ResourceType

GITREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")


async def _wait(client: KubeClient, ns: str, name: str, check: Callable[[JSON], bool]) -> JSON:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        obj = await client.get(GITREPO, name, ns)
        if check(obj):
            return obj
        await asyncio.sleep(0.02)
    raise TimeoutError(f"{name} did not reach the expected state")


def _ready(obj: JSON) -> bool:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond["type"] == "Ready":
            return bool(
                cond["status"] == "True"
                and obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
            )
    return False


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from source_controller import __main__ as source_main

    with (
        tempfile.TemporaryDirectory(prefix="sluice-bench-") as tmp,
        ControlPlane(workdir=Path(tmp) / "cp") as plane,
        GitHttpServer() as git,
    ):
        client = await KubeClient.connect(kubeconfig=str(plane.kubeconfig), qps=0)
        await install_crds(client, all_crds())
        ns = "bench"
        await create_namespace(client, ns)

        print(f"building a repository: {args.commits} commits, {args.blob_kib} KiB per commit")
        work = git.create_repo("big")
        tree = {f"manifests/app-{i:04d}.yaml": _manifest(i) for i in range(args.tree_files)}
        work.commit("tree", files=tree)
        work.push()
        generate_history(git.root / "big.git", commits=args.commits, blob_size=args.blob_kib * 1024)
        history_mb = (
            sum(f.stat().st_size for f in (git.root / "big.git").rglob("*") if f.is_file()) / 1e6
        )

        port = free_port()
        parser = app.parser(service=source_main.SERVICE, description="bench", concurrency=2)
        source_main.add_arguments(parser)
        options = parser.parse_args(
            [
                "--kubeconfig", str(plane.kubeconfig),
                "--watch-namespace", ns,
                "--health-addr", "127.0.0.1:0",
                "--metrics-addr", "127.0.0.1:0",
                "--storage-path", str(Path(tmp) / "storage"),
                "--storage-addr", f"127.0.0.1:{port}",
                "--storage-adv-addr", f"127.0.0.1:{port}",
                "--log-level", "warning",
            ]
        )  # fmt: skip
        from sluice_runtime.observing import logging as sluice_logging

        sluice_logging.configure(level="warning", encoding="console")
        results: dict[str, list[tuple[float, int]]] = {
            k: [] for k in ("a", "a_full", "b", "c", "d")
        }
        inside: dict[str, list[float]] = {k: [] for k in results}
        reconciles = ReconcileLog()
        async with app.running(
            service=source_main.SERVICE,
            options=options,
            kinds=source_main.KINDS,
            setup=source_main.setup,
            observer=reconciles,
        ):

            def reconcile_seconds(key: str) -> float:
                return reconciles.last_duration.get(f"{ns}/{key}", float("nan"))

            url = git.url("big")
            for run_index in range(args.runs):
                # (a) a fresh GitRepository: shallow clone of the branch.
                name = f"first-{run_index}"
                before, start = git.stats("big"), time.perf_counter()
                await client.create(GITREPO, _repo(name, url, ref={"branch": "main"}), namespace=ns)
                obj = await _wait(client, ns, name, _ready)
                results["a"].append(
                    (time.perf_counter() - start, (git.stats("big") - before).upload_pack_bytes)
                )
                inside["a"].append(reconcile_seconds(name))

                # (a') a pinned commit needs the full history.
                pinned = f"full-{run_index}"
                head = (
                    work.rev_parse("HEAD")
                    if run_index == 0
                    else obj["status"]["artifact"]["revision"].split("sha1:")[1]
                )
                before, start = git.stats("big"), time.perf_counter()
                await client.create(GITREPO, _repo(pinned, url, ref={"commit": head}), namespace=ns)
                await _wait(client, ns, pinned, _ready)
                results["a_full"].append(
                    (time.perf_counter() - start, (git.stats("big") - before).upload_pack_bytes)
                )
                inside["a_full"].append(reconcile_seconds(pinned))

                # (b) nothing changed.
                token = secrets.token_hex(4)
                before, start = git.stats("big"), time.perf_counter()
                await client.merge_patch(
                    GITREPO,
                    name,
                    {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}},
                    namespace=ns,
                )
                await _wait(
                    client,
                    ns,
                    name,
                    lambda o, t=token: o["status"].get("lastHandledReconcileAt") == t,
                )
                results["b"].append(
                    (time.perf_counter() - start, (git.stats("big") - before).upload_pack_bytes)
                )
                inside["b"].append(reconcile_seconds(name))

                # (c) only spec.ignore changed.
                before, start = git.stats("big"), time.perf_counter()
                await client.merge_patch(
                    GITREPO, name, {"spec": {"ignore": f"# run {run_index}\n*.bin\n"}}, namespace=ns
                )
                await _wait(client, ns, name, _ready)
                results["c"].append(
                    (time.perf_counter() - start, (git.stats("big") - before).upload_pack_bytes)
                )
                inside["c"].append(reconcile_seconds(name))

                # (d) one new commit.
                generate_history(
                    git.root / "big.git",
                    commits=1,
                    blob_size=args.blob_kib * 1024,
                    seed=run_index + 1,
                )
                tip = work.git("--git-dir", str(git.root / "big.git"), "rev-parse", "main").strip()
                token = secrets.token_hex(4)
                before, start = git.stats("big"), time.perf_counter()
                await client.merge_patch(
                    GITREPO,
                    name,
                    {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}},
                    namespace=ns,
                )
                await _wait(
                    client,
                    ns,
                    name,
                    lambda o, t=tip: (
                        o["status"].get("artifact", {}).get("revision", "").endswith(t)
                    ),
                )
                results["d"].append(
                    (time.perf_counter() - start, (git.stats("big") - before).upload_pack_bytes)
                )
                inside["d"].append(reconcile_seconds(name))
        await client.close()

    labels = {
        "a": "(a) first reconcile, shallow branch",
        "a_full": "(a') first reconcile, pinned commit (full history)",
        "b": "(b) nothing changed (no-op fetch)",
        "c": "(c) only spec.ignore changed",
        "d": "(d) one new commit",
    }
    rows = []
    summary: dict[str, Any] = {}
    for key, label in labels.items():
        seconds = [s for s, _ in results[key]]
        received = [b for _, b in results[key]]
        summary[key] = {
            "label": label,
            "median_seconds": median(seconds),
            "median_reconcile_seconds": median(inside[key]),
            "median_bytes": median(received),
            "runs": [{"seconds": s, "bytes": b} for s, b in results[key]],
        }
        rows.append([label, median(seconds), median(inside[key]), int(median(received))])
    speedup = summary["a"]["median_reconcile_seconds"] / summary["b"]["median_reconcile_seconds"]
    speedup_full = (
        summary["a_full"]["median_reconcile_seconds"] / summary["b"]["median_reconcile_seconds"]
    )
    print()
    print(
        f"repository: {args.commits} commits, history {history_mb:.1f} MB, tree {args.tree_files} files"
    )
    print(table(["case", "wall s (API to status)", "reconcile s", "bytes received"], rows))
    print(
        f"\nreconcile time, no-op vs first shallow reconcile: {speedup:.1f}x faster; "
        f"vs full-history clone: {speedup_full:.1f}x"
    )
    return {
        "repository": {
            "commits": args.commits,
            "history_mb": history_mb,
            "tree_files": args.tree_files,
        },
        "runs": args.runs,
        "cases": summary,
        "speedup_noop_vs_first": speedup,
        "speedup_noop_vs_full_clone": speedup_full,
    }


def _manifest(index: int) -> str:
    lines = [f"  key{j}: value-{index}-{j}-{os.urandom(6).hex()}" for j in range(40)]
    return (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-{index}\ndata:\n"
        + "\n".join(lines)
        + "\n"
    )


def _repo(name: str, url: str, **spec: Any) -> JSON:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": name},
        "spec": {"url": url, "interval": "1h", **spec},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="e2e.bench noop-fetch", description=__doc__)
    parser.add_argument("--commits", type=int, default=3000)
    parser.add_argument("--blob-kib", type=int, default=10)
    parser.add_argument("--tree-files", type=int, default=400)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    write(args.out, "noop-fetch", asyncio.run(run(args)))
