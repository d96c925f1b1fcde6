"""Benchmark 1 (shared/spec/benchmarks.md): Mean Time To Production, Flux's MTTP shape.

N apps are published at once, each as its own source plus a Kustomization
that applies four objects (a Deployment scaled to zero, a ServiceAccount, a
Service, an Ingress), as in fluxcd/flux-benchmark: `wait: true`, `prune:
true`, `timeout: 1m`, `targetNamespace`, post-build substitution, and a
tenant service account with admin rights in the namespace only. Measured: from
creating all 2N objects until every source has an artifact and until every
Kustomization is Ready; each controller's peak memory (VmHWM); apply
throughput; API requests per Kustomization (the kustomize-controller's own
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

Usage: python -m e2e.bench mttp [--apps 100 500] [--sources oci git helm] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from e2e.bench.common import table, write
from sluice_cli.crds_command import all_crds
from sluice_envtest.controlplane import ControlPlane, die_with_parent, free_port
from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.harness import is_ready
from sluice_envtest.registry import OciRegistry
from sluice_envtest.workloads import simulated_rollouts
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.installing import install_crds
from sluice_runtime.kube.resources import NAMESPACE, SERVICE_ACCOUNT, ResourceType

OCIREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "ocirepositories", "OCIRepository")
GITREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")
KUSTOMIZATION = ResourceType("kustomize.toolkit.fluxcd.io", "v1", "kustomizations", "Kustomization")
ROLE_BINDING = ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")

HELMRELEASE = ResourceType("helm.toolkit.fluxcd.io", "v2", "helmreleases", "HelmRelease")
HELMREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "helmrepositories", "HelmRepository")
FLUX_V2_6_HELM = {100: "27s", 500: "2m10s", 1000: "5m12s"}
"""Flux v2.6 HelmRelease MTTP; its helm-controller peaked at 190-350 MiB."""

FLUX_V2_6 = {  # published figures, 16-core runner, kind with 3 nodes
    100: {"source": "24s", "kustomization": "28s", "source_mem": "38Mi", "ks_mem": "32Mi"},
    500: {"source": "43s", "kustomization": "2m2s", "source_mem": "65Mi", "ks_mem": "122Mi"},
    1000: {"source": "1m25s", "kustomization": "4m16s", "source_mem": "67Mi", "ks_mem": "175Mi"},
}

APP = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo-${INDEX}
spec:
  replicas: 0
  selector:
    matchLabels:
      app: podinfo-${INDEX}
  template:
    metadata:
      labels:
        app: podinfo-${INDEX}
    spec:
      serviceAccountName: podinfo-${INDEX}
      containers:
        - name: podinfo
          image: ghcr.io/stefanprodan/podinfo:6.5.3
          resources:
            requests:
              cpu: "${MCPU}"
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: podinfo-${INDEX}
---
apiVersion: v1
kind: Service
metadata:
  name: podinfo-${INDEX}
spec:
  selector:
    app: podinfo-${INDEX}
  ports:
    - name: http
      port: 9898
      protocol: TCP
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: podinfo-${INDEX}
spec:
  rules:
    - host: podinfo-${INDEX}.example.com
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service:
                name: podinfo-${INDEX}
                port:
                  number: 9898
"""


class Controller:
    """One controller process, with its peak memory read from /proc."""

    def __init__(self, name: str, module: str, argv: list[str], log: Path) -> None:
        self.name = name
        self.port = free_port()
        self.log = log
        self.handle = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "--health-addr", f"127.0.0.1:{self.port}",
             "--metrics-addr", f"127.0.0.1:{self.port}", "--log-level", "warning", *argv],
            stdout=self.handle, stderr=subprocess.STDOUT, preexec_fn=die_with_parent,
        )  # fmt: skip

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready")

    def peak_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def api_requests(self) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        found = re.search(r"^rest_client_requests_total\{[^}]*\} ([0-9.e+]+)$", text, re.MULTILINE)
        return float(found.group(1)) if found else float("nan")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.handle.close()


async def _all_ready(
    client: KubeClient, rt: ResourceType, ns: str, count: int, *, limit: float = 1800
) -> float:
    start = time.monotonic()
    while True:
        listed = await client.list(rt, namespace=ns)
        if sum(1 for o in listed.items if is_ready(o)) >= count:
            return time.monotonic() - start
        if time.monotonic() - start > limit:
            stuck = next(o for o in listed.items if not is_ready(o))
            raise RuntimeError(f"{rt.kind}s not ready after {limit}s, e.g. {stuck['status']}")
        await asyncio.sleep(0.5)


