"""What one source's first reconcile costs the source-controller, load-independently.

The MTTP shape's sources alone (issue 19): N OCIRepositories (or
GitRepositories) of one artifact, created at once, reconciled by a
source-controller process with nothing else of Sluice running. Measured in
units a busy machine does not distort: the process's CPU-seconds (utime +
stime from /proc) per source (and the API server's, etcd's and the
registry's for the same sources), its API requests per source by phase and
verb, and the registry's (or Git server's) requests per source from its
access log; the wall time until all are Ready is printed next to the load
average, for what it is worth. With `--py-spy FILE` the run is sampled by
py-spy (`pip install py-spy` into the bench env), raw format, only the thread
holding the GIL (Python's CPU), for a flame graph or `sort | uniq`.

Usage: python -m e2e.bench source-cost [--apps 1000] [--sources oci git]
       [--concurrent 10] [--py-spy out.txt] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from e2e.bench import profiling
from e2e.bench.cluster import create_namespace
from e2e.bench.common import table, write
from e2e.fleet import APP, Origin, all_ready, git_origin, oci_origin, source_controller
from sluice_cli.crds_command import all_crds
from sluice_envtest.controlplane import ControlPlane
from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.measuring import cpu_times
from sluice_envtest.registry import OciRegistry
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.installing import install_crds
from sluice_runtime.kube.resources import EVENT

_ACCESS = re.compile(r'"(GET|HEAD|POST|PUT|PATCH|DELETE) (/\S*) HTTP/')


def _server_requests(log: Path) -> dict[str, int]:
    """The access log's requests by method and kind of path (manifests, blobs, ...)."""
    counts: dict[str, int] = {}
    for method, path in _ACCESS.findall(log.read_text(errors="replace")):
        parts = path.split("?")[0].strip("/").split("/")
        # /v2/<repository>/manifests/<ref>, /blobs/<digest>, /tags/list: the
        # repository's own name may hold any of these words.
        what = parts[-2] if len(parts) > 2 else parts[-1]
        key = f"{method} {what}"
        counts[key] = counts.get(key, 0) + 1
    return counts


async def _events_sent(client: KubeClient, ns: str, limit: float = 60.0) -> None:
    """Until the Events recorded (sent in the background, behind the reconciles) are
    all out: their count in the namespace stops growing. Asked of the API server,
    not of the controller's /metrics, whose rendering would add to its CPU."""
    deadline = time.monotonic() + limit
    last = -1
    while time.monotonic() < deadline:
        sent = len((await client.list(EVENT, namespace=ns)).items)
        if sent == last:
            return
        last = sent
        await asyncio.sleep(2)


