"""Outbound delivery against real HTTP servers on loopback: payloads, signatures, retries."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from multidict import CIMultiDict

from notification_controller.commitstatuses import commit_sha, commit_state, describe_reason
from notification_controller.hub import provider_timeout
from notification_controller.providers import DeliveryError, build_request, deliver
from notification_controller.signatures import verify
from sluice_api.notification import Provider

TOKEN = "pr0vider-t0ken"
SHA = "0123456789abcdef0123456789abcdef01234567"
UID = "0c9c2e41-5b6d-4a7e-9f10-1234567890ab"
NOW = 1_735_787_045.0  # 2025-01-02T03:04:05Z


@dataclass
class Recorded:
    method: str
    path: str
    raw_path: str
    headers: CIMultiDict[str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Peer:
    """An HTTP server on loopback that records requests and answers from a script."""

    url: str = ""
    requests: list[Recorded] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(
            Recorded(
                request.method,
                request.path,
                request.raw_path,
                CIMultiDict(request.headers),
                await request.read(),
            )
        )
        if self.delay:
            await asyncio.sleep(self.delay)
        status = self.statuses.pop(0) if self.statuses else 200
        return web.Response(status=status, headers=self.headers, text="{}")


@pytest.fixture
async def peer() -> AsyncIterator[Peer]:
    server = Peer()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    server.url = f"http://127.0.0.1:{port}"
    try:
        yield server
    finally:
        await runner.cleanup()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


def provider(type_: str, *, uid: str | None = UID, **spec: Any) -> Provider:
    metadata: dict[str, Any] = {"name": "chat", "namespace": "flux-system"}
    if uid:
        metadata["uid"] = uid
    return Provider.model_validate(
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Provider",
            "metadata": metadata,
            "spec": {"type": type_, **spec},
        }
    )


def event(
    *,
    severity: str = "error",
    reason: str = "HealthCheckFailed",
    metadata: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "involvedObject": {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "name": "Apps",
            "namespace": "flux-system",
            "uid": "1234",
        },
        "severity": severity,
        "timestamp": "2025-01-02T03:04:05Z",
        "message": "health check failed after 30s",
        "reason": reason,
        "metadata": {"revision": f"main@sha1:{SHA}", "env": "prod"}
        if metadata is None
        else metadata,
        "reportingController": "kustomize-controller",
        "reportingInstance": "kustomize-controller-0",
    }


async def send(
    session: aiohttp.ClientSession,
    p: Provider,
    evt: dict[str, Any],
    *,
    address: str,
    token: str | None = TOKEN,
    headers: dict[str, str] | None = None,
    timeout: float = 5.0,
    retries: int = 3,
) -> None:
    await deliver(
        session,
        p,
        evt,
        address=address,
        token=token,
        headers=headers or {},
        timeout=timeout,
        retries=retries,
        backoff=0.01,
        clock=lambda: NOW,
    )


# Payloads ------------------------------------------------------------------------


async def test_generic_posts_the_event_with_headers(
    peer: Peer, session: aiohttp.ClientSession
) -> None:
    evt = event()
    await send(
        session,
        provider("generic"),
        evt,
        address=f"{peer.url}/hooks/flux?x=1",
        headers={"X-Team": "platform", "Authorization": "Basic abc"},
    )
    [request] = peer.requests
    assert request.method == "POST"
    assert request.path == "/hooks/flux"
    assert request.json() == evt
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["gotk-component"] == "kustomize-controller"
    assert request.headers["X-Team"] == "platform"
    assert request.headers["Authorization"] == "Basic abc"
    assert "X-Signature" not in request.headers


async def test_generic_hmac_is_verifiable_by_the_receiver(
    peer: Peer, session: aiohttp.ClientSession
) -> None:
    evt = event()
    await send(session, provider("generic-hmac"), evt, address=f"{peer.url}/hook")
    [request] = peer.requests
    assert request.json() == evt
    assert "X-Signature" not in request.headers, "no body-only signature to replay"
    assert request.headers["X-Signature-Timestamped"].startswith("sha256=")
    assert request.headers["X-Signature-Timestamp"] == str(int(NOW))
    now = datetime.fromtimestamp(NOW, UTC)

    def check(headers: CIMultiDict[str], window: timedelta | None, *, at: datetime = now) -> bool:
        return verify(
            "generic-hmac",
            token=TOKEN,
            headers=headers,
            body=request.body,
            now=at,
            replay_window=window,
        ).ok

    # Replay-protected: the timestamp is signed with the body.
    assert check(request.headers, timedelta(minutes=1))
    assert not check(request.headers, timedelta(minutes=1), at=now + timedelta(minutes=2))
    # Accepted by a receiver that takes Flux's body-only form too (no window).
    assert check(request.headers, None)
    # Stripped of its timestamp, a captured request verifies nowhere, not even
    # where Flux's body-only form is accepted.
    stripped = CIMultiDict(request.headers)
    del stripped["X-Signature-Timestamp"]
    assert not check(stripped, None)
    assert not check(stripped, timedelta(minutes=1))
    # A different token or a changed body does not verify.
    assert not verify(
        "generic-hmac",
        token="other",
        headers=request.headers,
        body=request.body,
        now=now,
        replay_window=None,
    ).ok


async def test_generic_hmac_needs_a_token(peer: Peer, session: aiohttp.ClientSession) -> None:
    with pytest.raises(DeliveryError, match="needs a token"):
        await send(session, provider("generic-hmac"), event(), address=peer.url, token=None)
    assert peer.requests == []


async def test_slack_message(peer: Peer, session: aiohttp.ClientSession) -> None:
    await send(
        session,
        provider("slack", channel="alerts", username="flux"),
        event(),
        address=f"{peer.url}/services/T0/B0/xyz",
    )
    [request] = peer.requests
    assert request.path == "/services/T0/B0/xyz"
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.json() == {
        "channel": "alerts",
        "username": "flux",
        "attachments": [
            {
                "color": "danger",
                "author_name": "kustomization/Apps.flux-system",
                "text": "health check failed after 30s",
                "mrkdwn_in": ["text"],
                "fields": [
                    {"title": "env", "value": "prod", "short": False},
                    {"title": "revision", "value": f"main@sha1:{SHA}", "short": False},
                ],
            }
        ],
    }


async def test_slack_defaults(peer: Peer, session: aiohttp.ClientSession) -> None:
    await send(
        session, provider("slack"), event(severity="info"), address=f"{peer.url}/hook", token=None
    )
    [request] = peer.requests
    payload = request.json()
    assert "channel" not in payload
    assert payload["username"] == "kustomize-controller"
    assert payload["attachments"][0]["color"] == "good"
    assert "Authorization" not in request.headers


@pytest.mark.parametrize(
    "path", ["/api/webhooks/1/abc", "/api/webhooks/1/abc/", "/api/webhooks/1/abc/slack"]
)
async def test_discord_uses_the_slack_endpoint(
    peer: Peer, session: aiohttp.ClientSession, path: str
) -> None:
    await send(
        session, provider("discord", channel="ignored"), event(), address=f"{peer.url}{path}"
    )
    [request] = peer.requests
    assert request.path == "/api/webhooks/1/abc/slack"
    payload = request.json()
    assert "channel" not in payload
    assert payload["attachments"][0]["color"] == "danger"


async def test_msteams_adaptive_card(peer: Peer, session: aiohttp.ClientSession) -> None:
    await send(session, provider("msteams"), event(), address=f"{peer.url}/workflows/run")
    [request] = peer.requests
    payload = request.json()
    assert payload["type"] == "message"
    [attachment] = payload["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert card["type"] == "AdaptiveCard"
    texts = [block.get("text") for block in card["body"]]
    assert "kustomization/Apps.flux-system" in texts
    assert "health check failed after 30s" in texts
    [facts] = [block["facts"] for block in card["body"] if block["type"] == "FactSet"]
    assert facts == [
        {"title": "env", "value": "prod"},
        {"title": "revision", "value": f"main@sha1:{SHA}"},
    ]


def test_msteams_legacy_connector_gets_a_message_card() -> None:
    request = build_request(
        provider("msteams"),
        event(),
        address="https://example.webhook.office.com/webhookb2/abc",
        token=None,
        headers={},
        now=NOW,
    )
    assert request is not None
    payload = json.loads(request.body)
    assert payload["@type"] == "MessageCard"
    assert payload["themeColor"] == "FF0000"
    assert payload["sections"][0]["activityTitle"] == "health check failed after 30s"


# Commit status -----------------------------------------------------------------


async def test_github_commit_status(peer: Peer, session: aiohttp.ClientSession) -> None:
    await send(session, provider("github"), event(), address=f"{peer.url}/acme/fleet.git")
    [request] = peer.requests
    assert request.method == "POST"
    assert request.path == f"/api/v3/repos/acme/fleet/statuses/{SHA}"
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.headers["Accept"] == "application/vnd.github+json"
    assert request.json() == {
        "state": "failure",
        "context": "kustomization/apps/0c9c2e41",
        "description": "health check failed",
    }


async def test_gitlab_commit_status(peer: Peer, session: aiohttp.ClientSession) -> None:
    evt = event(severity="info", reason="ReconciliationSucceeded")
    await send(session, provider("gitlab"), evt, address=f"{peer.url}/group/sub/project")
    [request] = peer.requests
    assert request.raw_path == f"/api/v4/projects/group%2Fsub%2Fproject/statuses/{SHA}"
    assert request.headers["PRIVATE-TOKEN"] == TOKEN
    assert request.json() == {
        "state": "success",
        "name": "kustomization/apps/0c9c2e41",
        "description": "reconciliation succeeded",
    }


@pytest.mark.parametrize("type_", ["github", "gitlab"])
@pytest.mark.parametrize(
    "evt",
    [
        pytest.param(event(metadata={"env": "prod"}), id="no-revision"),
        pytest.param(event(metadata={}), id="no-metadata"),
        pytest.param(event(reason="Progressing"), id="progressing"),
    ],
)
async def test_commit_status_skips(
    peer: Peer, session: aiohttp.ClientSession, type_: str, evt: dict[str, Any]
) -> None:
    await send(session, provider(type_), evt, address=f"{peer.url}/acme/fleet")
    assert peer.requests == []


def test_origin_revision_wins() -> None:
    origin = "f" * 40
    evt = event(metadata={"revision": f"latest@sha256:{'a' * 64}", "originRevision": origin})
    request = build_request(
        provider("github"),
        evt,
        address="https://github.com/acme/fleet",
        token=TOKEN,
        headers={},
        now=NOW,
    )
    assert request is not None
    assert request.url == f"https://api.github.com/repos/acme/fleet/statuses/{origin}"


@pytest.mark.parametrize(
    ("type_", "address", "url"),
    [
        pytest.param(
            "github",
            "https://github.com/acme/fleet",
            f"https://api.github.com/repos/acme/fleet/statuses/{SHA}",
            id="github-com",
        ),
        pytest.param(
            "github",
            "git@github.com:acme/fleet.git",
            f"https://api.github.com/repos/acme/fleet/statuses/{SHA}",
            id="github-scp",
        ),
        pytest.param(
            "github",
            "ssh://git@ghe.example.com/acme/fleet",
            f"https://ghe.example.com/api/v3/repos/acme/fleet/statuses/{SHA}",
            id="github-enterprise-ssh",
        ),
        pytest.param(
            "gitlab",
            "https://gitlab.com/acme/platform/fleet.git",
            f"https://gitlab.com/api/v4/projects/acme%2Fplatform%2Ffleet/statuses/{SHA}",
            id="gitlab-com",
        ),
        pytest.param(
            "gitlab",
            "https://git.example.com:8443/acme/fleet",
            f"https://git.example.com:8443/api/v4/projects/acme%2Ffleet/statuses/{SHA}",
            id="gitlab-self-hosted-port",
        ),
    ],
)
def test_commit_status_api_urls(type_: str, address: str, url: str) -> None:
    request = build_request(
        provider(type_), event(), address=address, token=TOKEN, headers={}, now=NOW
    )
    assert request is not None
    assert request.url == url


@pytest.mark.parametrize(
    ("type_", "changes", "address", "token", "match"),
    [
        pytest.param("github", {}, "https://github.com/acme", TOKEN, "owner", id="no-repo"),
        pytest.param("github", {}, "https://github.com/acme/fleet", None, "token", id="no-token"),
        pytest.param("gitlab", {}, "https://gitlab.com/acme/fleet", "", "token", id="gl-no-token"),
        pytest.param(
            "github",
            {"uid": None},
            "https://github.com/acme/fleet",
            TOKEN,
            "uid",
            id="no-uid",
        ),
        pytest.param("github", {}, "https://github.com/", TOKEN, "not a Git", id="no-path"),
    ],
)
def test_commit_status_misconfiguration(
    type_: str, changes: dict[str, Any], address: str, token: str | None, match: str
) -> None:
    uid = changes.pop("uid", UID)
    with pytest.raises(DeliveryError, match=match):
        build_request(
            provider(type_, uid=uid, **changes),
            event(),
            address=address,
            token=token,
            headers={},
            now=NOW,
        )


@pytest.mark.parametrize(
    ("severity", "reason", "state"),
    [
        pytest.param("info", "ReconciliationSucceeded", "success", id="info"),
        pytest.param("error", "ReconciliationFailed", "failure", id="error"),
        pytest.param("error", "HealthCheckFailed", "failure", id="health"),
        pytest.param("info", "Progressing", None, id="progressing-skipped"),
        pytest.param("error", "Progressing", None, id="progressing-error-skipped"),
        pytest.param("info", "ProgressingWithRetry", "success", id="with-retry-not-skipped"),
    ],
)
def test_commit_state(severity: str, reason: str, state: str | None) -> None:
    assert commit_state(severity, reason) == state


def test_commit_state_refuses_unknown_severity() -> None:
    with pytest.raises(DeliveryError, match="trace"):
        commit_state("trace", "Whatever")


@pytest.mark.parametrize(
    ("severity", "github", "gitlab"),
    [("info", "success", "success"), ("error", "failure", "failed")],
)
def test_commit_state_per_api(severity: str, github: str, gitlab: str) -> None:
    for type_, expected in (("github", github), ("gitlab", gitlab)):
        request = build_request(
            provider(type_),
            event(severity=severity),
            address="https://example.com/acme/fleet",
            token=TOKEN,
            headers={},
            now=NOW,
        )
        assert request is not None
        assert json.loads(request.body)["state"] == expected


@pytest.mark.parametrize(
    ("revision", "sha"),
    [
        pytest.param(f"main@sha1:{SHA}", SHA, id="branch"),
        pytest.param(f"refs/heads/feature/x@sha1:{SHA}", SHA, id="ref-with-slashes"),
        pytest.param(f"v1.0.0@sha1:{SHA.upper()}", SHA, id="tag-uppercase"),
        pytest.param(f"sha1:{SHA}", SHA, id="bare-sha1"),
        pytest.param(f"main/{SHA}", SHA, id="legacy"),
        pytest.param(SHA, SHA, id="plain"),
        pytest.param(f"main@sha256:{'b' * 64}", "b" * 64, id="sha256-repository"),
    ],
)
def test_commit_sha(revision: str, sha: str) -> None:
    assert commit_sha(revision) == sha


@pytest.mark.parametrize(
    "revision",
    [
        pytest.param("main", id="branch-only"),
        pytest.param("main@sha1:abc", id="short"),
        pytest.param(f"main@md5:{SHA}", id="unknown-algorithm"),
        pytest.param("6.1.0", id="chart-version"),
        pytest.param("", id="empty"),
    ],
)
def test_commit_sha_refuses(revision: str) -> None:
    with pytest.raises(DeliveryError, match="commit hash"):
        commit_sha(revision)


@pytest.mark.parametrize(
    ("reason", "description"),
    [
        ("ReconciliationSucceeded", "reconciliation succeeded"),
        ("HealthCheckFailed", "health check failed"),
        ("DependencyNotReady", "dependency not ready"),
        ("ArtifactFailed", "artifact failed"),
        ("OCIArtifactPullFailed", "oci artifact pull failed"),
        ("", ""),
    ],
)
def test_describe_reason(reason: str, description: str) -> None:
    assert describe_reason(reason) == description


def test_github_description_is_truncated() -> None:
    request = build_request(
        provider("github"),
        event(reason="Very" * 100),
        address="https://github.com/acme/fleet",
        token=TOKEN,
        headers={},
        now=NOW,
    )
    assert request is not None
    assert len(json.loads(request.body)["description"]) == 140


# Routing -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_", "sent"),
    [("slack", False), ("generic", False), ("msteams", False), ("github", True)],
)
def test_commit_status_updates_go_to_git_providers_only(type_: str, sent: bool) -> None:
    evt = event(metadata={"revision": f"main@sha1:{SHA}", "commit_status": "update"})
    request = build_request(
        provider(type_),
        evt,
        address="https://example.com/acme/fleet",
        token=TOKEN,
        headers={},
        now=NOW,
    )
    assert (request is not None) is sent


@pytest.mark.parametrize(
    ("type_", "address", "match"),
    [
        ("telegram", "https://example.com", "not supported"),
        ("generic", "", "no address"),
        ("generic", "ftp://example.com/x", "not an http"),
        ("slack", "hooks.slack.com/services/x", "not an http"),
    ],
)
def test_bad_provider_config(type_: str, address: str, match: str) -> None:
    with pytest.raises(DeliveryError, match=match):
        build_request(provider(type_), event(), address=address, token=None, headers={}, now=NOW)


# Retries -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("statuses", "attempts"),
    [
        pytest.param([500, 502, 200], 3, id="5xx-then-ok"),
        pytest.param([429, 200], 2, id="429-then-ok"),
        pytest.param([503, 503, 503, 201], 4, id="ok-on-last-attempt"),
    ],
)
async def test_retries_until_success(
    peer: Peer, session: aiohttp.ClientSession, statuses: list[int], attempts: int
) -> None:
    peer.statuses = statuses
    await send(session, provider("generic-hmac"), event(), address=f"{peer.url}/hook")
    assert len(peer.requests) == attempts
    assert len({r.body for r in peer.requests}) == 1


async def test_gives_up_after_retries(peer: Peer, session: aiohttp.ClientSession) -> None:
    peer.statuses = [500] * 10
    with pytest.raises(DeliveryError, match=r"answered 500 \(after 3 attempts\)") as caught:
        await send(session, provider("generic"), event(), address=f"{peer.url}/x", retries=2)
    assert len(peer.requests) == 3
    assert caught.value.status is None


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422, 302])
async def test_no_retry_on_client_errors(
    peer: Peer, session: aiohttp.ClientSession, status: int
) -> None:
    peer.statuses = [status, 200]
    peer.headers = {"Location": "/elsewhere"} if status == 302 else {}
    with pytest.raises(DeliveryError, match=f"answered {status}") as caught:
        await send(session, provider("generic"), event(), address=f"{peer.url}/x")
    assert caught.value.status == status
    assert len(peer.requests) == 1


async def test_retry_after_is_honoured(peer: Peer, session: aiohttp.ClientSession) -> None:
    peer.statuses = [429, 200]
    peer.headers = {"Retry-After": "0.3"}
    loop = asyncio.get_running_loop()
    started = loop.time()
    await send(session, provider("generic"), event(), address=f"{peer.url}/x")
    assert loop.time() - started >= 0.3
    assert len(peer.requests) == 2


async def test_timeouts_are_retried_then_reported(
    peer: Peer, session: aiohttp.ClientSession
) -> None:
    peer.delay = 1.0
    with pytest.raises(DeliveryError, match=r"timed out after 0\.2s"):
        await send(session, provider("generic"), event(), address=peer.url, timeout=0.2, retries=1)
    assert len(peer.requests) == 2


async def test_connection_errors_are_retried_then_reported(
    session: aiohttp.ClientSession,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(DeliveryError, match=r"unreachable.*after 2 attempts"):
        await send(
            session, provider("generic"), event(), address=f"http://127.0.0.1:{port}/", retries=1
        )


async def test_errors_never_leak_the_token_or_webhook_path(
    peer: Peer, session: aiohttp.ClientSession
) -> None:
    peer.statuses = [500] * 10
    with pytest.raises(DeliveryError) as caught:
        await send(
            session,
            provider("slack"),
            event(),
            address=f"{peer.url}/services/T0/B0/SECRETPART?token=QUERYSECRET",
            retries=1,
        )
    message = str(caught.value)
    assert "127.0.0.1" in message
    for secret in (TOKEN, "SECRETPART", "QUERYSECRET"):
        assert secret not in message


@pytest.mark.parametrize(
    ("timeout", "maximum", "expected"),
    [
        pytest.param(None, 30.0, 15.0, id="unset-is-flux-default"),
        pytest.param("5s", 30.0, 5.0, id="below-the-cap"),
        pytest.param("600m", 30.0, 30.0, id="capped"),
        pytest.param("1m", 90.0, 60.0, id="a-higher-cap"),
        pytest.param(None, 5.0, 5.0, id="default-capped-too"),
    ],
)
def test_provider_timeout(timeout: str | None, maximum: float, expected: float) -> None:
    spec = {"timeout": timeout} if timeout else {}
    assert provider_timeout(provider("generic", **spec), maximum=maximum) == expected
