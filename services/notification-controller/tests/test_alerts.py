"""Alerts end to end: controller events reach a signed webhook and a commit status API."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

from sluice_envtest.harness import condition, make_secret
from sluice_runtime.serving import serving

from .conftest import (
    ALERT,
    GITREPO,
    KUSTOMIZATION,
    PROVIDER,
    Platform,
    cached,
    parked,
)

HMAC_TOKEN = "alert-signing-key"
GITHUB_TOKEN = "ghp_test_token"


@dataclass
class Peers:
    """A webhook endpoint that checks signatures, and a GitHub-API-shaped server."""

    base: str
    hooks: list[dict[str, Any]] = field(default_factory=list)
    bad_signatures: int = 0
    statuses: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)
    generic: list[Delivery] = field(default_factory=list)
    """What `/generic/<name>` received, in order."""

    def at(self, name: str) -> list[Delivery]:
        return [delivery for delivery in self.generic if delivery.name == name]


@dataclass(frozen=True)
class Delivery:
    name: str
    headers: dict[str, str]
    event: dict[str, Any]


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

    async def generic(request: web.Request) -> web.Response:
        found.generic.append(
            Delivery(request.match_info["name"], dict(request.headers), await request.json())
        )
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_post("/generic/{name}", generic)
    app.router.add_post("/api/v3/repos/{owner}/{repo}/statuses/{sha}", status)
    async with serving(app, "127.0.0.1:0") as runner:
        found.base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        yield found


async def alerting(
    p: Platform, name: str, provider: dict[str, Any], sources: list[dict[str, Any]], **spec: Any
) -> None:
    """A Provider and an Alert on it, both named `name`, once the hub's caches hold them."""
    await p.create(PROVIDER, name, provider)
    await p.create(ALERT, name, {"providerRef": {"name": name}, "eventSources": sources, **spec})
    await cached(p.hub.providers, f"{p.namespace}/{name}")
    await cached(p.hub.alerts, f"{p.namespace}/{name}")


def event(namespace: str, name: str, message: str = "hello", **metadata: str) -> dict[str, Any]:
    """A source-controller event about GitRepository `namespace/name`."""
    return {
        "involvedObject": {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "GitRepository",
            "name": name,
            "namespace": namespace,
        },
        "severity": "info",
        "timestamp": "2026-11-21T10:00:00Z",
        "message": message,
        "reason": "NewArtifact",
        "metadata": {f"source.toolkit.fluxcd.io/{k}": v for k, v in metadata.items()},
        "reportingController": "source-controller",
    }


async def emit(p: Platform, *events: dict[str, Any]) -> None:
    """POST events to the hub as a controller does, and wait until all are dispatched."""
    for sent in events:
        assert await p.post(p.events_url, json.dumps(sent).encode(), {}) == (202, "")
    await p.hub.drain()


GIT_SOURCES = [{"kind": "GitRepository", "name": "*"}]


async def test_a_failing_kustomization_alerts_once_and_sets_a_commit_status(
    platform: Platform, peers: Peers
) -> None:
    p = platform
    ns = p.namespace
    await make_secret(p.kube, ns, "hook", {"address": f"{peers.base}/hook", "token": HMAC_TOKEN})
    await make_secret(p.kube, ns, "github", {"token": GITHUB_TOKEN})
    kustomizations = [{"kind": "Kustomization", "name": "*"}]
    await alerting(
        p,
        "hook",
        {"type": "generic-hmac", "secretRef": {"name": "hook"}},
        kustomizations,
        eventSeverity="error",
    )
    await alerting(
        p,
        "github",
        {"type": "github", "address": f"{peers.base}/acme/app", "secretRef": {"name": "github"}},
        kustomizations,
        eventSeverity="info",
    )
    repo = await p.delivery("broken", path="./does-not-exist")
    obj = await p.observe.wait_reason(KUSTOMIZATION, "broken", "BuildFailed")
    message = condition(obj, "Ready")["message"]  # type: ignore[index]

    # Generous: on a loaded machine the event crosses two processes and retries.
    for _ in range(300):
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
    down = {"type": "generic", "address": f"http://127.0.0.1:{free_port()}/gone", "timeout": "2s"}
    await alerting(p, "down", down, GIT_SOURCES)
    await emit(p, event(ns, "x"))
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


