"""ResourceSets under test: the source-, kustomize-, notification- and
resourceset-controller in-process with their production wiring, confined to
the test's namespace, against the real API server and a registry of the
test's own (so a test can take it down)."""

from __future__ import annotations

import asyncio
import functools
import hmac
import secrets
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest_asyncio
import yaml

from sluice_envtest.harness import Observer, exists, running_service, source_storage_argv
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime import app
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import ResourceType

RSET = ResourceType("fluxcd.controlplane.io", "v1", "resourcesets", "ResourceSet")
RSIP = ResourceType(
    "fluxcd.controlplane.io", "v1", "resourcesetinputproviders", "ResourceSetInputProvider"
)
OCIREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "ocirepositories", "OCIRepository")
KUSTOMIZATION = ResourceType("kustomize.toolkit.fluxcd.io", "v1", "kustomizations", "Kustomization")
RECEIVER = ResourceType("notification.toolkit.fluxcd.io", "v1", "receivers", "Receiver")
CONFIG_MAP = ResourceType("", "v1", "configmaps", "ConfigMap")

EVENTS_TOKEN = secrets.token_hex(16)


@functools.cache
def events_token_file() -> str:
    path = Path(tempfile.mkdtemp(prefix="sluice-events-")) / "token"
    path.write_text(EVENTS_TOKEN)
    return str(path)


def generic_hmac_headers(token: str, body: bytes) -> dict[str, str]:
    """A generic-hmac call signed the way the notification-controller wants by default."""
    stamp = str(int(time.time()))
    digest = hmac.new(token.encode(), stamp.encode() + b"." + body, "sha256").hexdigest()
    return {"X-Signature-Timestamp": stamp, "X-Signature-Timestamped": f"sha256={digest}"}


@dataclass
class Fleet:
    kube: KubeClient
    namespace: str
    observe: Observer
    receiver_url: str
    session: aiohttp.ClientSession
    rsets: app.Runtime

    async def apply_yaml(self, text: str) -> None:
        """Create every object of a multi-document manifest in the test's namespace."""
        types = {r.kind: r for r in (RSET, RSIP, OCIREPO, KUSTOMIZATION, RECEIVER, CONFIG_MAP)}
        for doc in yaml.safe_load_all(text):
            if doc:
                doc["metadata"]["namespace"] = self.namespace
                await self.kube.create(types[doc["kind"]], doc, namespace=self.namespace)

    async def exists(self, rt: ResourceType, name: str) -> bool:
        return await exists(self.kube, rt, name, self.namespace)

    async def wait_ready(self, rt: ResourceType, name: str, *, timeout: float = 60.0) -> Any:
        """Wait for `name` to exist and be Ready (it may not have been generated yet)."""
        await self.wait_for(
            lambda: self.exists(rt, name), timeout=timeout, what=f"{rt.kind}/{name} created"
        )
        return await self.observe.wait_ready(rt, name, timeout=timeout)

    async def wait_for(
        self, check: Callable[[], Any], *, timeout: float = 60.0, what: str = "condition"
    ) -> float:
        """Poll the async `check` until true; the seconds it took."""
        started = time.monotonic()
        while not await check():
            if time.monotonic() - started > timeout:
                raise AssertionError(f"{what} not reached within {timeout}s")
            await asyncio.sleep(0.2)
        return time.monotonic() - started

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> int:
        async with self.session.post(
            f"{self.receiver_url}{path}", data=body, headers=headers
        ) as answer:
            return answer.status


@pytest_asyncio.fixture(loop_scope="session")
async def fleet(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[Fleet]:
    from kustomize_controller import __main__ as kustomize_main
    from notification_controller import __main__ as notification_main
    from resourceset_controller import __main__ as rset_main
    from source_controller import __main__ as source_main

    kubeconfig = str(cluster.kubeconfig)
    wiring = notification_main.Wiring()
    async with (
        running_service(
            notification_main,
            kubeconfig=kubeconfig,
            namespace=namespace,
            argv=[
                "--receiver-addr", "127.0.0.1:0",
                "--events-addr", "127.0.0.1:0",
                "--events-token-file", events_token_file(),
            ],
            setup=wiring.setup,
        ),
        running_service(
            source_main, kubeconfig=kubeconfig, namespace=namespace,
            argv=source_storage_argv(tmp_path / "storage"),
        ),
        running_service(kustomize_main, kubeconfig=kubeconfig, namespace=namespace),
        running_service(
            rset_main, kubeconfig=kubeconfig, namespace=namespace,
            argv=["--requeue-dependency", "1s"],
        ) as rsets,
        aiohttp.ClientSession() as session,
    ):  # fmt: skip
        receiver = f"http://127.0.0.1:{wiring.receiver_port}"
        yield Fleet(kube, namespace, Observer(kube, namespace), receiver, session, rsets)


@dataclass
class Alone:
    """The resourceset-controller alone: what it generates is not reconciled further."""

    kube: KubeClient
    namespace: str
    observe: Observer
    runtime: app.Runtime

    @property
    def providers(self) -> Any:
        """The ResourceSetInputProvider controller (its queue says when a key is due)."""
        return self.runtime.controllers[0]

    async def create(self, rt: ResourceType, name: str, spec: dict[str, Any], **meta: Any) -> Any:
        body = {
            "apiVersion": f"{rt.group}/{rt.version}" if rt.group else rt.version,
            "kind": rt.kind,
            "metadata": {"name": name, "namespace": self.namespace, **meta},
            "spec": spec,
        }
        return await self.kube.create(rt, body, namespace=self.namespace)

    async def exists(self, rt: ResourceType, name: str) -> bool:
        return await exists(self.kube, rt, name, self.namespace)


@pytest_asyncio.fixture(loop_scope="session")
async def alone(cluster: Cluster, kube: KubeClient, namespace: str) -> AsyncIterator[Alone]:
    from resourceset_controller import __main__ as rset_main

    async with running_service(
        rset_main,
        kubeconfig=str(cluster.kubeconfig),
        namespace=namespace,
        argv=["--requeue-dependency", "1s"],
    ) as runtime:
        yield Alone(kube, namespace, Observer(kube, namespace), runtime)
