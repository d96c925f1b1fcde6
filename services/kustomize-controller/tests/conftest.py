"""The delivery pipeline under test: a Git server, the source-controller and the
kustomize-controller, both in-process with their production wiring, confined
to the test's namespace (objects they apply may live elsewhere).

A test gives the kustomize-controller flags of its own with
`@pytest.mark.parametrize("delivery", [Flags(...)], indirect=True)`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from kustomize_controller import __main__ as kustomize_main
from sluice_envtest.controlplane import free_port
from sluice_envtest.gitserver import GitHttpServer, WorkRepo
from sluice_envtest.harness import Observer, running_service
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime import app
from sluice_runtime.controller import ReconcileLog
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import EVENT, ResourceType

GITREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")
OCIREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "ocirepositories", "OCIRepository")
KUSTOMIZATION = ResourceType("kustomize.toolkit.fluxcd.io", "v1", "kustomizations", "Kustomization")
DEPLOYMENT = ResourceType("apps", "v1", "deployments", "Deployment")
CONFIG_MAP = ResourceType("", "v1", "configmaps", "ConfigMap")
SERVICE = ResourceType("", "v1", "services", "Service")
NAMESPACE = ResourceType("", "v1", "namespaces", "Namespace", namespaced=False)
SERVICE_ACCOUNT = ResourceType("", "v1", "serviceaccounts", "ServiceAccount")
ROLE = ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDING = ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")


async def until(reached: Callable[[], bool], failure: str, timeout: float = 30.0) -> None:
    """Wait until `reached()` is true, polling every 50 ms; fail naming `failure`."""
    deadline = time.monotonic() + timeout
    while not reached():
        assert time.monotonic() < deadline, failure
        await asyncio.sleep(0.05)


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


TEST_LABEL = "sluice.test/delivery"
"""Marks the sources and Kustomizations of one test (value: its namespace)."""


@dataclass(frozen=True)
class Flags:
    """How one test runs the controllers (the `delivery` fixture's param)."""

    kustomize: tuple[str, ...] = ()
    """Extra kustomize-controller flags."""
    cluster_wide: bool = False
    """Watch every namespace, reconciling only objects labelled with TEST_LABEL (so that
    sources in another namespace are seen), instead of confining both controllers."""


@dataclass
class Delivery:
    kube: KubeClient
    namespace: str
    git: GitHttpServer
    observe: Observer
    source: app.Runtime
    kustomize: app.Runtime
    reconciles: ReconcileLog = field(default_factory=ReconcileLog)
    """Every Kustomization reconcile, per key."""

    def repo(self, name: str) -> WorkRepo:
        return self.git.create_repo(f"{name}-{self.namespace}")

    def url(self, name: str) -> str:
        return self.git.url(f"{name}-{self.namespace}")

    def _metadata(self, name: str) -> JSON:
        return {"name": name, "labels": {TEST_LABEL: self.namespace}}

    async def git_repository(
        self, name: str, *, repo: str | None = None, namespace: str | None = None, **spec: Any
    ) -> JSON:
        body = {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "GitRepository",
            "metadata": self._metadata(name),
            "spec": {
                "url": self.url(repo or name),
                "interval": "1h",
                "ref": {"branch": "main"},
                **spec,
            },
        }
        return await self.kube.create(GITREPO, body, namespace=namespace or self.namespace)

    async def oci_repository(self, name: str, *, url: str, **spec: Any) -> JSON:
        body = {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "OCIRepository",
            "metadata": self._metadata(name),
            "spec": {"url": url, "interval": "1h", **spec},
        }
        return await self.kube.create(OCIREPO, body, namespace=self.namespace)

    async def kustomization(self, name: str, *, source: str, path: str = "./", **spec: Any) -> JSON:
        body = {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": self._metadata(name),
            "spec": {
                "interval": "1h",
                "path": path,
                "prune": True,
                "sourceRef": {"kind": "GitRepository", "name": source},
                **spec,
            },
        }
        return await self.kube.create(KUSTOMIZATION, body, namespace=self.namespace)

    async def events(self, name: str, **fields: str) -> list[JSON]:
        """The Kubernetes Events of Kustomization `name` matching `fields` (reason, type...)."""
        listed = await self.kube.list(EVENT, namespace=self.namespace)
        return [
            e
            for e in listed.items
            if e["involvedObject"].get("kind") == "Kustomization"
            and e["involvedObject"].get("name") == name
            and all(e.get(k) == v for k, v in fields.items())
        ]

    async def wait_event(self, name: str, *, timeout: float = 10.0, **fields: str) -> JSON:
        """The first Event of Kustomization `name` matching `fields`, once it is written."""
        deadline = time.monotonic() + timeout
        while not (found := await self.events(name, **fields)):
            if time.monotonic() > deadline:
                raise AssertionError(f"Kustomization/{name}: no event {fields} in {timeout}s")
            await asyncio.sleep(0.1)
        return found[0]

    def controller(self) -> Any:
        return self.kustomize.controllers[0]


@pytest_asyncio.fixture(loop_scope="session")
async def delivery(
    cluster: Cluster,
    kube: KubeClient,
    namespace: str,
    git_http: GitHttpServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> AsyncIterator[Delivery]:
    from source_controller import __main__ as source_main

    flags: Flags = getattr(request, "param", Flags())
    port = free_port()
    storage = [
        "--storage-path", str(tmp_path / "storage"),
        "--storage-addr", f"127.0.0.1:{port}",
        "--storage-adv-addr", f"127.0.0.1:{port}",
    ]  # fmt: skip
    confined: str | None = namespace
    selector: list[str] = []
    if flags.cluster_wide:
        confined, selector = None, ["--watch-label-selector", f"{TEST_LABEL}={namespace}"]
    kubeconfig = str(cluster.kubeconfig)
    reconciles = ReconcileLog()
    async with (
        running_service(
            source_main, kubeconfig=kubeconfig, namespace=confined, argv=[*storage, *selector]
        ) as src,
        running_service(
            kustomize_main,
            kubeconfig=kubeconfig,
            namespace=confined,
            argv=["--requeue-dependency", "1s", *selector, *flags.kustomize],
            observer=reconciles,
        ) as ks,
    ):
        yield Delivery(kube, namespace, git_http, Observer(kube, namespace), src, ks, reconciles)


async def make_tenant(
    d: Delivery, verbs: list[str], resources: tuple[str, ...] = ("configmaps",)
) -> None:
    """ServiceAccount `tenant`, allowed `verbs` on `resources` of the test's namespace only."""
    ns = d.namespace
    await d.kube.create(
        SERVICE_ACCOUNT,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "tenant", "namespace": ns},
        },
    )
    await d.kube.create(
        ROLE,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "tenant", "namespace": ns},
            "rules": [{"apiGroups": [""], "resources": list(resources), "verbs": verbs}],
        },
    )
    await d.kube.create(
        ROLE_BINDING,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "tenant", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}],
        },
    )
