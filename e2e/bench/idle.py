"""Idle memory: every controller's resident memory once started, with nothing to reconcile.

Each of the seven controllers starts as its own process (`e2e.fleet.Controller`)
against an empty local control plane with every CRD installed; once its
`/readyz` answers (every informer has listed) and it has sat idle a moment,
its VmRSS is read. This is the floor the MTTP peaks stand on: what imports,
the runtime and empty caches cost before the first object arrives.

Usage: python -m e2e.bench idle [--settle SECONDS] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from e2e.bench.cluster import rss_mib
from e2e.bench.common import table, write
from e2e.fleet import Controller, kustomize_controller, source_controller
from sluice_cli.crds_command import all_crds
from sluice_envtest.controlplane import ControlPlane, free_port
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.installing import install_crds


def controllers(kubeconfig: str, workdir: Path) -> list[Controller]:
    """All seven, on ports of their own (several benchmarks may share this machine)."""
    plain = ["--kubeconfig", kubeconfig]

    def one(name: str, extra: list[str] | None = None) -> Controller:
        module = name.replace("-", "_")
        return Controller(name, module, [*plain, *(extra or [])], workdir / f"{name}.log")

    events, receiver = free_port(), free_port()
    return [
        source_controller(kubeconfig, workdir),
        kustomize_controller(kubeconfig, workdir),
        one("helm-controller"),
        one(
            "notification-controller",
            ["--events-addr", f"127.0.0.1:{events}", "--receiver-addr", f"127.0.0.1:{receiver}"],
        ),
        one("gating-controller"),
        one("resourceset-controller"),
        one("application-controller"),
    ]


async def run(workdir: Path, settle: float) -> dict[str, float]:
    with ControlPlane(workdir=workdir / "cp") as plane:
        client = await KubeClient.connect(kubeconfig=str(plane.kubeconfig), qps=0)
        await install_crds(client, all_crds())
        await client.close()
        started = controllers(str(plane.kubeconfig), workdir)
        try:
            for controller in started:
                controller.wait_ready(timeout=120)
            await asyncio.sleep(settle)
            return {c.name: rss_mib(c) for c in started}
        finally:
            for controller in started:
                controller.stop()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m e2e.bench idle")
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sluice-idle-") as tmp:
        measured = asyncio.run(run(Path(tmp), args.settle))
    rows = [[name, f"{mib:.1f}"] for name, mib in measured.items()]
    print(table(["controller", "idle RSS MiB"], rows))
    write(args.out, "idle", {"idle_rss_mib": measured})
