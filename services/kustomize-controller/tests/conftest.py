"""The delivery pipeline under test: a Git server, the source-controller and the
kustomize-controller, both in-process with their production wiring, confined
to the test's namespace (objects they apply may live elsewhere)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest_asyncio

from kustomize_controller import __main__ as kustomize_main
from sluice_envtest.controlplane import free_port
from sluice_envtest.gitserver import GitHttpServer, WorkRepo
from sluice_envtest.harness import Observer, running_service
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime import app
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import ResourceType

GITREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")
KUSTOMIZATION = ResourceType("kustomize.toolkit.fluxcd.io", "v1", "kustomizations", "Kustomization")
DEPLOYMENT = ResourceType("apps", "v1", "deployments", "Deployment")
CONFIG_MAP = ResourceType("", "v1", "configmaps", "ConfigMap")
SERVICE = ResourceType("", "v1", "services", "Service")
NAMESPACE = ResourceType("", "v1", "namespaces", "Namespace", namespaced=False)


def config_map(name: str, namespace: str | None = None, **data: str) -> str:
    ns = f"\n  namespace: {namespace}" if namespace else ""
    body = "".join(f"\n  {k}: {v!r}" for k, v in data.items()) or " {}"
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}{ns}\ndata:{body}\n"


def deployment(name: str, namespace: str | None = None, *, image: str = "nginx:1.25") -> str:
    ns = f"\n  namespace: {namespace}" if namespace else ""
    return f"""apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}{ns}
spec:
  replicas: 1
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
        - name: app
          image: {image}
"""


def namespace_doc(name: str) -> str:
    return f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n"


@dataclass
class Delivery:
    kube: KubeClient
    namespace: str
    git: GitHttpServer
    observe: Observer
    source: app.Runtime
    kustomize: app.Runtime

    def repo(self, name: str) -> WorkRepo:
        return self.git.create_repo(f"{name}-{self.namespace}")

    def url(self, name: str) -> str:
        return self.git.url(f"{name}-{self.namespace}")

    async def git_repository(self, name: str, *, repo: str | None = None, **spec: Any) -> JSON:
        body = {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "GitRepository",
            "metadata": {"name": name},
            "spec": {
                "url": self.url(repo or name),
                "interval": "1h",
                "ref": {"branch": "main"},
                **spec,
            },
        }
        return await self.kube.create(GITREPO, body, namespace=self.namespace)

    async def kustomization(self, name: str, *, source: str, path: str = "./", **spec: Any) -> JSON:
        body = {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": name},
            "spec": {
                "interval": "1h",
                "path": path,
                "prune": True,
                "sourceRef": {"kind": "GitRepository", "name": source},
                **spec,
            },
        }
        return await self.kube.create(KUSTOMIZATION, body, namespace=self.namespace)

    def controller(self) -> Any:
        return self.kustomize.controllers[0]


@pytest_asyncio.fixture(loop_scope="session")
async def delivery(
    cluster: Cluster, kube: KubeClient, namespace: str, git_http: GitHttpServer, tmp_path: Path
) -> AsyncIterator[Delivery]:
    from source_controller import __main__ as source_main

    port = free_port()
    storage = [
        "--storage-path", str(tmp_path / "storage"),
        "--storage-addr", f"127.0.0.1:{port}",
        "--storage-adv-addr", f"127.0.0.1:{port}",
    ]  # fmt: skip
    kubeconfig = str(cluster.kubeconfig)
    async with (
        running_service(
            source_main, kubeconfig=kubeconfig, namespace=namespace, argv=storage
        ) as src,
        running_service(
            kustomize_main,
            kubeconfig=kubeconfig,
            namespace=namespace,
            argv=["--requeue-dependency", "1s"],
        ) as ks,
    ):
        yield Delivery(kube, namespace, git_http, Observer(kube, namespace), src, ks)
