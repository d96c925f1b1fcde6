"""Sluice's delivery controllers in-process, wired together the way they run:
sources and Kustomizations report events to the notification-controller's
hub, and CI reaches the notification-controller's webhook receiver."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest_asyncio
from multidict import CIMultiDictProxy

from notification_controller import __main__ as notification_main
from notification_controller.hub import EventHub
from notification_controller.webhooks import WebhookServer
from sluice_envtest.controlplane import free_port
from sluice_envtest.gitserver import GitHttpServer, WorkRepo
from sluice_envtest.harness import (
    Observer,
    condition,
    make_secret,
    running_service,
)
from sluice_envtest.measuring import exceptions_in_log, metric_total
from sluice_envtest.processes import spawn, stop, wait_ready
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.informing.watching import Store
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
class Counts:
    """A NotificationObserver that counts."""

    actions: int = 0
    refused: int = 0
    received: int = 0
    delivered: int = 0

    def webhook_acted(self) -> None:
        self.actions += 1

    def event_refused(self) -> None:
        self.refused += 1

    def event_received(self) -> None:
        self.received += 1

    def event_delivered(self) -> None:
        self.delivered += 1


@dataclass
class Platform:
    kube: KubeClient
    namespace: str
    git: GitHttpServer
    observe: Observer
    notification: notification_main.Wiring
    receiver_url: str
    events_url: str
    session: aiohttp.ClientSession

    def repo(self, name: str) -> WorkRepo:
        return self.git.create_repo(f"{name}-{self.namespace}")

    def url(self, name: str) -> str:
        return self.git.url(f"{name}-{self.namespace}")

    @property
    def counts(self) -> Counts:
        """What the webhook server and the hub did, counted."""
        assert isinstance(self.notification.observer, Counts)
        return self.notification.observer

    @property
    def webhooks(self) -> WebhookServer:
        return self.notification.webhooks

    @property
    def hub(self) -> EventHub:
        return self.notification.hub

    async def create(
        self, rt: ResourceType, name: str, spec: JSON, labels: dict[str, str] | None = None
    ) -> JSON:
        """Create `rt` object `name` in the test's namespace."""
        metadata: JSON = {"name": name, **({"labels": labels} if labels else {})}
        return await self.kube.create(
            rt,
            {"apiVersion": rt.api_version, "kind": rt.kind, "metadata": metadata, "spec": spec},
            namespace=self.namespace,
        )

    async def delivery(self, name: str, *, path: str = "./") -> WorkRepo:
        """A Git repository with one commit, its GitRepository and a Kustomization of
        `path` in it, as a user sets them up; the caller waits for what it needs."""
        repo = self.repo(name)
        repo.commit("v1", files={"cm.yaml": config_map(name, self.namespace, v="1")})
        repo.push()
        source = {"url": self.url(name), "interval": "1h", "ref": {"branch": "main"}}
        await self.create(GITREPO, name, source)
        await self.create(
            KUSTOMIZATION,
            name,
            {
                "interval": "1h",
                "path": path,
                "prune": True,
                "sourceRef": {"kind": "GitRepository", "name": name},
            },
        )
        return repo

    async def receiver(
        self, name: str, type_: str, token: str, resources: list[JSON], **spec: Any
    ) -> str:
        """Create a Receiver and its token Secret; return its webhook URL once Ready."""
        await make_secret(self.kube, self.namespace, f"{name}-token", {"token": token})
        await self.create(
            RECEIVER,
            name,
            {"type": type_, "secretRef": {"name": f"{name}-token"}, "resources": resources, **spec},
        )
        obj = await self.observe.wait_ready(RECEIVER, name)
        path = obj["status"]["webhookPath"]
        expected = hashlib.sha256(f"{token}{name}{self.namespace}".encode()).hexdigest()
        assert path == f"/hook/{expected}"
        ready = condition(obj, "Ready") or {}
        assert ready.get("message") == f"Receiver initialised for path: {path}"
        await cached(self.webhooks.receivers, f"{self.namespace}/{name}", _ready)
        return f"{self.receiver_url}{path}"

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
        status, text, _ = await self.answer(url, body, headers)
        return status, text

    async def answer(
        self, url: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, str, CIMultiDictProxy[str]]:
        """POST and return the status, the body and the response headers."""
        async with self.session.post(url, data=body, headers=headers) as answer:
            return answer.status, await answer.text(), answer.headers


async def cached(
    store: Store, key: str, check: Callable[[JSON], bool] = lambda _: True, *, timeout: float = 10.0
) -> JSON:
    """Wait until the controller's informer cache holds `key` in the state `check` wants:
    what the webhook server and the hub act on, rather than what the API server has."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        obj = store.get(key)
        if obj is not None and check(obj):
            return obj
        await asyncio.sleep(0.05)
    raise AssertionError(f"{key} not in the expected state in the cache within {timeout}s")


def _ready(obj: JSON) -> bool:
    return (condition(obj, "Ready") or {}).get("status") == "True"


async def parked(p: Platform, name: str, **labels: str) -> None:
    """A suspended GitRepository: a webhook target or an event's object that nothing else touches."""
    spec = {"url": "https://example.invalid/x.git", "interval": "1h", "suspend": True}
    await p.create(GITREPO, name, spec, labels)


EVENTS_TOKEN = secrets.token_hex(16)
"""The shared token controllers authenticate their events with, as under `sluice dev`."""


@functools.cache
def events_token_file() -> str:
    """A file holding EVENTS_TOKEN, for `--events-token-file` on every controller."""
    path = Path(tempfile.mkdtemp(prefix="sluice-events-")) / "token"
    path.write_text(EVENTS_TOKEN)
    return str(path)


