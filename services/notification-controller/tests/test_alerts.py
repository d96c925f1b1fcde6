"""Alerts end to end: controller events reach a signed webhook and a commit status API."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from structlog.testing import capture_logs

from notification_controller.connecting import tls_context
from notification_controller.signatures import verify
from sluice_envtest.certificates import ServingPki, make_serving_pki
from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.harness import condition, make_secret
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.endpoints import serving
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import ResourceType
from sluice_runtime.kube.secrets import SecretError

from .conftest import (
    ALERT,
    EVENTS_TOKEN,
    GITREPO,
    KUSTOMIZATION,
    PROVIDER,
    Platform,
    cached,
    events_auth,
    notification_alone,
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
        # As a Sluice Receiver checks it: timestamped, within a minute.
        verdict = verify(
            "generic-hmac",
            token=HMAC_TOKEN,
            headers=request.headers,
            body=body,
            now=datetime.now(UTC),
            replay_window=timedelta(minutes=1),
        )
        if not verdict.ok:
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
        assert await p.post(p.events_url, json.dumps(sent).encode(), events_auth()) == (202, "")
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
    status, text = await p.post(p.events_url, b"{not json", events_auth())
    assert status == 400 and "not JSON" in text
    incomplete = {"involvedObject": {"kind": "GitRepository", "namespace": "x"}, "severity": "info",
                  "timestamp": "2026-11-21T10:00:00Z", "message": "m", "reason": "R", "reportingController": "c"}  # fmt: skip
    status, text = await p.post(
        p.events_url,
        json.dumps(incomplete).encode(),
        {"Content-Type": "application/json", **events_auth()},
    )
    assert status == 400
    assert "involvedObject.name" in text
    incomplete["involvedObject"]["name"] = "app"  # type: ignore[index]
    incomplete["severity"] = "loud"
    status, text = await p.post(p.events_url, json.dumps(incomplete).encode(), events_auth())
    assert status == 400 and "severity" in text
    incomplete["severity"] = "info"
    status, _ = await p.post(p.events_url, json.dumps(incomplete).encode(), events_auth())
    assert status == 202


async def test_a_failed_delivery_becomes_a_warning_on_the_alert(platform: Platform) -> None:
    from sluice_envtest.controlplane import free_port
    from sluice_runtime.kube.resources import EVENT

    p = platform
    ns = p.namespace
    # Credentials in the address are the user's secret: they never reach the event.
    address = f"http://ops:s3cret-pw@127.0.0.1:{free_port()}/gone"
    down = {"type": "generic", "address": address, "timeout": "2s"}
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
    assert "s3cret-pw" not in json.dumps(warnings)
    assert "ops" not in warnings[0]["message"]


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
    assert p.counts.delivered == 2


async def test_a_suspended_provider_delivers_nothing(alone: Platform, peers: Peers) -> None:
    p = alone
    ns = p.namespace
    quiet = {"type": "generic", "address": f"{peers.base}/generic/quiet", "suspend": True}
    await alerting(p, "quiet", quiet, GIT_SOURCES)
    await emit(p, event(ns, "app"))
    assert peers.at("quiet") == []
    assert p.counts.delivered == 0
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


async def test_forged_events_are_refused_and_reach_no_provider(
    alone: Platform, peers: Peers
) -> None:
    """Anyone in the cluster can reach the hub: without a controller's token an event
    is refused before it is read, and no Provider's credentials are used for it."""
    p = alone
    await alerting(p, "forged", {"type": "generic", "address": f"{peers.base}/generic/forged"},
                   GIT_SOURCES)  # fmt: skip
    body = json.dumps(event(p.namespace, "app", "forged")).encode()
    refused = [
        ({}, 401, "event refused: missing bearer token"),
        ({"Authorization": f"Basic {EVENTS_TOKEN}"}, 401, "event refused: missing bearer token"),
        (events_auth("not-the-token"), 401, "event refused: token not authenticated"),
    ]
    for headers, status, text in refused:
        assert await p.post(p.events_url, body, headers) == (status, text)
    await p.hub.drain()
    assert p.counts.refused == 3
    assert p.counts.received == 0
    assert peers.at("forged") == []
    await emit(p, event(p.namespace, "app", "genuine"))
    assert [d.event["message"] for d in peers.at("forged")] == ["genuine"]


