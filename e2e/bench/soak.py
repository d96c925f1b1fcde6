"""Soak: N MTTP-shaped apps reconciled on a short interval for a long time; do resources leak?

Each app is an OCIRepository plus a Kustomization (prune, wait, a tenant),
both with a short `interval`, so every source is fetched and every
Kustomization is built, dry-run and applied again and again. Once all are
Ready, each controller process is sampled every few seconds for its
resident memory (VmRSS), its open file descriptors (/proc/<pid>/fd) and its
live asyncio tasks (the `python_asyncio_tasks` gauge of its metrics
endpoint, Python's `go_goroutines`). A leak is a positive trend, so the
result is the least-squares slope of each, per hour, with the first and last
samples; a new revision is published every `--publish-every` minutes so the
artifacts, inventories and applies change too, not only no-op reconciles.

Not in CI: the defaults (1,000 apps, 30 minutes) take most of an hour.

Usage: python -m e2e.bench soak [--apps 1000] [--minutes 30] [--interval 1m] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from e2e.bench.cluster import metric, rss_mib
from e2e.bench.common import table, write
from e2e.bench.mappings import snapshot
from e2e.fleet import (
    APP,
    KUSTOMIZATION,
    Controller,
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

MEASURES = ("rss_mib", "fds", "asyncio_tasks", "metrics_seconds")


def slope_per_hour(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) pairs, in value per hour."""
    if len(samples) < 2:
        return float("nan")
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    spread = sum((t - mean_t) ** 2 for t, _ in samples)
    if spread == 0:
        return float("nan")
    return 3600 * sum((t - mean_t) * (v - mean_v) for t, v in samples) / spread


def sample(controller: Controller, *, tasks: bool = True) -> dict[str, float]:
    """RSS and fds from /proc; the tasks from /metrics, which the controller's busy event
    loop may answer late: then the tasks are missing from this sample (`nan`), not the run.
    `metrics_seconds` is how long the answer took (the loop's lag, as a caller sees it)."""
    pid = controller.proc.pid
    found = {"rss_mib": rss_mib(controller), "fds": float(len(os.listdir(f"/proc/{pid}/fd")))}
    if not tasks:
        return found
    asked = time.monotonic()
    try:
        found["asyncio_tasks"] = metric(controller, "python_asyncio_tasks")
    except OSError:  # a timeout, a refused or reset connection
        found["asyncio_tasks"] = float("nan")
    found["metrics_seconds"] = time.monotonic() - asked
    return found


def heap_report(controller: Controller, *, trim: bool) -> dict[str, Any]:
    """The controller's /debug/heap (SLUICE_TRACEMALLOC): traced and resident sizes and the
    tracebacks that grew since the previous call; an error's text if it did not answer."""
    url = (
        f"http://127.0.0.1:{controller.port}/debug/heap"
        f"?format=json&top=25&trim={int(trim)}&allocators=1"
    )
    try:
        with urllib.request.urlopen(url, timeout=300) as answer:
            found: dict[str, Any] = json.loads(answer.read())
    except OSError as error:
        return {"error": str(error)}
    return found


def summary(heap: dict[str, Any]) -> dict[str, Any]:
    """One revision's figures on a line: resident, traced, the allocators' and the mappings'."""
    glibc = heap.get("glibc_after_trim") or heap.get("glibc") or {}
    pymalloc = heap.get("pymalloc") or {}
    smaps = heap.get("smaps", {})
    figures = {
        "rss": heap.get("rss_mib"),
        "trimmed_rss": heap.get("rss_after_trim_mib"),
        "traced": heap.get("traced_mib"),
        "tracemalloc": heap.get("tracemalloc_mib"),
        "pymalloc_arenas": pymalloc.get("arenas_mib"),
        "pymalloc_live": pymalloc.get("allocated_mib"),
        "glibc_in_use": glibc.get("in_use_mib"),
        "glibc_free": glibc.get("free_mib"),
        "glibc_mmapped": glibc.get("mmapped_mib"),
        **{k: v for k, v in smaps.items() if k.endswith("_mib")},
        "error": heap.get("error"),
    }
    return {
        k: round(v, 2) if isinstance(v, float) else v for k, v in figures.items() if v is not None
    }


