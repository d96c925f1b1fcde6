"""Running a Sluice controller in-process for a test, and watching what it does.

A controller under test runs with exactly its production wiring (its
service's `setup` through `sluice_runtime.app.running`) and its real flags,
confined to the test's namespace so tests do not see each other's objects.
The helpers read state through the API, the way a user would.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from sluice_envtest.controlplane import free_port
from sluice_runtime import app
from sluice_runtime.conditions import condition_of
from sluice_runtime.conditions import is_ready as is_ready
from sluice_runtime.controller import ReconcileObserver
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import CONFIG_MAP, SECRET, SERVICE_ACCOUNT, ResourceType

GITREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")
ROLE = ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDING = ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")


@contextlib.asynccontextmanager
async def running_service(
    service: ModuleType,
    *,
    kubeconfig: str,
    namespace: str | None,
    argv: Sequence[str] = (),
    setup: app.Setup | None = None,
    observer: ReconcileObserver | None = None,
    open_tenancy: bool = True,
) -> AsyncIterator[app.Runtime]:
    """Run `service` (a controller's `__main__` module) until the block ends.

    `setup` replaces the service's own, for a test that wires it with typed
    collaborators of its own (a fake clock, a handle on its servers).
    `open_tenancy` turns the binaries' multi-tenancy lockdown off with its
    explicit flags (`app.open_tenancy`), as most tests of single-tenant
    behaviour need; `argv` comes after them, so a test's own lockdown flags
    win. False runs the binary with its own defaults.
    """
    parser = app.parser(service=service.SERVICE, description="test", concurrency=4)
    add_arguments = getattr(service, "add_arguments", None)
    if add_arguments is not None:
        add_arguments(parser)
    options = parser.parse_args(
        [
            "--kubeconfig", kubeconfig,
            "--health-addr", "127.0.0.1:0",
            "--metrics-addr", "127.0.0.1:0",
            "--min-retry-delay", "200ms",
            "--max-retry-delay", "2s",
            *(["--watch-namespace", namespace] if namespace else []),
            *(app.open_tenancy(parser) if open_tenancy else []),
            *argv,
        ]
    )  # fmt: skip
    async with app.running(
        service=service.SERVICE,
        options=options,
        kinds=service.KINDS,
        setup=setup or service.setup,
        forward_events=getattr(service, "FORWARD_EVENTS", True),
        observer=observer,
    ) as runtime:
        yield runtime


def source_storage_argv(storage: Path) -> list[str]:
    """The source-controller's storage flags: `storage` served on a free loopback port,
    advertised as itself (the kustomize- and helm-controller in the same test download
    from there)."""
    port = free_port()
    return [
        "--storage-path", str(storage),
        "--storage-addr", f"127.0.0.1:{port}",
        "--storage-adv-addr", f"127.0.0.1:{port}",
    ]  # fmt: skip


condition = condition_of
"""The condition of a type on a raw object (the runtime's lookup, named for tests)."""


class Observer:
    """Polls objects of one namespace until they reach a state, or fails saying where they are."""

    def __init__(self, client: KubeClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace

    async def get(self, rt: ResourceType, name: str, namespace: str | None = None) -> JSON:
        return await self.client.get(rt, name, namespace or self.namespace)

    async def wait(
        self,
        rt: ResourceType,
        name: str,
        check: Callable[[JSON], bool],
        *,
        timeout: float = 120.0,
        what: str = "condition",
    ) -> JSON:
        # A cap on the wait, not a measure of speed: only a failure waits it out.
        # 30 s was too short under load (2 cores, load average 35: a GitRepository
        # had no artifact yet after 30 s, failing a kustomize-controller test).
        deadline = time.monotonic() + timeout
        obj: JSON = {}
        while time.monotonic() < deadline:
            obj = await self.get(rt, name)
            if check(obj):
                return obj
            await asyncio.sleep(0.1)
        raise AssertionError(
            f"{rt.kind}/{name}: {what} not reached within {timeout}s; "
            f"last status: {obj.get('status')}"
        )

    async def wait_ready(self, rt: ResourceType, name: str, **kw: Any) -> JSON:
        return await self.wait(rt, name, is_ready, what="Ready=True", **kw)

    async def wait_reason(self, rt: ResourceType, name: str, reason: str, **kw: Any) -> JSON:
        return await self.wait(
            rt,
            name,
            lambda o: (condition(o, "Ready") or {}).get("reason") == reason,
            what=f"Ready reason {reason}",
            **kw,
        )

    async def wait_stalled(self, rt: ResourceType, name: str, **kw: Any) -> JSON:
        return await self.wait(
            rt,
            name,
            lambda o: (condition(o, "Stalled") or {}).get("status") == "True",
            what="Stalled=True",
            **kw,
        )

    async def poke(self, rt: ResourceType, name: str, token: str, **kw: Any) -> JSON:
        """Ask for a reconcile now (reconcile.fluxcd.io/requestedAt) and wait until handled."""
        await self.client.merge_patch(
            rt,
            name,
            {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}},
            namespace=self.namespace,
        )
        return await self.wait(
            rt,
            name,
            lambda o: (o.get("status") or {}).get("lastHandledReconcileAt") == token,
            what="reconcile request handled",
            **kw,
        )


async def make_secret(
    client: KubeClient,
    namespace: str,
    name: str,
    data: dict[str, str],
    *,
    type_: str = "Opaque",
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


async def make_config_map(
    client: KubeClient, namespace: str, name: str, data: dict[str, str]
) -> None:
    await client.create(
        CONFIG_MAP,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": data,
        },
    )


async def exists(client: KubeClient, rt: ResourceType, name: str, namespace: str) -> bool:
    try:
        await client.get(rt, name, namespace)
    except NotFound:
        return False
    return True


async def make_git_repository(
    client: KubeClient, namespace: str, name: str, url: str, *, branch: str = "main"
) -> None:
    """A GitRepository following `branch` of `url`, on an hour's interval: the tests
    move it by a poke or a webhook, never by waiting for the interval."""
    await client.create(
        GITREPO,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "GitRepository",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"url": url, "interval": "1h", "ref": {"branch": branch}},
        },
    )


async def make_tenant(client: KubeClient, namespace: str, resources: Sequence[str]) -> None:
    """ServiceAccount `tenant`, allowed every verb on `resources` (core group) of
    `namespace` only."""
    meta = {"name": "tenant", "namespace": namespace}
    await client.create(
        SERVICE_ACCOUNT, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}
    )
    await client.create(
        ROLE,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [{"apiGroups": [""], "resources": list(resources), "verbs": ["*"]}],
        },
    )
    await client.create(
        ROLE_BINDING,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}],
        },
    )


# -- what a CI system sends to a receiver ---------------------------------------------


def push_payload(ref: str = "refs/heads/main") -> bytes:
    """A minimal GitHub push event body."""
    return json.dumps({"ref": ref, "repository": {"full_name": "acme/app"}}).encode()


def github_headers(token: str, body: bytes, event: str = "push") -> dict[str, str]:
    """The headers GitHub sends with `body`, signed with the webhook secret `token`."""
    digest = hmac.new(token.encode(), body, hashlib.sha256).hexdigest()
    return {
        "X-Hub-Signature-256": f"sha256={digest}",
        "X-GitHub-Event": event,
        "Content-Type": "application/json",
    }