async def service_account_token(p: Platform, name: str) -> str:
    """A token of ServiceAccount `name` in the test's namespace, from the API server."""
    base = f"/api/v1/namespaces/{p.namespace}/serviceaccounts"
    await p.kube.request(
        "POST",
        base,
        body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )
    answer = await p.kube.request(
        "POST",
        f"{base}/{name}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
    )
    return str(answer["status"]["token"])


async def test_controller_service_accounts_are_checked_by_token_review(
    cluster: Cluster, kube: KubeClient, namespace: str, git_http: GitHttpServer, peers: Peers
) -> None:
    flags = ("--events-service-accounts", f"{namespace}:source-controller")
    async with notification_alone(cluster, kube, namespace, git_http, *flags) as p:
        await alerting(p, "sa", {"type": "generic", "address": f"{peers.base}/generic/sa"},
                       GIT_SOURCES)  # fmt: skip
        controller = await service_account_token(p, "source-controller")
        tenant = await service_account_token(p, "tenant")
        for message in ("one", "two"):
            body = json.dumps(event(namespace, "app", message)).encode()
            assert await p.post(p.events_url, body, events_auth(controller)) == (202, "")
        body = json.dumps(event(namespace, "app", "from a tenant")).encode()
        assert await p.post(p.events_url, body, events_auth(tenant)) == (
            403,
            f"event refused: system:serviceaccount:{namespace}:tenant may not post events",
        )
        await p.hub.drain()
        assert sorted(d.event["message"] for d in peers.at("sa")) == ["one", "two"]
        assert p.hub.authenticator.reviews == 2, "the controller's token was reviewed once"


@dataclass
class SlowAndFast:
    """A Provider endpoint that never answers in time, and one that answers at once."""

    base: str
    release: asyncio.Event
    in_flight: int = 0
    most_in_flight: int = 0
    slow_calls: int = 0
    fast: list[str] = field(default_factory=list)


@pytest_asyncio.fixture(loop_scope="session")
async def slow_and_fast() -> AsyncIterator[SlowAndFast]:
    found = SlowAndFast(base="", release=asyncio.Event())

    async def slow(request: web.Request) -> web.Response:
        found.slow_calls += 1
        found.in_flight += 1
        found.most_in_flight = max(found.most_in_flight, found.in_flight)
        try:
            await found.release.wait()
        finally:
            found.in_flight -= 1
        return web.Response(status=200)

    async def fast(request: web.Request) -> web.Response:
        found.fast.append((await request.json())["message"])
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/slow", slow)
    app.router.add_post("/fast", fast)
    async with serving(app, "127.0.0.1:0") as runner:
        found.base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        yield found
        found.release.set()


async def post_events(p: Platform, *events: dict[str, Any]) -> list[tuple[int, str]]:
    return [await p.post(p.events_url, json.dumps(e).encode(), events_auth()) for e in events]


async def test_a_slow_provider_cannot_hold_the_others(
    cluster: Cluster,
    kube: KubeClient,
    namespace: str,
    git_http: GitHttpServer,
    slow_and_fast: SlowAndFast,
) -> None:
    """Four dispatch workers, one tenant's Provider that hangs with `timeout: 600m`:
    the timeout is capped, the Provider gets its own two slots, the others deliver."""
    peer = slow_and_fast
    flags = ("--provider-timeout-max", "1s", "--provider-concurrency", "2")
    async with notification_alone(cluster, kube, namespace, git_http, *flags) as p:
        slow = {"type": "generic", "address": f"{peer.base}/slow", "timeout": "600m"}
        await alerting(p, "slow", slow, [{"kind": "GitRepository", "name": "slow"}])
        fast = {"type": "generic", "address": f"{peer.base}/fast"}
        await alerting(p, "fast", fast, [{"kind": "GitRepository", "name": "fast"}])
        slow_events = [event(namespace, "slow", f"slow {n}") for n in range(4)]
        fast_events = [event(namespace, "fast", f"fast {n}") for n in range(3)]
        with capture_logs() as entries:
            answers = await post_events(p, *slow_events, *fast_events)
            assert answers == [(202, "")] * 7
            started = time.monotonic()
            await until(lambda: len(peer.fast) >= 3, timeout=10)
            assert sorted(peer.fast) == ["fast 0", "fast 1", "fast 2"]
            assert time.monotonic() - started < 3, "the fast Provider waited for the slow one"
            assert peer.most_in_flight == 2, "the slow Provider holds its own two slots only"
            assert p.hub.lanes.busy(f"{namespace}/slow") == 4
            # The cap: 600m became 1s per attempt, so the slow lane moves on by itself
            # (four attempts and their backoff, about 7.5s).
            await until(lambda: len(failed(entries)) >= 2, timeout=30)
        assert len(failed(entries)) == 2
        assert all("timed out after 1s (after 4 attempts)" in f for f in failed(entries))