def reconcile_count(controller: Controller) -> float:
    """The controller's reconcile count, asked until its busy loop answers (a few minutes)."""
    for _ in range(20):
        try:
            return controller.reconciles()
        except OSError:
            time.sleep(1)
    return float("nan")


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    with ControlPlane(workdir=workdir / "cp") as plane:
        client = await KubeClient.connect(kubeconfig=str(plane.kubeconfig), qps=0)
        await install_crds(client, all_crds())
        ns = "soak"
        await prepare_namespace(client, ns)
        kubeconfig = str(plane.kubeconfig)
        env = {"SLUICE_TRACEMALLOC": str(args.tracemalloc)} if args.tracemalloc else None
        controllers = [
            source_controller(kubeconfig, workdir, env=env),
            kustomize_controller(kubeconfig, workdir, env=env),
        ]
        # At the same phase of every revision (just before the next is published), each
        # controller's allocators (pymalloc, glibc) and mappings (smaps), and with
        # tracemalloc its snapshot diffed against the last.
        heaps: dict[str, list[dict[str, Any]]] = {c.name: [] for c in controllers}
        registry = OciRegistry(workdir=workdir / "registry")
        registry.start()
        try:
            for controller in controllers:
                controller.wait_ready()
            origin = oci_origin(registry)
            origin.publish({"podinfo.yaml": APP})
            async with simulated_rollouts(client, namespace=ns, interval=1.0):
                start = time.monotonic()
                await create_apps(
                    client, origin, ns, args.apps, interval=args.interval, retry_interval="30s"
                )
                await all_ready(client, KUSTOMIZATION, ns, args.apps, limit=3 * 3600)
                ready = time.monotonic() - start
                print(f"{args.apps} apps Ready in {ready:.0f}s; soaking {args.minutes} min",
                      flush=True)  # fmt: skip
                series: dict[str, dict[str, list[tuple[float, float]]]] = {
                    c.name: {m: [] for m in MEASURES} for c in controllers
                }
                reconciles_before = {c.name: reconcile_count(c) for c in controllers}
                # The 1-minute load average next to every sample: on a shared machine the
                # figures mean little without it.
                load: list[tuple[float, float]] = []
                t0 = time.monotonic()
                published = t0
                revisions = 1
                while time.monotonic() - t0 < args.minutes * 60:
                    now = time.monotonic()
                    load.append((now - t0, os.getloadavg()[0]))
                    for controller in controllers:
                        if controller.proc.poll() is not None:
                            raise RuntimeError(f"{controller.name} exited during the soak")
                        # Traced, a busy controller's /metrics takes long enough that
                        # asking every few seconds piles requests up: RSS and fds only.
                        measured = sample(controller, tasks=not args.tracemalloc)
                        for name, value in measured.items():
                            if not math.isnan(value):
                                series[controller.name][name].append((now - t0, value))
                    if now - published >= args.publish_every * 60:
                        for controller in controllers:
                            heap = heap_report(controller, trim=args.trim)
                            heap["t"] = round(time.monotonic() - t0, 1)
                            heap["revision"] = revisions
                            heap["load_average_1m"] = os.getloadavg()[0]
                            heap["smaps"] = snapshot(controller.proc.pid)
                            heaps[controller.name].append(heap)
                            print(f"{controller.name} r{revisions}: "
                                  + json.dumps(summary(heap)), flush=True)  # fmt: skip
                        # A new revision: every artifact, build and apply changes.
                        app = APP.replace('cpu: "${MCPU}"', f'cpu: "{revisions + 1}m"')
                        origin.publish({"podinfo.yaml": app})
                        revisions += 1
                        published = now
                    await asyncio.sleep(args.sample)
                reconciles = {c.name: reconcile_count(c) - reconciles_before[c.name]
                              for c in controllers}  # fmt: skip
            results: dict[str, Any] = {}
            for controller in controllers:
                found: dict[str, Any] = {"reconciles": reconciles[controller.name]}
                for name in MEASURES:
                    points = series[controller.name][name]
                    found[name] = {
                        "first": points[0][1] if points else float("nan"),
                        "last": points[-1][1] if points else float("nan"),
                        "max": max((v for _, v in points), default=float("nan")),
                        "slope_per_hour": slope_per_hour(points),
                        "samples": len(points),
                        "missed": len(series[controller.name]["rss_mib"]) - len(points),
                        # The raw series, so a slope can be told from a sawtooth afterwards.
                        "series": [[round(t, 1), v] for t, v in points],
                    }
                found["heap"] = heaps[controller.name]
                results[controller.name] = found
            return {
                "apps": args.apps,
                "minutes": args.minutes,
                "interval": args.interval,
                "revisions_published": revisions,
                "ready_seconds": ready,
                "load_average_1m": {
                    "min": min((v for _, v in load), default=float("nan")),
                    "mean": sum(v for _, v in load) / len(load) if load else float("nan"),
                    "max": max((v for _, v in load), default=float("nan")),
                    "series": [[round(t, 1), v] for t, v in load],
                },
                "controllers": results,
            }
        finally:
            for controller in controllers:
                controller.stop()
            registry.stop()
            await client.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="e2e.bench soak", description=__doc__)
    parser.add_argument("--apps", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--interval", default="1m", help="every source's and Kustomization's")
    parser.add_argument("--sample", type=float, default=5.0, help="seconds between samples")
    parser.add_argument(
        "--publish-every", type=float, default=5.0, help="minutes between new revisions"
    )
    parser.add_argument(
        "--tracemalloc", type=int, default=0, metavar="FRAMES",
        help="run the controllers with SLUICE_TRACEMALLOC=FRAMES and record /debug/heap "
        "before each new revision",
    )  # fmt: skip
    parser.add_argument(
        "--trim",
        action="store_true",
        help="malloc_trim(0) in each controller before each new revision (/debug/heap?trim=1), "
        "recording the resident size before and after",
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sluice-soak-") as tmp:
        result = asyncio.run(run(args, Path(tmp)))
    rows = []
    for name, found in result["controllers"].items():
        rows.append([
            name, f"{found['reconciles']:.0f}",
            *(f"{found[m]['first']:.0f} -> {found[m]['last']:.0f} ({found[m]['slope_per_hour']:+.1f}/h)"
              for m in MEASURES),
        ])  # fmt: skip
    print()
    print(
        f"soak: {result['apps']} apps, {result['minutes']:g} min at interval "
        f"{result['interval']}, {result['revisions_published']} revisions; first -> last "
        "(least-squares slope per hour)"
    )
    headers = ["controller", "reconciles", "RSS MiB", "open fds", "asyncio tasks", "metrics s"]
    print(table(headers, rows))
    loadavg = result["load_average_1m"]
    print(
        f"\nmachine: {os.cpu_count()} cores, shared; everything on one host; load average (1m) "
        f"during the soak {loadavg['min']:.1f}-{loadavg['max']:.1f}, mean {loadavg['mean']:.1f}"
    )
    write(args.out, "soak", result)
