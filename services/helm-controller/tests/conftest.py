"""Helm delivery under test: a loopback chart repository, the source-controller and
the helm-controller, both in-process with their production wiring and confined
to the test's namespace; helm itself talks to the test's API server.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest_asyncio

from sluice_envtest.chartrepo import ChartRepository
from sluice_envtest.harness import Observer, make_secret, running_service, source_storage_argv
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime import app
from sluice_runtime.helming import helm_binary
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import EVENT, ResourceType

HELMREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "helmrepositories", "HelmRepository")
HELMCHART = ResourceType("source.toolkit.fluxcd.io", "v1", "helmcharts", "HelmChart")
HELMRELEASE = ResourceType("helm.toolkit.fluxcd.io", "v2", "helmreleases", "HelmRelease")
CONFIG_MAP = ResourceType("", "v1", "configmaps", "ConfigMap")


@dataclass
class HelmDelivery:
    kube: KubeClient
    namespace: str
    charts: ChartRepository
    observe: Observer
    kubeconfig: str
    helm_controller: app.Runtime
    home: Path

    async def helm_repository(self, name: str = "charts") -> None:
        await make_secret(
            self.kube,
            self.namespace,
            f"{name}-auth",
            {"username": "charts", "password": "s3cret-pw"},
        )
        await self.kube.create(
            HELMREPO,
            {
                "apiVersion": "source.toolkit.fluxcd.io/v1",
                "kind": "HelmRepository",
                "metadata": {"name": name},
                "spec": {
                    "url": self.charts.url,
                    "interval": "1h",
                    "secretRef": {"name": f"{name}-auth"},
                },
            },
            namespace=self.namespace,
        )

    async def helm_release(
        self, name: str, *, chart: str = "app", version: str = "*", **spec: Any
    ) -> JSON:
        """A release of `chart` from the HelmRepository `charts` (see helm_repository)."""
        source = {"kind": "HelmRepository", "name": "charts"}
        template = {"spec": {"chart": chart, "version": version, "sourceRef": source}}
        return await self.release(name, chart=template, **spec)

    async def release_by_ref(self, name: str, kind: str, source: str, **spec: Any) -> JSON:
        """A release of the chart a HelmChart or OCIRepository `source` holds (chartRef)."""
        return await self.release(name, chartRef={"kind": kind, "name": source}, **spec)

    async def release(self, name: str, **spec: Any) -> JSON:
        body = {
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {"name": name},
            "spec": {"interval": "1h", **spec},
        }
        return await self.kube.create(HELMRELEASE, body, namespace=self.namespace)

    def helm(self, *args: str) -> Any:
        """`helm <args> -o json` as a person would run it against the test cluster."""
        done = subprocess.run(
            [str(helm_binary()), *args, "--namespace", self.namespace, "-o", "json"],
            capture_output=True,
            text=True,
            check=False,
            env={"HOME": str(self.home), "KUBECONFIG": self.kubeconfig, "PATH": "/usr/bin:/bin"},
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    async def events(self, name: str, **fields: str) -> list[JSON]:
        listed = await self.kube.list(EVENT, namespace=self.namespace)
        found = [
            e
            for e in listed.items
            if e["involvedObject"].get("kind") == "HelmRelease"
            and e["involvedObject"].get("name") == name
            and all(e.get(k) == v for k, v in fields.items())
        ]
        return sorted(found, key=lambda e: (e.get("firstTimestamp") or "", e["metadata"]["name"]))

    async def wait_event(self, name: str, *, timeout: float = 10.0, **fields: str) -> JSON:
        deadline = time.monotonic() + timeout
        while not (found := await self.events(name, **fields)):
            if time.monotonic() > deadline:
                raise AssertionError(f"HelmRelease/{name}: no event {fields} in {timeout}s")
            await asyncio.sleep(0.1)
        return found[-1]


@pytest_asyncio.fixture(loop_scope="session")
async def helm_delivery(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[HelmDelivery]:
    from helm_controller import __main__ as helm_main
    from source_controller import __main__ as source_main

    charts = ChartRepository(tmp_path / "repo", username="charts", password="s3cret-pw")
    await charts.start()
    home = tmp_path / "home"
    home.mkdir()
    try:
        async with (
            running_service(
                source_main,
                kubeconfig=str(cluster.kubeconfig),
                namespace=namespace,
                argv=source_storage_argv(tmp_path / "storage"),
            ),
            running_service(
                helm_main,
                kubeconfig=str(cluster.kubeconfig),
                namespace=namespace,
                argv=["--requeue-dependency", "1s"],
            ) as hc,
        ):  # fmt: skip
            yield HelmDelivery(
                kube,
                namespace,
                charts,
                Observer(kube, namespace),
                str(cluster.kubeconfig),
                hc,
                home,
            )
    finally:
        await charts.stop()