async def until(check: Callable[[], bool], *, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)


def failed(entries: list[dict[str, Any]]) -> list[str]:
    return [e["error"] for e in entries if e["event"] == "notification failed"]


async def test_the_hub_bounds_what_it_holds_in_bytes(
    cluster: Cluster,
    kube: KubeClient,
    namespace: str,
    git_http: GitHttpServer,
    slow_and_fast: SlowAndFast,
) -> None:
    peer = slow_and_fast
    flags = ("--event-queue-bytes", "8000", "--provider-concurrency", "1")
    async with notification_alone(cluster, kube, namespace, git_http, *flags) as p:
        slow = {"type": "generic", "address": f"{peer.base}/slow"}
        await alerting(p, "slow", slow, [{"kind": "GitRepository", "name": "slow"}])
        big = "x" * 3000  # about 3.4kB as JSON: two fit in 8000 bytes, a third does not
        first = await post_events(p, event(namespace, "slow", f"{big} 0"))
        second = await post_events(p, event(namespace, "slow", f"{big} 1"))
        assert first == second == [(202, "")]
        await until(lambda: p.hub.lanes.busy(f"{namespace}/slow") == 2)  # both wait on it
        with capture_logs() as entries:
            refused = await post_events(p, event(namespace, "slow", f"{big} 2"))
        assert refused == [(503, "event queue full")]
        assert p.hub.dropped == {"event queue full": 1}
        [logged] = [e for e in entries if e["event"] == "event dropped"]
        assert logged["reason"] == "event queue full"
        # Small events still fit beside them, and are delivered once there is room.
        assert await post_events(p, event(namespace, "slow", "small")) == [(202, "")]
        peer.release.set()
        await asyncio.wait_for(p.hub.drain(), timeout=30)
        assert p.hub.budget.used == 0


@pytest.mark.parametrize(
    ("field", "authorization"),
    [
        pytest.param("proxySecretRef", f"Basic {base64.b64encode(b'u:pw').decode()}", id="secret"),
        pytest.param("proxy", "", id="deprecated-address"),
    ],
)
async def test_the_provider_proxy_is_honoured(
    alone: Platform, field: str, authorization: str
) -> None:
    """Events go through the Provider's proxy (with the Secret's credentials), as in Flux;
    the deprecated `spec.proxy` names the address alone."""
    p = alone
    seen: list[tuple[str, str, str]] = []

    async def proxy(request: web.Request) -> web.Response:
        # A forward proxy gets the absolute URL; this one answers for the target.
        seen.append(
            (request.method, str(request.url), request.headers.get("Proxy-Authorization", ""))
        )
        return web.Response(status=200)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy)
    async with serving(app, "127.0.0.1:0") as runner:
        proxy_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        await make_secret(
            p.kube, p.namespace, "egress", {"address": proxy_url, "username": "u", "password": "pw"}
        )
        target: dict[str, Any] = {
            "type": "generic",
            "address": "http://alerts.example.invalid/hook",
        }
        target[field] = {"name": "egress"} if field == "proxySecretRef" else proxy_url
        await alerting(p, "proxied", target, GIT_SOURCES)
        await emit(p, event(p.namespace, "app"))
    assert seen == [("POST", "http://alerts.example.invalid/hook", authorization)]
    assert p.counts.delivered == 1


