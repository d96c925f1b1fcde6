"""Pytest fixtures for tests that claim controller behaviour: a real API server.

One control plane per test session (etcd + kube-apiserver on loopback, CRDs
installed from the models), one fresh namespace per test. With
`USE_EXISTING_CLUSTER=true` the tests use `$KUBECONFIG`'s cluster instead,
as envtest does. Tests using these fixtures are marked `e2e` automatically,
so `pytest -m "not e2e"` runs only the pure unit tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from sluice_envtest.controlplane import ControlPlane, env_kubeconfig

E2E_FIXTURES = {
    "cluster",
    "kube",
    "namespace",
    "second_cluster",
    # servers_plugin
    "git_http",
    "git_http_auth",
    "git_https",
    "git_service_api",
    "git_service_api_tls",
    "git_ssh",
    "oci_registry",
    "oci_registry_auth",
    "oci_registry_tls",
    "s3_server",
    "s3_server_tls",
}


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    server: str
    plane: ControlPlane | None

    def kubectl(self, *args: str) -> list[str]:
        return ["kubectl", "--kubeconfig", str(self.kubeconfig), *args]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)


async def _install_crds(kubeconfig: Path) -> None:
    from sluice_cli.crds_command import all_crds
    from sluice_runtime.kube.client import KubeClient
    from sluice_runtime.kube.installing import install_crds

    client = await KubeClient.connect(kubeconfig=str(kubeconfig))
    try:
        await install_crds(client, all_crds())
    finally:
        await client.close()


def _start_cluster(prefix: str, *, crds: bool) -> Iterator[Cluster]:
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    plane = ControlPlane(workdir=workdir)
    plane.start()
    try:
        if crds:
            asyncio.run(_install_crds(plane.kubeconfig))
        yield Cluster(plane.kubeconfig, plane.server, plane)
    finally:
        plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    existing = env_kubeconfig()
    if existing:
        asyncio.run(_install_crds(Path(existing)))
        yield Cluster(Path(existing), "", None)
        return
    yield from _start_cluster("sluice-test-cp-", crds=True)


@pytest.fixture(scope="session")
def second_cluster() -> Iterator[Cluster]:
    """Another, independent API server without CRDs (remote targets, missing-CRD errors)."""
    yield from _start_cluster("sluice-test-cp2-", crds=False)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def kube(cluster: Cluster) -> AsyncIterator[Any]:
    from sluice_runtime.kube.client import KubeClient

    client = await KubeClient.connect(kubeconfig=str(cluster.kubeconfig), qps=0)
    yield client
    await client.close()


@pytest_asyncio.fixture(loop_scope="session")
async def namespace(kube: Any, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    from sluice_runtime.kube.errors import KubeError
    from sluice_runtime.kube.resources import NAMESPACE

    slug = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = f"t-{slug}-{secrets.token_hex(3)}"
    await kube.create(
        NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    yield name
    if os.environ.get("SLUICE_KEEP_NAMESPACES"):
        return
    with contextlib.suppress(KubeError):
        await kube.delete(NAMESPACE, name)
