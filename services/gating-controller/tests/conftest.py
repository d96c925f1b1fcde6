"""The gating story's cast, in-process: gating-, source-, kustomize- and
notification-controller against one namespace, with the gating-controller
reading a clock the test moves, so an hour-long window takes no hour, and
posting its events to the notification-controller's hub, as in production."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest_asyncio
from aiohttp import web

from gating_controller import __main__ as gating_main
from sluice_envtest.controlplane import free_port
from sluice_envtest.gitserver import GitHttpServer, WorkRepo
from sluice_envtest.harness import Observer, condition, make_secret, running_service
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime import app
from sluice_runtime.endpoints import serving
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import ResourceType

GATE = ResourceType("gating.toolkit.fluxcd.io", "v1alpha1", "gates", "Gate")
GITREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")
KUSTOMIZATION = ResourceType("kustomize.toolkit.fluxcd.io", "v1", "kustomizations", "Kustomization")
CONFIG_MAP = ResourceType("", "v1", "configmaps", "ConfigMap")
RECEIVER = ResourceType("notification.toolkit.fluxcd.io", "v1", "receivers", "Receiver")
ALERT = ResourceType("notification.toolkit.fluxcd.io", "v1beta3", "alerts", "Alert")
PROVIDER = ResourceType("notification.toolkit.fluxcd.io", "v1beta3", "providers", "Provider")


@dataclass
class FakeClock:
    """Real time plus an offset the test advances."""

    offset: timedelta = field(default_factory=timedelta)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, by: timedelta) -> None:
        self.offset += by


def config_map(name: str, namespace: str, **data: str) -> str:
    body = "".join(f"\n  {k}: {v!r}" for k, v in data.items()) or " {}"
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\ndata:{body}\n"


@dataclass
class Stage:
    kube: KubeClient
    namespace: str
    git: GitHttpServer
    observe: Observer
    clock: FakeClock
    gating: app.Runtime
    receiver_port: int
    session: aiohttp.ClientSession
    kubeconfig: str

    def repo(self, name: str) -> WorkRepo:
        return self.git.create_repo(f"{name}-{self.namespace}")

    def url(self, name: str) -> str:
        return self.git.url(f"{name}-{self.namespace}")

    @property
    def receiver_url(self) -> str:
        return f"http://127.0.0.1:{self.receiver_port}"

    async def gate(self, name: str, **spec: Any) -> JSON:
        body = {
            "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
            "kind": "Gate",
            "metadata": {"name": name},
            "spec": {"interval": "10m", **spec},
        }
        await self.kube.create(GATE, body, namespace=self.namespace)
        return await self.observe.wait(
            GATE, name, lambda o: _opened(o) is not None, what="Opened set"
        )

    async def annotate(self, name: str, annotations: dict[str, str]) -> None:
        await self.kube.merge_patch(
            GATE, name, {"metadata": {"annotations": annotations}}, namespace=self.namespace
        )

    async def git_repository(self, name: str, **spec: Any) -> None:
        await self.kube.create(
            GITREPO,
            {
                "apiVersion": "source.toolkit.fluxcd.io/v1",
                "kind": "GitRepository",
                "metadata": {"name": name},
                "spec": {
                    "url": self.url(name),
                    "interval": "1h",
                    "ref": {"branch": "main"},
                    **spec,
                },
            },
            namespace=self.namespace,
        )

    async def gated_app(self, name: str, gates: list[str]) -> WorkRepo:
        """A repository holding ConfigMap `name`, its GitRepository, and a
        Kustomization `name` applying it that lists `gates`."""
        repo = self.repo(name)
        repo.commit("v1", files={"cm.yaml": config_map(name, self.namespace, v="1")})
        repo.push()
        await self.git_repository(name)
        await self.kustomization(name, name, gates=[{"name": gate} for gate in gates])
        return repo

    async def held(self, name: str, message: str) -> JSON:
        """Wait until Kustomization `name` is held with `message`; return it."""
        ks = await self.observe.wait(
            KUSTOMIZATION,
            name,
            lambda o: (condition(o, "Approved") or {}).get("message") == message,
            what=f"held: {message}",
        )
        approved = condition(ks, "Approved")
        assert approved is not None
        assert (approved["status"], approved["reason"]) == ("False", "GateClosed")
        assert (condition(ks, "Ready") or {}).get("reason") == "GateClosed"
        return ks

    async def receiver(self, name: str, token: str, resources: list[JSON]) -> str:
        """A generic-hmac Receiver acting on `resources`; its webhook URL once Ready."""
        await make_secret(self.kube, self.namespace, name, {"token": token})
        await self.kube.create(
            RECEIVER,
            {
                "apiVersion": "notification.toolkit.fluxcd.io/v1",
                "kind": "Receiver",
                "metadata": {"name": name},
                "spec": {
                    "type": "generic-hmac",
                    "secretRef": {"name": name},
                    "resources": resources,
                },
            },
            namespace=self.namespace,
        )
        receiver = await self.observe.wait_ready(RECEIVER, name)
        return self.receiver_url + receiver["status"]["webhookPath"]

    async def signed_post(self, url: str, token: str, body: bytes) -> int:
        # Timestamped, as the notification-controller requires by default.
        stamp = str(int(time.time()))
        signed = stamp.encode() + b"." + body
        signature = "sha256=" + hmac.new(token.encode(), signed, hashlib.sha256).hexdigest()
        headers = {"X-Signature-Timestamp": stamp, "X-Signature-Timestamped": signature}
        async with self.session.post(url, data=body, headers=headers) as answer:
            return answer.status

    async def kustomization(self, name: str, source: str, **spec: Any) -> None:
        await self.kube.create(
            KUSTOMIZATION,
            {
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                "kind": "Kustomization",
                "metadata": {"name": name},
                "spec": {
                    "interval": "1h",
                    "path": "./",
                    "prune": True,
                    "sourceRef": {"kind": "GitRepository", "name": source},
                    **spec,
                },
            },
            namespace=self.namespace,
        )


def _opened(obj: JSON) -> str | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Opened":
            return str(cond.get("status"))
    return None


def opened(obj: JSON) -> bool:
    return _opened(obj) == "True"


@dataclass
class Sink:
    """A webhook endpoint on loopback keeping what it is sent (a generic Provider's target)."""

    url: str = ""
    received: list[JSON] = field(default_factory=list)

    async def wait_for(self, reason: str, timeout: float = 10.0) -> JSON:
        """The first event received with `reason`, waiting for it to arrive."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.received:
                if event.get("reason") == reason:
                    return event
            await asyncio.sleep(0.1)
        raise AssertionError(f"no {reason} event within {timeout}s; received {self.received}")


@pytest_asyncio.fixture(loop_scope="session")
async def sink() -> AsyncIterator[Sink]:
    found = Sink()

    async def hook(request: web.Request) -> web.Response:
        found.received.append(json.loads(await request.read()))
        return web.Response(status=200)

    application = web.Application()
    application.router.add_post("/hook", hook)
    async with serving(application, "127.0.0.1:0") as runner:
        found.url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
        yield found


@pytest_asyncio.fixture(loop_scope="session")
async def stage(
    cluster: Cluster, kube: KubeClient, namespace: str, git_http: GitHttpServer, tmp_path: Path
) -> AsyncIterator[Stage]:
    from kustomize_controller import __main__ as kustomize_main
    from notification_controller import __main__ as notification_main
    from source_controller import __main__ as source_main

    clock = FakeClock()
    kubeconfig = str(cluster.kubeconfig)
    events_token = tmp_path / "events-token"
    events_token.write_text(secrets.token_hex(16))
    storage_port = free_port()
    notification = notification_main.Wiring()
    async with (
        running_service(
            notification_main,
            kubeconfig=kubeconfig,
            namespace=namespace,
            argv=[
                "--receiver-addr", "127.0.0.1:0",
                "--events-addr", "127.0.0.1:0",
                "--events-token-file", str(events_token),
            ],
            setup=notification.setup,
        ),
        running_service(
            gating_main,
            kubeconfig=kubeconfig,
            namespace=namespace,
            argv=[
                "--events-addr",
                f"http://127.0.0.1:{notification.events_port}/",
                "--events-token-file", str(events_token),
            ],
            setup=gating_main.setup_with(clock),
        ) as gating,
        running_service(
            source_main,
            kubeconfig=kubeconfig,
            namespace=namespace,
            argv=[
                "--storage-path", str(tmp_path / "storage"),
                "--storage-addr", f"127.0.0.1:{storage_port}",
                "--storage-adv-addr", f"127.0.0.1:{storage_port}",
            ],
        ),
        running_service(kustomize_main, kubeconfig=kubeconfig, namespace=namespace),
        aiohttp.ClientSession() as session,
    ):  # fmt: skip
        yield Stage(
            kube, namespace, git_http, Observer(kube, namespace), clock, gating,
            notification.receiver_port, session, kubeconfig,
        )  # fmt: skip
