"""A source-controller running in-process, wired exactly as `source-controller` is.

The controller watches only the test's namespace and stores artifacts in
the test's temporary directory; its file server listens on a free loopback
port, which is also the advertised address in artifact URLs.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest_asyncio

from sluice_envtest.controlplane import free_port
from sluice_envtest.harness import Observer, running_service
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime import app
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import ResourceType
from source_controller import __main__ as source_main

GITREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")
OCIREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "ocirepositories", "OCIRepository")


class SourceController(Observer):
    """The running controller, its storage, and the Observer's waits."""

    def __init__(
        self,
        runtime: app.Runtime,
        storage: Path,
        storage_addr: str,
        client: KubeClient,
        namespace: str,
    ) -> None:
        super().__init__(client, namespace)
        self.runtime = runtime
        self.storage = storage
        self.storage_addr = storage_addr

    async def wait_failed(self, rt: ResourceType, name: str, reason: str, **kw: Any) -> JSON:
        return await self.wait_reason(rt, name, reason, **kw)


async def download(url: str) -> bytes:
    async with aiohttp.ClientSession() as session, session.get(url) as answer:
        assert answer.status == 200, f"{url}: {answer.status}"
        return await answer.read()


def tar_members(data: bytes) -> dict[str, bytes]:
    """Regular files of a .tar.gz by name."""
    files = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for member in archive.getmembers():
            if member.isfile():
                extracted = archive.extractfile(member)
                assert extracted is not None
                files[member.name] = extracted.read()
    return files


def gitrepo(name: str, url: str, **spec: Any) -> JSON:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": name},
        "spec": {"url": url, "interval": "10m", **spec},
    }


def ocirepo(name: str, url: str, **spec: Any) -> JSON:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "OCIRepository",
        "metadata": {"name": name},
        "spec": {"url": url, "interval": "10m", **spec},
    }


@pytest_asyncio.fixture(loop_scope="session")
async def source_controller(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[SourceController]:
    port = free_port()
    storage = tmp_path / "storage"
    async with running_service(
        source_main,
        kubeconfig=str(cluster.kubeconfig),
        namespace=namespace,
        argv=[
            "--storage-path", str(storage),
            "--storage-addr", f"127.0.0.1:{port}",
            "--storage-adv-addr", f"127.0.0.1:{port}",
            "--artifact-retention-ttl", "0s",
            "--artifact-retention-records", "1",
        ],
    ) as runtime:  # fmt: skip
        yield SourceController(runtime, storage, f"127.0.0.1:{port}", kube, namespace)