async def run_helm(apps: int, workdir: Path) -> dict[str, Any]:
    """N HelmReleases of one chart from one HelmRepository, until all are Ready."""
    from sluice_envtest.chartrepo import ChartRepository
    from sluice_envtest.harness import make_secret

    with ControlPlane(workdir=workdir / "cp") as plane:
        client = await KubeClient.connect(kubeconfig=str(plane.kubeconfig), qps=0)
        await install_crds(client, all_crds())
        ns = "benchmark"
        await client.create(
            NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        )
        kubeconfig = str(plane.kubeconfig)
        storage_port = free_port()
        source = Controller(
            "source-controller",
            "source_controller",
            ["--kubeconfig", kubeconfig, "--concurrent", "10", "--storage-path", str(workdir / "storage"),
             "--storage-addr", f"127.0.0.1:{storage_port}", "--storage-adv-addr", f"127.0.0.1:{storage_port}"],
            workdir / "source-controller.log",
        )  # fmt: skip
        helm = Controller(
            "helm-controller",
            "helm_controller",
            ["--kubeconfig", kubeconfig, "--concurrent", "10"],
            workdir / "helm-controller.log",
        )
        charts = ChartRepository(workdir / "charts", username="bench", password="bench-pw")
        charts.add("podinfo", "6.5.3")
        await charts.start()
        try:
            source.wait_ready()
            helm.wait_ready()
            await make_secret(client, ns, "charts", {"username": "bench", "password": "bench-pw"})
            await client.create(
                HELMREPO,
                {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "HelmRepository",
                 "metadata": {"name": "podinfo", "namespace": ns},
                 "spec": {"url": charts.url, "interval": "60m", "secretRef": {"name": "charts"}}},
            )  # fmt: skip
            start = time.monotonic()
            for i in range(apps):
                await client.create(
                    HELMRELEASE,
                    {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                     "metadata": {"name": f"podinfo-{i}", "namespace": ns},
                     "spec": {"interval": "60m", "timeout": "1m",
                              "chart": {"spec": {"chart": "podinfo", "version": "*",
                                                 "sourceRef": {"kind": "HelmRepository", "name": "podinfo"}}},
                              "values": {"greeting": f"app-{i}"}}},
                )  # fmt: skip
            created = time.monotonic() - start
            ready = await _all_ready(client, HELMRELEASE, ns, apps) + created
            return {
                "apps": apps,
                "source_kind": "helm",
                "create_seconds": created,
                "helmreleases_ready_seconds": ready,
                "source_controller_peak_mib": source.peak_mib(),
                "helm_controller_peak_mib": helm.peak_mib(),
            }
        finally:
            source.stop()
            helm.stop()
            await charts.stop()
            await client.close()


