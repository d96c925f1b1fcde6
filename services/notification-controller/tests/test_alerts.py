"""Alerts end to end: controller events reach a signed webhook and a commit status API."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio
from aiohttp import web

from sluice_envtest.harness import condition, make_secret
from sluice_runtime.serving import serving

from .conftest import ALERT, GITREPO, KUSTOMIZATION, PROVIDER, Platform, config_map

HMAC_TOKEN = "alert-signing-key"
GITHUB_TOKEN = "ghp_test_token"


@dataclass
class Peers:
    """A webhook endpoint that checks signatures, and a GitHub-API-shaped server."""

    base: str
    hooks: list[dict[str, Any]] = field(default_factory=list)
    bad_signatures: int = 0
    statuses: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)


@pytest_asyncio.fixture(loop_scope="session")
async def peers() -> AsyncIterator[Peers]:
    found = Peers(base="")

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        expected = "sha256=" + hmac.new(HMAC_TOKEN.encode(), body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(request.headers.get("X-Signature", ""), expected):
            found.bad_signatures += 1
            return web.Response(status=401)
        found.hooks.append(json.loads(body))
        return web.Response(status=200)

    async def status(request: web.Request) -> web.Response:
        found.statuses.append(
            (request.path, await request.json(), request.headers.get("Authorization", ""))
        )
        return web.json_response({"id": len(found.statuses)}, status=201)

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_post("/api/v3/repos/{owner}/{repo}/statuses/{sha}", status)
    async with serving(app, "127.0.0.1:0") as runner:
        found.base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        yield found


async def test_a_failing_kustomization_alerts_once_and_sets_a_commit_status(
    platform: Platform, peers: Peers
) -> None:
    p = platform
    ns = p.namespace
    await make_secret(p.kube, ns, "hook", {"address": f"{peers.base}/hook", "token": HMAC_TOKEN})
    await make_secret(p.kube, ns, "github", {"token": GITHUB_TOKEN})
    providers = [
        ("hook", {"type": "generic-hmac", "secretRef": {"name": "hook"}}),
        (
            "github",
            {
                "type": "github",
                "address": f"{peers.base}/acme/app",
                "secretRef": {"name": "github"},
            },
        ),
    ]
    for name, spec in providers:
        await p.kube.create(
            PROVIDER,
            {
                "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
                "kind": "Provider",
                "metadata": {"name": name},
                "spec": spec,
            },
            namespace=ns,
        )
    for name, severity in (("hook", "error"), ("github", "info")):
        await p.kube.create(
            ALERT,
            {
                "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
                "kind": "Alert",
                "metadata": {"name": name},
                "spec": {
                    "providerRef": {"name": name},
                    "eventSeverity": severity,
                    "eventSources": [{"kind": "Kustomization", "name": "*"}],
                },
            },
            namespace=ns,
        )
    repo = p.repo("broken")
    repo.commit("c", files={"cm.yaml": config_map("x", ns)})
    repo.push()
    await p.kube.create(
        GITREPO,
        {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "metadata": {"name": "broken"},
         "spec": {"url": p.url("broken"), "interval": "1h", "ref": {"branch": "main"}}},
        namespace=ns,
    )  # fmt: skip
    await p.kube.create(
        KUSTOMIZATION,
        {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization", "metadata": {"name": "broken"},
         "spec": {"interval": "1h", "path": "./does-not-exist", "prune": True,
                  "sourceRef": {"kind": "GitRepository", "name": "broken"}}},
        namespace=ns,
    )  # fmt: skip
    obj = await p.observe.wait_reason(KUSTOMIZATION, "broken", "BuildFailed")
    message = condition(obj, "Ready")["message"]  # type: ignore[index]

    for _ in range(100):
        if peers.hooks and peers.statuses:
            break
        await asyncio.sleep(0.1)
    # The Kustomization keeps failing (retries with backoff); the alert does not repeat.
    await asyncio.sleep(3)
    assert peers.bad_signatures == 0
    assert len(peers.hooks) == 1, peers.hooks
    event = peers.hooks[0]
    assert event["involvedObject"]["kind"] == "Kustomization"
    assert event["involvedObject"]["name"] == "broken"
    assert event["involvedObject"]["namespace"] == ns
    assert event["severity"] == "error"
    assert event["reason"] == "BuildFailed"
    assert event["message"] == message
    assert event["reportingController"] == "kustomize-controller"
    assert event["metadata"]["revision"] == f"main@sha1:{repo.head}"

    assert len(peers.statuses) == 1, peers.statuses
    path, body, auth = peers.statuses[0]
    assert path == f"/api/v3/repos/acme/app/statuses/{repo.head}"
    assert body["state"] == "failure"
    assert body["context"].startswith("kustomization/broken/")
    assert auth == f"token {GITHUB_TOKEN}" or auth == f"Bearer {GITHUB_TOKEN}"


async def test_the_event_hub_validates_what_it_is_sent(platform: Platform) -> None:
    p = platform
    status, text = await p.post(p.events_url, b"{not json", {})
    assert status == 400 and "not JSON" in text
    incomplete = {"involvedObject": {"kind": "GitRepository", "namespace": "x"}, "severity": "info",
                  "timestamp": "2026-11-21T10:00:00Z", "message": "m", "reason": "R", "reportingController": "c"}  # fmt: skip
    status, text = await p.post(
        p.events_url, json.dumps(incomplete).encode(), {"Content-Type": "application/json"}
    )
    assert status == 400
    assert "involvedObject.name" in text
    incomplete["involvedObject"]["name"] = "app"  # type: ignore[index]
    incomplete["severity"] = "loud"
    status, text = await p.post(p.events_url, json.dumps(incomplete).encode(), {})
    assert status == 400 and "severity" in text
    incomplete["severity"] = "info"
    status, _ = await p.post(p.events_url, json.dumps(incomplete).encode(), {})
    assert status == 202


async def test_a_failed_delivery_becomes_a_warning_on_the_alert(platform: Platform) -> None:
    from sluice_envtest.controlplane import free_port
    from sluice_runtime.kube.resources import EVENT

    p = platform
    ns = p.namespace
    await p.kube.create(
        PROVIDER,
        {"apiVersion": "notification.toolkit.fluxcd.io/v1beta3", "kind": "Provider", "metadata": {"name": "down"},
         "spec": {"type": "generic", "address": f"http://127.0.0.1:{free_port()}/gone", "timeout": "2s"}},
        namespace=ns,
    )  # fmt: skip
    await p.kube.create(
        ALERT,
        {"apiVersion": "notification.toolkit.fluxcd.io/v1beta3", "kind": "Alert", "metadata": {"name": "down"},
         "spec": {"providerRef": {"name": "down"}, "eventSources": [{"kind": "GitRepository", "name": "*"}]}},
        namespace=ns,
    )  # fmt: skip
    await asyncio.sleep(0.5)  # the hub's caches see the new Alert and Provider
    event = {
        "involvedObject": {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "x", "namespace": ns},
        "severity": "info", "timestamp": "2026-11-21T10:00:00Z", "message": "hello", "reason": "NewArtifact",
        "reportingController": "source-controller",
    }  # fmt: skip
    status, _ = await p.post(p.events_url, json.dumps(event).encode(), {})
    assert status == 202
    warnings: list[dict[str, Any]] = []
    for _ in range(150):
        listed = await p.kube.list(EVENT, namespace=ns)
        warnings = [
            e
            for e in listed.items
            if e["involvedObject"]["name"] == "down" and e["type"] == "Warning"
        ]
        if warnings:
            break
        await asyncio.sleep(0.1)
    assert warnings, "a Warning event on the Alert"
    assert warnings[0]["involvedObject"]["kind"] == "Alert"
    assert warnings[0]["reason"] == "NotificationDispatchFailed"
    assert "127.0.0.1" in warnings[0]["message"]
