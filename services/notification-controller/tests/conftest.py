"""Sluice's delivery controllers in-process, wired together the way they run:
sources and Kustomizations report events to the notification-controller's
hub, and CI reaches the notification-controller's webhook receiver."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest_asyncio

from notification_controller import __main__ as notification_main
from sluice_envtest.controlplane import free_port
from sluice_envtest.gitserver import GitHttpServer, WorkRepo
from sluice_envtest.harness import Observer, make_secret, running_service
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime import app
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import ResourceType

GITREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")
KUSTOMIZATION = ResourceType("kustomize.toolkit.fluxcd.io", "v1", "kustomizations", "Kustomization")
RECEIVER = ResourceType("notification.toolkit.fluxcd.io", "v1", "receivers", "Receiver")
ALERT = ResourceType("notification.toolkit.fluxcd.io", "v1beta3", "alerts", "Alert")
PROVIDER = ResourceType("notification.toolkit.fluxcd.io", "v1beta3", "providers", "Provider")
GATE = ResourceType("gating.toolkit.fluxcd.io", "v1alpha1", "gates", "Gate")
CONFIG_MAP = ResourceType("", "v1", "configmaps", "ConfigMap")


def config_map(name: str, namespace: str, **data: str) -> str:
    body = "".join(f"\n  {k}: {v!r}" for k, v in data.items()) or " {}"
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\ndata:{body}\n"


@dataclass
class Platform:
    kube: KubeClient
    namespace: str
    git: GitHttpServer
    observe: Observer
    notification: app.Runtime
    receiver_url: str
    events_url: str
    session: aiohttp.ClientSession

    def repo(self, name: str) -> WorkRepo:
        return self.git.create_repo(f"{name}-{self.namespace}")

    def url(self, name: str) -> str:
        return self.git.url(f"{name}-{self.namespace}")

    @property
    def webhooks(self) -> Any:
        return self.notification.components["webhooks"]

    @property
    def hub(self) -> Any:
        return self.notification.components["hub"]

    async def receiver(
        self, name: str, type_: str, token: str, resources: list[JSON], **spec: Any
    ) -> str:
        """Create a Receiver and its token Secret; return its webhook URL once Ready."""
        await make_secret(self.kube, self.namespace, f"{name}-token", {"token": token})
        await self.kube.create(
            RECEIVER,
            {
                "apiVersion": "notification.toolkit.fluxcd.io/v1",
                "kind": "Receiver",
                "metadata": {"name": name},
                "spec": {
                    "type": type_,
                    "secretRef": {"name": f"{name}-token"},
                    "resources": resources,
                    **spec,
                },
            },
            namespace=self.namespace,
        )
        obj = await self.observe.wait_ready(RECEIVER, name)
        path = obj["status"]["webhookPath"]
        expected = hashlib.sha256(f"{token}{name}{self.namespace}".encode()).hexdigest()
        assert path == f"/hook/{expected}"
        return f"{self.receiver_url}{path}"

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
        async with self.session.post(url, data=body, headers=headers) as answer:
            return answer.status, await answer.text()


def github_headers(token: str, body: bytes, event: str = "push") -> dict[str, str]:
    digest = hmac.new(token.encode(), body, hashlib.sha256).hexdigest()
    return {
        "X-Hub-Signature-256": f"sha256={digest}",
        "X-GitHub-Event": event,
        "Content-Type": "application/json",
    }


def push_payload(ref: str = "refs/heads/main") -> bytes:
    return json.dumps({"ref": ref, "repository": {"full_name": "acme/app"}}).encode()


@pytest_asyncio.fixture(loop_scope="session")
async def platform(
    cluster: Cluster, kube: KubeClient, namespace: str, git_http: GitHttpServer, tmp_path: Path
) -> AsyncIterator[Platform]:
    from kustomize_controller import __main__ as kustomize_main
    from source_controller import __main__ as source_main

    kubeconfig = str(cluster.kubeconfig)
    storage_port = free_port()
    async with running_service(
        notification_main,
        kubeconfig=kubeconfig,
        namespace=namespace,
        argv=[
            "--receiver-addr",
            "127.0.0.1:0",
            "--events-addr",
            "127.0.0.1:0",
            "--receiver-debounce",
            "1s",
        ],
    ) as notification:
        receiver_port = notification.components["receiver_address"][1]
        events_port = notification.components["events_address"][1]
        async with (
            running_service(
                source_main,
                kubeconfig=kubeconfig,
                namespace=namespace,
                argv=[
                    "--events-addr", f"http://127.0.0.1:{events_port}",
                    "--storage-path", str(tmp_path / "storage"),
                    "--storage-addr", f"127.0.0.1:{storage_port}",
                    "--storage-adv-addr", f"127.0.0.1:{storage_port}",
                ],
            ),
            running_service(
                kustomize_main,
                kubeconfig=kubeconfig,
                namespace=namespace,
                argv=["--events-addr", f"http://127.0.0.1:{events_port}"],
            ),
            aiohttp.ClientSession() as session,
        ):  # fmt: skip
            yield Platform(
                kube,
                namespace,
                git_http,
                Observer(kube, namespace),
                notification,
                f"http://127.0.0.1:{receiver_port}",
                f"http://127.0.0.1:{events_port}/",
                session,
            )