async def run_one(apps: int, kind: str, workdir: Path) -> dict[str, Any]:
    if kind == "helm":
        return await run_helm(apps, workdir)
    with ControlPlane(workdir=workdir / "cp") as plane:
        client = await KubeClient.connect(kubeconfig=str(plane.kubeconfig), qps=0)
        await install_crds(client, all_crds())
        ns = "benchmark"
        await client.create(
            NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        )
        await client.create(
            SERVICE_ACCOUNT,
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "flux", "namespace": ns},
            },
        )
        await client.create(
            ROLE_BINDING,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "flux", "namespace": ns},
                # `admin` is an aggregated ClusterRole, and aggregation is the
                # controller-manager's job, which this control plane lacks;
                # cluster-admin bound in one namespace grants the same there.
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "flux", "namespace": ns}],
            },
        )
        kubeconfig = str(plane.kubeconfig)
        storage_port = free_port()
        source = Controller(
            "source-controller",
            "source_controller",
            ["--kubeconfig", kubeconfig, "--concurrent", "10", "--storage-path", str(workdir / "storage"),
             "--storage-addr", f"127.0.0.1:{storage_port}", "--storage-adv-addr", f"127.0.0.1:{storage_port}"],
            workdir / "source-controller.log",
        )  # fmt: skip
        kustomize = Controller(
            "kustomize-controller",
            "kustomize_controller",
            ["--kubeconfig", kubeconfig, "--concurrent", "20"],
            workdir / "kustomize-controller.log",
        )
        servers: list[Any] = []
        try:
            source.wait_ready()
            kustomize.wait_ready()
            if kind == "oci":
                registry = OciRegistry(workdir=workdir / "registry")
                registry.start()
                servers.append(registry)
                registry.push_artifact("manifests/podinfo", "latest", files={"podinfo.yaml": APP})
                source_rt, source_kind = OCIREPO, "OCIRepository"
                source_spec: dict[str, Any] = {
                    "url": registry.oci_url("manifests/podinfo"),
                    "insecure": True,
                    "ref": {"tag": "latest"},
                }
            else:
                git = GitHttpServer(root=workdir / "git")
                git.start()
                servers.append(git)
                work = git.create_repo("podinfo")
                work.commit("podinfo", files={"podinfo.yaml": APP})
                work.push()
                source_rt, source_kind = GITREPO, "GitRepository"
                source_spec = {"url": git.url("podinfo"), "ref": {"branch": "main"}}
            requests_before = kustomize.api_requests()

            async with simulated_rollouts(client, namespace=ns, interval=0.5):
                start = time.monotonic()
                for i in range(apps):
                    await client.create(
                        source_rt,
                        {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": source_kind,
                         "metadata": {"name": f"podinfo-{i}", "namespace": ns},
                         "spec": {"interval": "60m", **source_spec}},
                    )  # fmt: skip
                    await client.create(
                        KUSTOMIZATION,
                        {
                            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                            "kind": "Kustomization",
                            "metadata": {"name": f"podinfo-{i}", "namespace": ns},
                            "spec": {
                                "sourceRef": {"kind": source_kind, "name": f"podinfo-{i}"},
                                "interval": "60m",
                                "retryInterval": "2m",
                                "path": "./",
                                "prune": True,
                                "wait": True,
                                "timeout": "1m",
                                "serviceAccountName": "flux",
                                "targetNamespace": ns,
                                "postBuild": {
                                    "substitute": {"INDEX": f"{i}app", "PODS": "1", "MCPU": "1m"}
                                },
                            },
                        },
                    )
                created = time.monotonic() - start
                sources_ready = await _all_ready(client, source_rt, ns, apps) + created
                ks_ready = await _all_ready(client, KUSTOMIZATION, ns, apps) + created
            requests = kustomize.api_requests() - requests_before
            return {
                "apps": apps,
                "source_kind": source_kind,
                "create_seconds": created,
                "sources_ready_seconds": sources_ready,
                "kustomizations_ready_seconds": ks_ready,
                "source_controller_peak_mib": source.peak_mib(),
                "kustomize_controller_peak_mib": kustomize.peak_mib(),
                "objects_applied": 4 * apps,
                "apply_objects_per_second": 4 * apps / ks_ready,
                "api_requests_per_kustomization": requests / apps,
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="e2e.bench mttp", description=__doc__)
    parser.add_argument("--apps", type=int, nargs="+", default=[100])
    parser.add_argument(
        "--sources", nargs="+", choices=["oci", "git", "helm"], default=["oci", "git"]
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    results = []
    for apps in args.apps:
        for kind in args.sources:
            print(f"running MTTP with {apps} apps from {kind} sources ...", flush=True)
            with tempfile.TemporaryDirectory(prefix="sluice-mttp-") as tmp:
                results.append(asyncio.run(run_one(apps, kind, Path(tmp))))
    helm_rows = [
        [r["apps"], _fmt_seconds(r["helmreleases_ready_seconds"]),
         FLUX_V2_6_HELM.get(r["apps"], "-"), f"{r['helm_controller_peak_mib']:.0f}Mi",
         "190-350Mi", f"{r['source_controller_peak_mib']:.0f}Mi"]
        for r in results if r["source_kind"] == "helm"
    ]  # fmt: skip
    results_ks = [r for r in results if r["source_kind"] != "helm"]
    rows = []
    for r in results_ks:
        flux = FLUX_V2_6.get(r["apps"], {})
        rows.append([
            r["apps"], r["source_kind"],
            _fmt_seconds(r["sources_ready_seconds"]), flux.get("source", "-"),
            _fmt_seconds(r["kustomizations_ready_seconds"]), flux.get("kustomization", "-"),
            f"{r['source_controller_peak_mib']:.0f}Mi", flux.get("source_mem", "-"),
            f"{r['kustomize_controller_peak_mib']:.0f}Mi", flux.get("ks_mem", "-"),
            f"{r['apply_objects_per_second']:.1f}", f"{r['api_requests_per_kustomization']:.1f}",
        ])  # fmt: skip
    if rows:
        print()
        print(table(
            ["N", "source", "sources ready", "Flux 2.6", "Kustomizations ready", "Flux 2.6",
             "source-ctrl peak", "Flux 2.6", "kustomize-ctrl peak", "Flux 2.6", "objects/s",
             "API req/ks"],
            rows,
        ))  # fmt: skip
    if helm_rows:
        print()
        print(table(
            ["N", "HelmReleases ready", "Flux 2.6", "helm-ctrl peak", "Flux 2.6",
             "source-ctrl peak"],
            helm_rows,
        ))  # fmt: skip
    print(f"\nmachine: {os.cpu_count()} cores, everything on one host; Flux: 16-core runner, kind")
    write(
        args.out,
        "mttp",
        {"results": results, "flux_v2_6": FLUX_V2_6, "flux_v2_6_helm": FLUX_V2_6_HELM},
    )
