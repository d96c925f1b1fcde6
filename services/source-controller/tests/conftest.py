"""A source-controller running in-process, wired exactly as `source-controller` is.

The controller watches only the test's namespace and stores artifacts in
the test's temporary directory; its file server listens on a free loopback
port, which is also the advertised address in artifact URLs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import tarfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest_asyncio

from sluice_envtest.controlplane import free_port
from sluice_envtest.gitserver import GitHttpServer, WorkRepo
from sluice_envtest.harness import Observer, running_service
from sluice_envtest.pytest_plugin import Cluster
from sluice_envtest.sshserver import SshGitServer
from sluice_runtime import app
from sluice_runtime.controller import ReconcileLog
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import EVENT, ResourceType
from source_controller import __main__ as source_main

GITREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")
OCIREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "ocirepositories", "OCIRepository")

MANIFEST = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  k: v\n"


class SourceController(Observer):
    """The running controller, its storage, and the Observer's waits."""

    def __init__(
        self,
        runtime: app.Runtime,
        storage: Path,
        storage_addr: str,
        client: KubeClient,
        namespace: str,
        reconciles: ReconcileLog,
    ) -> None:
        super().__init__(client, namespace)
        self.runtime = runtime
        self.reconciles = reconciles
        """Every reconcile the controllers ran, per key."""
        self.storage = storage
        self.storage_addr = storage_addr

    async def wait_failed(self, rt: ResourceType, name: str, reason: str, **kw: Any) -> JSON:
        return await self.wait_reason(rt, name, reason, **kw)

    async def events(self, name: str, reason: str | None = None) -> list[JSON]:
        """Events about the object `name` (with `reason`, if given), oldest first."""
        found = [
            e
            for e in (await self.client.list(EVENT, namespace=self.namespace)).items
            if e["involvedObject"]["name"] == name and reason in (None, e["reason"])
        ]
        return sorted(found, key=lambda e: (e.get("firstTimestamp") or "", e["metadata"]["name"]))

    async def wait_events(
        self,
        name: str,
        check: Callable[[list[JSON]], bool],
        *,
        reason: str | None = None,
        timeout: float = 30.0,
    ) -> list[JSON]:
        """Poll `events(name, reason)` until `check` accepts them (events are sent in the background)."""
        deadline = time.monotonic() + timeout
        while True:
            events = await self.events(name, reason)
            if check(events):
                return events
            assert time.monotonic() < deadline, f"events of {name} not reached: {events}"
            await asyncio.sleep(0.1)


async def download(url: str) -> bytes:
    async with aiohttp.ClientSession() as session, session.get(url) as answer:
        assert answer.status == 200, f"{url}: {answer.status}"
        return await answer.read()


async def served(obj: JSON) -> bytes:
    """The bytes at status.artifact.url, checked against the artifact's digest and size."""
    artifact = obj["status"]["artifact"]
    data = await download(artifact["url"])
    assert artifact["digest"] == "sha256:" + hashlib.sha256(data).hexdigest()
    assert artifact["size"] == len(data)
    return data


async def served_files(obj: JSON) -> dict[str, bytes]:
    """The regular files of the served, digest-checked artifact."""
    return tar_members(await served(obj))


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


def seeded(server: GitHttpServer | SshGitServer, name: str) -> WorkRepo:
    """A repository `name` on `server` whose branch main holds one commit, 'first'."""
    work = server.create_repo(name)
    work.commit(
        "first",
        files={
            "deploy/app.yaml": MANIFEST,
            "deploy/logo.png": b"\x89PNG not really",
            ".github/workflows/ci.yml": "on: push\n",
            "README.md": "# app\n",
        },
    )
    work.push()
    return work


def corrupt_objects(bare: Path) -> None:
    """Damage every loose object of `bare`: upload-pack can no longer build a pack."""
    for obj in (bare / "objects").rglob("*"):
        if obj.is_file() and len(obj.parent.name) == 2:
            obj.chmod(0o644)
            obj.write_bytes(b"garbage")


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


@contextlib.asynccontextmanager
async def start_source_controller(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path, *flags: str
) -> AsyncIterator[SourceController]:
    """The controller as the fixture runs it, with `flags` added (limits, say)."""
    port = free_port()
    storage = tmp_path / "storage"
    reconciles = ReconcileLog()
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
            *flags,
        ],
        observer=reconciles,
    ) as runtime:  # fmt: skip
        yield SourceController(runtime, storage, f"127.0.0.1:{port}", kube, namespace, reconciles)


@pytest_asyncio.fixture(loop_scope="session")
async def source_controller(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[SourceController]:
    async with start_source_controller(cluster, kube, namespace, tmp_path) as sc:
        yield sc
