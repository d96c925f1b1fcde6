"""What one API request costs the client's process, load-independently (issue 19).

Every controller pays the shared client's per-request work: building the
request, its body's JSON, TLS, the answer's JSON, and the request observers
(metrics). This sends the requests a Kustomization's reconcile sends (a
server-side apply dry-run and apply, a get, a merge patch, an Event's create)
for `--objects` Deployments through `KubeClient`, with the observers a
controller registers, to the real local control plane, `--concurrent` at a
time, `--rounds` times; and prints this process's CPU-seconds (user + system,
every thread) per 1000 requests for each round, the median, and the load
average beside the wall time. The control plane runs in processes of its own,
so its CPU is not counted. With `--py-spy FILE` (py-spy installed in the
bench env) the rounds are sampled, only the thread holding the GIL, raw
format.

Usage: python -m e2e.bench client-cost [--objects 300] [--rounds 5]
       [--concurrent 20] [--py-spy out.txt] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from e2e.bench.cluster import create_namespace
from e2e.bench.common import median, table, write
from sluice_envtest.controlplane import ControlPlane
from sluice_runtime.kube.attributing import attributed
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import EVENT, ResourceType
from sluice_runtime.observing.metrics import RequestMetrics

DEPLOYMENT = ResourceType("apps", "v1", "deployments", "Deployment")
NAMESPACE = "client-cost"
PER_OBJECT = 5
"""Requests per object and round: dry-run, apply, get, patch, create (an Event)."""


def deployment(index: int, revision: int) -> JSON:
    """A Deployment the size of the MTTP app's, with one annotation that changes per round."""
    name = f"podinfo-{index}"
    labels = {"app": name, "app.kubernetes.io/part-of": "bench"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {**labels, "kustomize.toolkit.fluxcd.io/name": "apps"},
            "annotations": {"bench/revision": str(revision)},
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "podinfo",
                            "image": "ghcr.io/stefanprodan/podinfo:6.5.3",
                            "ports": [{"name": "http", "containerPort": 9898}],
                            "env": [{"name": f"VAR_{i}", "value": f"value-{i}"} for i in range(8)],
                            "resources": {"requests": {"cpu": "1m", "memory": "16Mi"}},
                        }
                    ]
                },
            },
        },
    }


def event(index: int, revision: int) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"podinfo-{index}.", "namespace": NAMESPACE},
        "involvedObject": {"kind": "Deployment", "name": f"podinfo-{index}",
                           "namespace": NAMESPACE, "apiVersion": "apps/v1"},
        "reason": "ReconciliationSucceeded",
        "message": f"Applied revision {revision}",
        "type": "Normal",
        "source": {"component": "bench"},
        "reportingComponent": "bench",
        "reportingInstance": "bench",
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "count": 1,
    }  # fmt: skip


async def one_object(client: KubeClient, index: int, revision: int) -> None:
    obj = deployment(index, revision)
    with attributed(key=f"{NAMESPACE}/podinfo-{index}", phase="apply"):
        await client.apply(DEPLOYMENT, obj, field_manager="bench", force=True, dry_run=True)
        await client.apply(DEPLOYMENT, obj, field_manager="bench", force=True)
        await client.get(DEPLOYMENT, f"podinfo-{index}", NAMESPACE)
        await client.merge_patch(
            DEPLOYMENT,
            f"podinfo-{index}",
            {"metadata": {"labels": {"bench/round": str(revision)}}},
            namespace=NAMESPACE,
        )
        await client.create(EVENT, event(index, revision))


async def one_round(client: KubeClient, objects: int, concurrent: int, revision: int) -> None:
    limit = asyncio.Semaphore(concurrent)

    async def bounded(index: int) -> None:
        async with limit:
            await one_object(client, index, revision)

    await asyncio.gather(*(bounded(i) for i in range(objects)))


@contextlib.contextmanager
def sampled(path: str | None) -> Iterator[None]:
    """py-spy on this process for the block's duration, when asked."""
    if not path:
        yield
        return
    beside = Path(sys.executable).parent / "py-spy"  # the bench env's, when not on PATH
    spy = subprocess.Popen(
        [str(beside) if beside.exists() else "py-spy", "record", "--gil", "-r", "100", "-f", "raw", "-o", path,
         "--pid", str(os.getpid())],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(1.0)  # attached before the first round
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="sluice-bench-") as tmp,
        ControlPlane(workdir=Path(tmp) / "cp") as plane,
    ):
        client = await KubeClient.connect(kubeconfig=str(plane.kubeconfig))
        client.observe(RequestMetrics("client-cost"))
        try:
            await create_namespace(client, NAMESPACE)
            await one_round(client, args.objects, args.concurrent, 0)  # warm: creates them all
            rows, per_1000 = [], []
            with sampled(args.py_spy):
                for revision in range(1, args.rounds + 1):
                    sent = client.request_count
                    cpu, wall = time.process_time(), time.perf_counter()
                    await one_round(client, args.objects, args.concurrent, revision)
                    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                    requests = client.request_count - sent
                    load = os.getloadavg()[0]
                    per_1000.append(1000 * cpu / requests)
                    rows.append([revision, requests, cpu, per_1000[-1], wall, load])
        finally:
            await client.close()
    print(table(["round", "requests", "CPU s", "CPU s / 1000 req", "wall s", "load 1m"], rows))
    print(f"\nmedian CPU-seconds per 1000 requests: {median(per_1000):.3f} "
          f"(min {min(per_1000):.3f}, max {max(per_1000):.3f}); "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")  # fmt: skip
    return {"rounds": rows, "cpu_seconds_per_1000_requests": median(per_1000)}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="e2e.bench client-cost", description=__doc__)
    parser.add_argument("--objects", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrent", type=int, default=20)
    parser.add_argument("--py-spy", default=None, help="write a raw py-spy profile here")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    write(args.out, "client-cost", asyncio.run(run(args)))