async def test_a_v1beta1_provider_proxy_is_honoured(alone: Platform) -> None:
    """`spec.proxy`, the field the old API versions had before proxySecretRef: a
    Provider written as v1beta1 sends its events through it."""
    p = alone
    seen: list[tuple[str, str]] = []

    async def proxy(request: web.Request) -> web.Response:
        seen.append((request.method, str(request.url)))
        return web.Response(status=200)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy)
    old = ResourceType(PROVIDER.group, "v1beta1", PROVIDER.plural, PROVIDER.kind)
    async with serving(app, "127.0.0.1:0") as runner:
        spec = {
            "type": "generic",
            "address": "http://old-alerts.example.invalid/hook",
            "proxy": f"http://127.0.0.1:{runner.addresses[0][1]}",
        }
        await p.create(old, "old-proxied", spec)
        await p.create(
            ALERT,
            "old-proxied",
            {"providerRef": {"name": "old-proxied"}, "eventSources": GIT_SOURCES},
        )
        await cached(p.hub.providers, f"{p.namespace}/old-proxied")
        await cached(p.hub.alerts, f"{p.namespace}/old-proxied")
        await emit(p, event(p.namespace, "app"))
    assert ("POST", "http://old-alerts.example.invalid/hook") in seen


@contextlib.asynccontextmanager
async def mtls_peer(pki: ServingPki) -> AsyncIterator[tuple[str, list[str]]]:
    """An HTTPS endpoint that accepts only clients with a certificate from `pki`'s CA."""
    received: list[str] = []

    async def hook(request: web.Request) -> web.Response:
        received.append((await request.json())["message"])
        return web.Response(status=200)

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cadata=pki.ca.cert.decode())
    with tempfile.TemporaryDirectory() as directory:
        paths = pki.write(Path(directory))
        context.load_cert_chain(paths["tls.crt"], paths["tls.key"])
    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    try:
        yield f"https://127.0.0.1:{runner.addresses[0][1]}/hook", received
    finally:
        await runner.cleanup()


async def test_the_provider_cert_secret_is_honoured_for_mtls(alone: Platform) -> None:
    p = alone
    pki = make_serving_pki(client_common_name="notification-controller")
    assert pki.client is not None
    async with mtls_peer(pki) as (url, received):
        await make_secret(
            p.kube,
            p.namespace,
            "provider-tls",
            {
                "ca.crt": pki.ca.cert.decode(),
                "tls.crt": pki.client.cert.decode(),
                "tls.key": pki.client.key.decode(),
            },
        )
        await alerting(p, "mtls", {"type": "generic", "address": url,
                                   "certSecretRef": {"name": "provider-tls"}},
                       [{"kind": "GitRepository", "name": "app"}])  # fmt: skip
        # Without it, the private CA is not trusted: the certificate is refused.
        await alerting(p, "system-cas", {"type": "generic", "address": url, "timeout": "2s"},
                       [{"kind": "GitRepository", "name": "other"}])  # fmt: skip
        with capture_logs() as entries:
            await emit(p, event(p.namespace, "app", "over mtls"), event(p.namespace, "other"))
    assert received == ["over mtls"]
    assert [e["error"] for e in entries if e["event"] == "notification failed"] == [
        "generic provider at 127.0.0.1:"
        f"{url.split(':')[2].split('/')[0]} unreachable: ClientConnectorCertificateError "
        "(after 4 attempts)"
    ]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        pytest.param({}, "has none of 'ca.crt', 'tls.crt' and 'tls.key'", id="empty"),
        pytest.param({"ca.crt": "nope"}, "key 'ca.crt' is not a PEM certificate", id="bad-ca"),
        pytest.param({"tls.crt": "x"}, "needs both 'tls.crt' and 'tls.key'", id="cert-no-key"),
        pytest.param(
            {"tls.crt": "x", "tls.key": "y"},
            "keys 'tls.crt' and 'tls.key' are not a PEM certificate and its key",
            id="bad-pair",
        ),
    ],
)
def test_a_bad_cert_secret_is_named(data: dict[str, str], problem: str) -> None:
    with pytest.raises(SecretError) as raised:
        tls_context(data, secret="ns/provider-tls")
    assert str(raised.value) == f"secret 'ns/provider-tls' {problem}"


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