async def test_the_provider_secret_wins_over_its_spec_and_its_headers_are_sent(
    alone: Platform, peers: Peers
) -> None:
    p = alone
    ns = p.namespace
    await make_secret(p.kube, ns, "signed", {"address": f"{peers.base}/hook", "token": HMAC_TOKEN})
    await make_secret(p.kube, ns, "headed", {"headers": "X-Team: web\nX-Trace-Id: abc123\n"})
    signed = {
        "type": "generic-hmac",
        "address": f"{peers.base}/generic/spec",
        "secretRef": {"name": "signed"},
    }
    headed = {
        "type": "generic",
        "address": f"{peers.base}/generic/headed",
        "secretRef": {"name": "headed"},
    }
    await alerting(p, "signed", signed, GIT_SOURCES)
    await alerting(p, "headed", headed, GIT_SOURCES)
    await emit(p, event(ns, "app"))
    assert peers.bad_signatures == 0, "signed with the secret's token"
    assert [hook["involvedObject"]["name"] for hook in peers.hooks] == ["app"]
    assert peers.at("spec") == [], "the secret's address wins over spec.address"
    [delivery] = peers.at("headed")
    assert delivery.headers["X-Team"] == "web"
    assert delivery.headers["X-Trace-Id"] == "abc123"
    assert delivery.headers["gotk-component"] == "source-controller"
    assert delivery.event["involvedObject"]["name"] == "app"
    assert p.hub.delivered == 2


async def test_a_suspended_provider_delivers_nothing(alone: Platform, peers: Peers) -> None:
    p = alone
    ns = p.namespace
    quiet = {"type": "generic", "address": f"{peers.base}/generic/quiet", "suspend": True}
    await alerting(p, "quiet", quiet, GIT_SOURCES)
    await emit(p, event(ns, "app"))
    assert peers.at("quiet") == []
    assert p.hub.delivered == 0
    await p.kube.merge_patch(PROVIDER, "quiet", {"spec": {"suspend": False}}, namespace=ns)
    await cached(p.hub.providers, f"{ns}/quiet", lambda o: not o["spec"].get("suspend"))
    await emit(p, event(ns, "app"))
    # What arrived while suspended was dropped, not counted as sent: the same event goes out.
    assert [d.event["involvedObject"]["name"] for d in peers.at("quiet")] == ["app"]


async def test_alert_match_labels_are_checked_against_the_live_object(
    alone: Platform, peers: Peers
) -> None:
    p = alone
    ns = p.namespace
    await parked(p, "web-app", team="web")
    await parked(p, "data-app", team="data")
    web = [{"kind": "GitRepository", "name": "*", "matchLabels": {"team": "web"}}]
    await alerting(p, "web", {"type": "generic", "address": f"{peers.base}/generic/web"}, web)
    await emit(p, event(ns, "web-app"), event(ns, "data-app"), event(ns, "ghost"))
    assert [d.event["involvedObject"]["name"] for d in peers.at("web")] == ["web-app"]
    await p.kube.merge_patch(
        GITREPO, "data-app", {"metadata": {"labels": {"team": "web"}}}, namespace=ns
    )
    await emit(p, event(ns, "data-app"))
    assert [d.event["involvedObject"]["name"] for d in peers.at("web")] == ["web-app", "data-app"]


async def test_an_identical_event_is_delivered_once(alone: Platform, peers: Peers) -> None:
    p = alone
    ns = p.namespace
    await alerting(
        p, "once", {"type": "generic", "address": f"{peers.base}/generic/once"}, GIT_SOURCES
    )
    first = event(ns, "app", "hello", revision="main@sha1:aaa")
    later = {**first, "timestamp": "2026-11-21T10:01:00Z", "reportingInstance": "other-pod"}
    await emit(p, first, later)
    assert len(peers.at("once")) == 1, "the same event again, later, from another instance"
    await emit(
        p,
        event(ns, "app", "hello again", revision="main@sha1:aaa"),
        event(ns, "app", "hello", revision="main@sha1:bbb"),
        first,
    )
    sent = sorted((d.event["message"], d.event["metadata"]["revision"]) for d in peers.at("once"))
    assert sent == [
        ("hello", "main@sha1:aaa"),
        ("hello", "main@sha1:bbb"),
        ("hello again", "main@sha1:aaa"),
    ]