async def run_one(apps: int, kind: str, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    with ControlPlane(workdir=workdir / "cp") as plane:
        client = await KubeClient.connect(kubeconfig=str(plane.kubeconfig), qps=0)
        await install_crds(client, all_crds())
        ns = "benchmark"
        await create_namespace(client, ns)
        source = source_controller(
            str(plane.kubeconfig), workdir, concurrent=args.concurrent, extra=["--profile-phases"]
        )
        server: Any
        origin: Origin
        try:
            source.wait_ready()
            if kind == "oci":
                server = OciRegistry(workdir=workdir / "registry")
                server.start()
                origin = oci_origin(server)
                log = server.log_file
            else:
                server = GitHttpServer(root=workdir / "git")
                server.start()
                origin = git_origin(server)
                log = Path(os.devnull)
            origin.publish({"podinfo.yaml": APP})
            served_before = _server_requests(log)
            cpu_before, _ = profiling.cpu_seconds(source)
            # The rest of the machine's work for the same sources (the API server
            # answers the controller's and the benchmark's requests alike).
            others = {"kube-apiserver": plane.pid("kube-apiserver"), "etcd": plane.pid("etcd")}
            if kind == "oci" and server.pid is not None:
                others["registry"] = server.pid
            others_before = {k: sum(cpu_times(pid)) for k, pid in others.items()}
            spy = None
            if args.py_spy:
                spy = await asyncio.create_subprocess_exec(
                    "py-spy", "record", "-p", str(source.proc.pid), "-o", args.py_spy,
                    "--format", "raw", "--rate", "50", "--nonblocking", "--gil",
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
                await asyncio.sleep(1)
            start = time.monotonic()
            limit = asyncio.Semaphore(32)

            async def create(i: int) -> None:
                async with limit:
                    await client.create(
                        origin.rt,
                        {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": origin.kind,
                         "metadata": {"name": f"podinfo-{i}", "namespace": ns},
                         "spec": {"interval": "60m", **origin.spec}},
                    )  # fmt: skip

            await asyncio.gather(*(create(i) for i in range(apps)))
            await all_ready(client, origin.rt, ns, apps)
            ready = time.monotonic() - start
            await _events_sent(client, ns)
            cpu = profiling.cpu_seconds(source)[0] - cpu_before
            others_cpu = {k: sum(cpu_times(pid)) - others_before[k] for k, pid in others.items()}
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its samples on SIGINT
                await asyncio.wait_for(spy.wait(), 60)
            served_after = _server_requests(log)
            phases = profiling.profile({"source": source})
            requests: dict[str, float] = {}
            for row in phases.rows:
                for verb, count in row.requests.items():
                    requests[f"{row.phase} {verb}"] = count / apps
            served = {
                k: (served_after.get(k, 0) - served_before.get(k, 0)) / apps for k in served_after
            }
            return {
                "apps": apps,
                "source_kind": origin.kind,
                "concurrent": args.concurrent,
                "cpu_seconds_per_source": cpu / apps,
                "others_cpu_seconds_per_source": {k: v / apps for k, v in others_cpu.items()},
                "api_requests_per_source": sum(requests.values()),
                "api_requests_per_source_by_phase": requests,
                "server_requests_per_source": {k: v for k, v in served.items() if v},
                "ready_seconds": ready,
                "queue_wait_seconds": phases.queue_wait["source"],
                "source_controller_peak_mib": source.peak_mib(),
                "load_average": os.getloadavg(),
                "profile": phases.as_json(),
                "profile_table": profiling.profile_table(phases, apps),
            }
        finally:
            source.stop()
            if "server" in locals():
                server.stop()
            await client.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="e2e.bench source-cost", description=__doc__)
    parser.add_argument("--apps", type=int, nargs="+", default=[1000])
    parser.add_argument("--sources", nargs="+", choices=["oci", "git"], default=["oci"])
    parser.add_argument("--concurrent", type=int, default=10)
    parser.add_argument("--py-spy", default=None, help="py-spy raw samples written here")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    results = []
    for apps in args.apps:
        for kind in args.sources:
            print(f"{apps} {kind} sources, source-controller alone ...", flush=True)
            with tempfile.TemporaryDirectory(prefix="sluice-source-cost-") as tmp:
                results.append(asyncio.run(run_one(apps, kind, Path(tmp), args)))
    rows = []
    for r in results:
        phases = ", ".join(
            f"{k} {v:.2f}" for k, v in sorted(r["api_requests_per_source_by_phase"].items())
        )
        served = ", ".join(
            f"{k} {v:.2f}" for k, v in sorted(r["server_requests_per_source"].items())
        )
        others = " ".join(
            f"{k} {v * 1000:.1f}" for k, v in r["others_cpu_seconds_per_source"].items()
        )
        rows.append([
            r["apps"], r["source_kind"], r["concurrent"],
            f"{r['cpu_seconds_per_source'] * 1000:.1f}", others,
            f"{r['api_requests_per_source']:.2f} ({phases})", served or "-",
            f"{r['ready_seconds']:.1f}", f"{r['queue_wait_seconds']:.0f}",
            f"{r['source_controller_peak_mib']:.0f}Mi",
            "{:.1f}/{:.1f}/{:.1f}".format(*r["load_average"]),
        ])  # fmt: skip
    print(table(
        ["N", "source", "workers", "CPU ms/source", "others' CPU ms/source", "API requests/source", "server requests/source",
         "all Ready s", "queue wait s", "peak", "load avg"],
        rows,
    ))  # fmt: skip
    for r in results:
        headers, lines = r["profile_table"]
        print(f"\nN={r['apps']} {r['source_kind']}, per phase (summed over reconciles):")
        print(table(headers, lines))
    write(args.out, "source-cost", {"results": results})
