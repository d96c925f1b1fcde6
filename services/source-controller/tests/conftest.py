"""A source-controller running in-process, wired exactly as `source-controller` is.

The controller watches only the test's namespace and stores artifacts in
the test's temporary directory; its file server listens on a free loopback
port, which is also the advertised address in artifact URLs.
"""

from __future__ import annotations

import asyncio
import base64
import io
import tarfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest_asyncio

from sluice_envtest.controlplane import free_port
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime import app
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import SECRET, ResourceType
from source_controller import __main__ as source_main

GITREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")
OCIREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "ocirepositories", "OCIRepository")


@dataclass
class SourceController:
    runtime: app.Runtime
    storage: Path
    storage_addr: str
    client: KubeClient
    namespace: str

    async def get(self, rt: ResourceType, name: str) -> JSON:
        return await self.client.get(rt, name, self.namespace)

    async def wait(
        self,
        rt: ResourceType,
        name: str,
        check: Callable[[JSON], bool],
        *,
        timeout: float = 30.0,
        what: str = "condition",
    ) -> JSON:
        deadline = time.monotonic() + timeout
        obj: JSON = {}
        while time.monotonic() < deadline:
            obj = await self.get(rt, name)
            if check(obj):
                return obj
            await asyncio.sleep(0.1)
        raise AssertionError(
            f"{what} not reached within {timeout}s; last status: {obj.get('status')}"
        )

    async def wait_ready(self, rt: ResourceType, name: str, **kw: Any) -> JSON:
        return await self.wait(
            rt, name, lambda o: ready_status(o) == "True", what="Ready=True", **kw
        )

    async def wait_failed(self, rt: ResourceType, name: str, reason: str, **kw: Any) -> JSON:
        return await self.wait(
            rt,
            name,
            lambda o: (condition(o, "Ready") or {}).get("reason") == reason,
            what=f"Ready reason {reason}",
            **kw,
        )

    async def poke(self, rt: ResourceType, name: str, token: str) -> JSON:
        """Ask for a reconcile now and wait until it was handled."""
        await self.client.merge_patch(
            rt,
            name,
            {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}},
            namespace=self.namespace,
        )
        return await self.wait(
            rt,
            name,
            lambda o: o.get("status", {}).get("lastHandledReconcileAt") == token,
            what="reconcile handled",
        )


def condition(obj: JSON, type_: str) -> JSON | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def ready_status(obj: JSON) -> str | None:
    cond = condition(obj, "Ready")
    return cond.get("status") if cond else None


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


async def make_secret(
    client: KubeClient, namespace: str, name: str, data: dict[str, str], *, type_: str = "Opaque"
) -> None:
    await client.create(
        SECRET,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": type_,
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        },
    )


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
    parser = app.parser(service=source_main.SERVICE, description="test", concurrency=4)
    source_main.add_arguments(parser)
    storage = tmp_path / "storage"
    options = parser.parse_args(
        [
            "--kubeconfig", str(cluster.kubeconfig),
            "--watch-namespace", namespace,
            "--health-addr", "127.0.0.1:0",
            "--metrics-addr", "127.0.0.1:0",
            "--storage-path", str(storage),
            "--storage-addr", f"127.0.0.1:{port}",
            "--storage-adv-addr", f"127.0.0.1:{port}",
            "--min-retry-delay", "200ms",
            "--max-retry-delay", "2s",
            "--artifact-retention-ttl", "0s",
            "--artifact-retention-records", "1",
        ]
    )  # fmt: skip
    async with app.running(
        service=source_main.SERVICE,
        options=options,
        kinds=source_main.KINDS,
        setup=source_main.setup,
    ) as runtime:
        yield SourceController(runtime, storage, f"127.0.0.1:{port}", kube, namespace)


Waiter = Callable[[], Awaitable[bool]]