async def cross_namespace_deliveries(p: Platform, peers: Peers) -> list[str]:
    """Where the events an Alert forwards come from, when one of its sources is another
    namespace."""
    sources = [*GIT_SOURCES, {"kind": "GitRepository", "name": "*", "namespace": "elsewhere"}]
    await alerting(p, "both", {"type": "generic", "address": f"{peers.base}/generic/both"}, sources)
    await emit(p, event("elsewhere", "theirs"), event(p.namespace, "ours"))
    return sorted(d.event["involvedObject"]["namespace"] for d in peers.at("both"))


async def test_alerts_see_other_namespaces_by_default(alone: Platform, peers: Peers) -> None:
    assert await cross_namespace_deliveries(alone, peers) == sorted(["elsewhere", alone.namespace])


async def test_no_cross_namespace_refs_keeps_alerts_to_their_namespace(
    strict: Platform, peers: Peers
) -> None:
    assert await cross_namespace_deliveries(strict, peers) == [strict.namespace]


async def test_an_alert_with_an_invalid_pattern_stalls_naming_it(
    alone: Platform, peers: Peers
) -> None:
    p = alone
    ns = p.namespace
    provider = {"type": "generic", "address": f"{peers.base}/generic/patterns"}
    await alerting(p, "valid", provider, GIT_SOURCES, exclusionList=["(a+)+$"])
    await p.create(
        ALERT,
        "invalid",
        {
            "providerRef": {"name": "valid"},
            "eventSources": GIT_SOURCES,
            "inclusionList": ["ok"],
            "exclusionList": ["fine", "(?<=x)y"],
        },
    )
    stalled = await p.observe.wait(
        ALERT,
        "invalid",
        lambda o: (condition(o, "Stalled") or {}).get("status") == "True",
        what="Stalled",
    )
    message = condition(stalled, "Stalled")["message"]  # type: ignore[index]
    assert message.startswith("invalid regular expression in spec.exclusionList[1] '(?<=x)y': ")
    assert "no backreferences or lookaround" in message
    assert condition(stalled, "Ready")["status"] == "False"  # type: ignore[index]
    valid = await p.observe.wait_ready(ALERT, "valid")
    assert condition(valid, "Ready")["reason"] == "Succeeded"  # type: ignore[index]
    # The valid Alert's exclusion is matched in linear time by the hub: a
    # backtracking engine would block every delivery behind this one message.
    await parked(p, "src")
    await emit(p, event(ns, "src", message="a" * 50 + "b"))
    assert [d.event["message"] for d in peers.at("patterns")] == ["a" * 50 + "b"]


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("zoom", id="zoom-flux-2-8"),
        pytest.param("githubpullrequestcomment", id="github-pr-comment"),
        pytest.param("telegram", id="telegram"),
    ],
)
async def test_a_provider_of_an_unsupported_type_stalls_naming_it(
    alone: Platform, peers: Peers, kind: str
) -> None:
    """Flux's types all apply; those Sluice cannot deliver to say so on the Provider."""
    p = alone
    await p.create(PROVIDER, "unsupported", {"type": kind, "address": f"{peers.base}/x"})
    await p.create(PROVIDER, "supported", {"type": "generic", "address": f"{peers.base}/x"})
    stalled = await p.observe.wait(
        PROVIDER,
        "unsupported",
        lambda o: (condition(o, "Stalled") or {}).get("status") == "True",
        what="Stalled",
    )
    message = condition(stalled, "Stalled")["message"]  # type: ignore[index]
    assert message.startswith(f"spec.type '{kind}' is not supported by this version of Sluice")
    assert condition(stalled, "Ready")["status"] == "False"  # type: ignore[index]
    ready = await p.observe.wait_ready(PROVIDER, "supported")
    assert condition(ready, "Ready")["message"] == "Initialized"  # type: ignore[index]
