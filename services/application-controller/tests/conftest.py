"""KubeSphere Applications under test: a Git server, a chart repository, and the
source-, kustomize-, helm- and application-controllers in-process with their
production wiring, confined to the test's namespace (what they deploy may
live elsewhere, or on the second control plane).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest_asyncio
import yaml

from sluice_envtest.chartrepo import ChartRepository
from sluice_envtest.gitserver import GitHttpServer, WorkRepo
from sluice_envtest.harness import (
    Observer,
    make_git_repository,
    running_service,
    source_storage_argv,
)
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime import app
from sluice_runtime.helming import helm_binary
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import EVENT, NAMESPACE, ResourceType

APPLICATION = ResourceType("gitops.kubesphere.io", "v1alpha1", "applications", "Application")
HELMREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "helmrepositories", "HelmRepository")
HELMCHART = ResourceType("source.toolkit.fluxcd.io", "v1", "helmcharts", "HelmChart")
HELMRELEASE = ResourceType("helm.toolkit.fluxcd.io", "v2", "helmreleases", "HelmRelease")
KUSTOMIZATION = ResourceType("kustomize.toolkit.fluxcd.io", "v1", "kustomizations", "Kustomization")
CONFIG_MAP = ResourceType("", "v1", "configmaps", "ConfigMap")


@dataclass
class Fleet:
    kube: KubeClient
    namespace: str
    git: GitHttpServer
    charts: ChartRepository
    observe: Observer
    cluster: Cluster
    home: Path
    controller: app.Runtime

    def repo(self, name: str) -> WorkRepo:
        return self.git.create_repo(f"{name}-{self.namespace}")

    async def git_repository(self, name: str) -> None:
        url = self.git.url(f"{name}-{self.namespace}")
        await make_git_repository(self.kube, self.namespace, name, url)

    async def apply_yaml(self, text: str) -> JSON:
        """Create an Application from its manifest, as `kubectl create -f` would."""
        body = yaml.safe_load(text)
        body["metadata"]["namespace"] = self.namespace
        return await self.kube.create(APPLICATION, body, namespace=self.namespace)

    async def kubectl(self, *args: str, stdin: str | None = None) -> str:
        """kubectl against the test's namespace, off the event loop the controllers run on."""
        done = await asyncio.to_thread(
            subprocess.run,
            self.cluster.kubectl(*args, "--namespace", self.namespace),
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def helm_list(self, kubeconfig: Path, namespace: str) -> list[JSON]:
        """`helm list -o json` as a person would run it against a cluster."""
        done = subprocess.run(
            [str(helm_binary()), "list", "--namespace", namespace, "-o", "json"],
            capture_output=True,
            text=True,
            check=False,
            env={"HOME": str(self.home), "KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin"},
        )
        assert done.returncode == 0, done.stderr
        found: list[JSON] = json.loads(done.stdout)
        return found

    async def events(self, name: str) -> list[JSON]:
        listed = await self.kube.list(EVENT, namespace=self.namespace)
        return [
            e
            for e in listed.items
            if e["involvedObject"].get("kind") == "Application"
            and e["involvedObject"].get("name") == name
        ]


@pytest_asyncio.fixture(loop_scope="session")
async def fleet(
    cluster: Cluster, kube: KubeClient, namespace: str, git_http: GitHttpServer, tmp_path: Path
) -> AsyncIterator[Fleet]:
    from application_controller import __main__ as application_main
    from helm_controller import __main__ as helm_main
    from kustomize_controller import __main__ as kustomize_main
    from source_controller import __main__ as source_main

    charts = ChartRepository(tmp_path / "repo")
    await charts.start()
    home = tmp_path / "home"
    home.mkdir()
    kubeconfig = str(cluster.kubeconfig)
    try:
        async with (
            running_service(
                source_main, kubeconfig=kubeconfig, namespace=namespace,
                argv=source_storage_argv(tmp_path / "storage"),
            ),
            running_service(
                kustomize_main, kubeconfig=kubeconfig, namespace=namespace,
                argv=["--requeue-dependency", "1s"],
            ),
            running_service(
                helm_main, kubeconfig=kubeconfig, namespace=namespace,
                argv=["--requeue-dependency", "1s"],
            ),
            running_service(
                application_main, kubeconfig=kubeconfig, namespace=namespace,
                argv=["--requeue-not-ready", "1s"],
            ) as controller,
        ):  # fmt: skip
            yield Fleet(
                kube,
                namespace,
                git_http,
                charts,
                Observer(kube, namespace),
                cluster,
                home,
                controller,
            )
    finally:
        await charts.stop()


async def remote_namespace(second: Cluster, name: str) -> KubeClient:
    """A client of the second control plane, with namespace `name` created there."""
    remote = await KubeClient.connect(kubeconfig=str(second.kubeconfig))
    await remote.create(
        NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return remote


def status_of(obj: JSON) -> Any:
    return obj.get("status") or {}