def events_auth(token: str = EVENTS_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@contextlib.asynccontextmanager
async def running_notification(
    kubeconfig: str, namespace: str, *flags: str
) -> AsyncIterator[notification_main.Wiring]:
    """The notification-controller on loopback ports, with `flags` added."""
    wiring = notification_main.Wiring(observer=Counts())
    async with running_service(
        notification_main,
        kubeconfig=kubeconfig,
        namespace=namespace,
        argv=[
            "--receiver-addr", "127.0.0.1:0",
            "--events-addr", "127.0.0.1:0",
            "--events-token-file", events_token_file(),
            *flags,
        ],
        setup=wiring.setup,
    ):  # fmt: skip
        yield wiring


def platform_of(
    kube: KubeClient,
    namespace: str,
    git: GitHttpServer,
    notification: notification_main.Wiring,
    session: aiohttp.ClientSession,
) -> Platform:
    return Platform(
        kube,
        namespace,
        git,
        Observer(kube, namespace),
        notification,
        f"http://127.0.0.1:{notification.receiver_port}",
        f"http://127.0.0.1:{notification.events_port}/",
        session,
    )


@contextlib.asynccontextmanager
async def notification_alone(
    cluster: Cluster, kube: KubeClient, namespace: str, git: GitHttpServer, *flags: str
) -> AsyncIterator[Platform]:
    async with (
        running_notification(str(cluster.kubeconfig), namespace, *flags) as notification,
        aiohttp.ClientSession() as session,
    ):
        yield platform_of(kube, namespace, git, notification, session)


@pytest_asyncio.fixture(loop_scope="session")
async def alone(
    cluster: Cluster, kube: KubeClient, namespace: str, git_http: GitHttpServer
) -> AsyncIterator[Platform]:
    """The notification-controller alone, with its default flags: no other
    controller reports events or reconciles what a test creates."""
    async with notification_alone(cluster, kube, namespace, git_http) as platform:
        yield platform


@pytest_asyncio.fixture(loop_scope="session")
async def strict(
    cluster: Cluster, kube: KubeClient, namespace: str, git_http: GitHttpServer
) -> AsyncIterator[Platform]:
    """The notification-controller alone, hardened: `--no-cross-namespace-refs`, and
    generic-hmac webhooks must carry a signed timestamp at most a minute old."""
    flags = ("--no-cross-namespace-refs", "--replay-window", "1m", "--require-signed-timestamp")
    async with notification_alone(cluster, kube, namespace, git_http, *flags) as platform:
        yield platform


@pytest_asyncio.fixture(loop_scope="session")
async def platform(
    cluster: Cluster, kube: KubeClient, namespace: str, git_http: GitHttpServer, tmp_path: Path
) -> AsyncIterator[Platform]:
    from kustomize_controller import __main__ as kustomize_main
    from source_controller import __main__ as source_main

    kubeconfig = str(cluster.kubeconfig)
    storage_port = free_port()
    async with running_notification(
        kubeconfig, namespace, "--receiver-debounce", "1s"
    ) as notification:
        events_port = notification.events_port
        async with (
            running_service(
                source_main,
                kubeconfig=kubeconfig,
                namespace=namespace,
                argv=[
                    "--events-addr", f"http://127.0.0.1:{events_port}",
                    "--events-token-file", events_token_file(),
                    "--storage-path", str(tmp_path / "storage"),
                    "--storage-addr", f"127.0.0.1:{storage_port}",
                    "--storage-adv-addr", f"127.0.0.1:{storage_port}",
                ],
            ),
            running_service(
                kustomize_main,
                kubeconfig=kubeconfig,
                namespace=namespace,
                argv=[
                    "--events-addr", f"http://127.0.0.1:{events_port}",
                    "--events-token-file", events_token_file(),
                ],
            ),
            aiohttp.ClientSession() as session,
        ):  # fmt: skip
            yield platform_of(kube, namespace, git_http, notification, session)


@dataclass
class NotificationProcess:
    """The notification-controller as its own process, as it runs in a pod: what
    a test measures of it (memory, descriptors) is the controller's alone."""

    process: subprocess.Popen[bytes]
    log: Path
    receiver_url: str
    metrics_port: int

    @property
    def pid(self) -> int:
        return self.process.pid

    def asyncio_tasks(self) -> float:
        """The asyncio tasks alive on its event loop (`python_asyncio_tasks`)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            return metric_total(answer.read().decode(), "python_asyncio_tasks")

    def exceptions(self) -> list[str]:
        """Lines of its output (stdout and stderr) that carry an exception."""
        return exceptions_in_log(self.log.read_text(errors="replace"))


@pytest_asyncio.fixture(loop_scope="session")
async def notification_process(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> AsyncIterator[NotificationProcess]:
    """The notification-controller started as `python -m notification_controller`
    with its default limits and log level, watching the test's namespace."""
    health, receiver = free_port(), free_port()
    log = tmp_path / "notification-controller.log"
    argv = [
        sys.executable, "-m", "notification_controller",
        "--kubeconfig", str(cluster.kubeconfig),
        "--watch-namespace", namespace,
        "--health-addr", f"127.0.0.1:{health}",
        "--metrics-addr", f"127.0.0.1:{health}",
        "--receiver-addr", f"127.0.0.1:{receiver}",
        "--events-addr", f"127.0.0.1:{free_port()}",
        "--events-token-file", events_token_file(),
    ]  # fmt: skip
    process = spawn(argv, log=log)

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2):
                return True
        except OSError:
            return False

    await asyncio.to_thread(
        wait_ready, ready, process=process, name="notification-controller", log=log, timeout=60
    )
    try:
        yield NotificationProcess(process, log, f"http://127.0.0.1:{receiver}", health)
    finally:
        await asyncio.to_thread(stop, process, grace=30)
