"""Webhook receivers end to end: a CI push reaches the cluster within seconds."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from typing import Any

import pytest

from sluice_envtest.harness import condition

from .conftest import (
    CONFIG_MAP,
    GATE,
    GITREPO,
    KUSTOMIZATION,
    RECEIVER,
    Platform,
    config_map,
    github_headers,
    push_payload,
)

TOKEN = "s3cr3t-webhook-token"


def gitlab_headers(token: str, body: bytes) -> dict[str, str]:
    return {"X-Gitlab-Token": token, "X-Gitlab-Event": "Push Hook"}


def generic_hmac_headers(token: str, body: bytes) -> dict[str, str]:
    return {"X-Signature": "sha256=" + hmac.new(token.encode(), body, hashlib.sha256).hexdigest()}


async def deliverable(p: Platform, name: str) -> Any:
    repo = p.repo(name)
    repo.commit("v1", files={"cm.yaml": config_map(name, p.namespace, v="1")})
    repo.push()
    await p.kube.create(
        GITREPO,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "GitRepository",
            "metadata": {"name": name},
            "spec": {"url": p.url(name), "interval": "1h", "ref": {"branch": "main"}},
        },
        namespace=p.namespace,
    )
    await p.kube.create(
        KUSTOMIZATION,
        {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": name},
            "spec": {
                "interval": "1h",
                "path": "./",
                "prune": True,
                "sourceRef": {"kind": "GitRepository", "name": name},
            },
        },
        namespace=p.namespace,
    )
    await p.observe.wait_ready(KUSTOMIZATION, name)
    return repo


@pytest.mark.parametrize(
    ("kind", "sign", "events"),
    [
        pytest.param("github", lambda t, b: github_headers(t, b), ["push"], id="github"),
        pytest.param("gitlab", gitlab_headers, ["Push Hook"], id="gitlab"),
        pytest.param("generic-hmac", generic_hmac_headers, None, id="generic-hmac"),
    ],
)
async def test_a_signed_push_delivers_the_new_commit_within_seconds(
    platform: Platform, kind: str, sign: Any, events: list[str] | None
) -> None:
    p = platform
    repo = await deliverable(p, "app")
    url = await p.receiver(
        "ci",
        kind,
        TOKEN,
        [{"kind": "GitRepository", "name": "app"}],
        **({"events": events} if events else {}),
    )
    repo.commit("v2", files={"cm.yaml": config_map("app", p.namespace, v="2")})
    repo.push()
    body = push_payload()
    started = time.monotonic()
    status, text = await p.post(url, body, sign(TOKEN, body))
    assert (status, text) == (200, "ok")
    await p.observe.wait(
        KUSTOMIZATION,
        "app",
        lambda o: o["status"].get("lastAppliedRevision") == f"main@sha1:{repo.head}",
        timeout=15,
        what="the pushed commit applied",
    )
    elapsed = time.monotonic() - started
    assert (await p.kube.get(CONFIG_MAP, "app", p.namespace))["data"] == {"v": "2"}
    assert elapsed < 15, "interval is 1h: only the webhook can make it this quick"


def requested_at(obj: dict[str, Any]) -> str | None:
    return (obj["metadata"].get("annotations") or {}).get("reconcile.fluxcd.io/requestedAt")


@pytest.mark.parametrize(
    ("case", "expect"),
    [
        pytest.param("bad-signature", 400, id="bad-signature"),
        pytest.param("missing-signature", 400, id="missing-signature"),
        pytest.param("unknown-path", 404, id="unknown-path"),
        pytest.param("oversize", 413, id="oversize-body"),
        pytest.param("suspended", 503, id="suspended-receiver"),
        pytest.param("wrong-event", 400, id="unknown-event-type"),
    ],
)
async def test_rejected_webhooks_annotate_nothing(
    platform: Platform, case: str, expect: int
) -> None:
    p = platform
    await deliverable(p, "guarded")
    url = await p.receiver(
        "gh", "github", TOKEN, [{"kind": "GitRepository", "name": "guarded"}], events=["push"]
    )
    body = push_payload()
    headers = github_headers(TOKEN, body)
    if case == "bad-signature":
        headers = github_headers("not-the-token", body)
    elif case == "missing-signature":
        headers = {"X-GitHub-Event": "push"}
    elif case == "unknown-path":
        url = url[: -len("0123")] + "0123"
    elif case == "oversize":
        body = b"x" * (3 * 1024 * 1024 + 1)
        headers = github_headers(TOKEN, body)
    elif case == "suspended":
        await p.kube.merge_patch(RECEIVER, "gh", {"spec": {"suspend": True}}, namespace=p.namespace)
        await p.observe.wait(RECEIVER, "gh", lambda o: o["spec"].get("suspend") is True)
        await asyncio.sleep(0.3)  # the informer cache catches up
    elif case == "wrong-event":
        headers = github_headers(TOKEN, body, event="issues")
    status, text = await p.post(url, body, headers)
    assert status == expect, text
    assert TOKEN not in text
    await asyncio.sleep(0.5)
    assert requested_at(await p.kube.get(GITREPO, "guarded", p.namespace)) is None
    assert p.webhooks.actions == 0


async def test_a_ping_is_answered_without_acting(platform: Platform) -> None:
    p = platform
    await deliverable(p, "pinged")
    url = await p.receiver("gh", "github", TOKEN, [{"kind": "GitRepository", "name": "pinged"}])
    body = b'{"zen": "hi"}'
    status, _ = await p.post(url, body, github_headers(TOKEN, body, event="ping"))
    assert status == 200
    assert requested_at(await p.kube.get(GITREPO, "pinged", p.namespace)) is None


async def test_a_burst_of_pushes_triggers_a_handful_of_reconciles(platform: Platform) -> None:
    p = platform
    await deliverable(p, "bursty")
    url = await p.receiver(
        "burst", "generic-hmac", TOKEN, [{"kind": "GitRepository", "name": "bursty"}]
    )
    body = b'{"n": 1}'
    answers = await asyncio.gather(
        *(p.post(url, body, generic_hmac_headers(TOKEN, body)) for _ in range(50))
    )
    statuses = [status for status, _ in answers]
    assert set(statuses) <= {200, 429}
    assert statuses.count(429) > 0, "past the burst, 429"
    await asyncio.sleep(1.5)  # the trailing action, at the end of the debounce window
    assert 1 <= p.webhooks.actions <= 3, f"{p.webhooks.actions} actions for 50 pushes"
    assert requested_at(await p.kube.get(GITREPO, "bursty", p.namespace)) is not None


async def test_a_receiver_can_open_a_gate(platform: Platform) -> None:
    p = platform
    await p.kube.create(
        GATE,
        {
            "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
            "kind": "Gate",
            "metadata": {"name": "release"},
            "spec": {"interval": "1h", "default": "closed", "window": "1h"},
        },
        namespace=p.namespace,
    )
    url = await p.receiver(
        "approve", "generic-hmac", TOKEN, [{"kind": "Gate", "name": "release", "action": "open"}]
    )
    body = b'{"approved_by": "release-bot"}'
    status, _ = await p.post(url, body, generic_hmac_headers(TOKEN, body))
    assert status == 200
    gate = await p.kube.get(GATE, "release", p.namespace)
    annotations = gate["metadata"]["annotations"]
    assert annotations["open.gate.fluxcd.io/requestedAt"].endswith("Z")
    assert annotations["open.gate.fluxcd.io/requestedBy"] == f"receiver:{p.namespace}/approve"


async def test_an_action_on_a_non_gate_is_refused_at_reconcile(platform: Platform) -> None:
    p = platform
    await p.kube.create(
        RECEIVER,
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1",
            "kind": "Receiver",
            "metadata": {"name": "confused"},
            "spec": {
                "type": "generic",
                "secretRef": {"name": "whatever"},
                "resources": [{"kind": "GitRepository", "name": "x", "action": "open"}],
            },
        },
        namespace=p.namespace,
    )
    obj = await p.observe.wait(
        RECEIVER, "confused", lambda o: (condition(o, "Stalled") or {}).get("status") == "True"
    )
    assert "applies to Gates only" in condition(obj, "Stalled")["message"]  # type: ignore[index]


async def test_a_receiver_without_its_token_secret_is_not_ready(platform: Platform) -> None:
    p = platform
    await p.kube.create(
        RECEIVER,
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1",
            "kind": "Receiver",
            "metadata": {"name": "tokenless"},
            "spec": {
                "type": "generic",
                "secretRef": {"name": "nope"},
                "resources": [{"kind": "GitRepository", "name": "x"}],
            },
        },
        namespace=p.namespace,
    )
    obj = await p.observe.wait_reason(RECEIVER, "tokenless", "TokenNotFound")
    assert condition(obj, "Ready")["message"] == f"secret '{p.namespace}/nope' not found"  # type: ignore[index]
    assert json.dumps(obj).count("hook") == 0


async def test_a_wildcard_resource_reaches_every_labelled_object(platform: Platform) -> None:
    p = platform
    for name, team in (("a", "web"), ("b", "web"), ("c", "data")):
        await p.kube.create(
            GITREPO,
            {
                "apiVersion": "source.toolkit.fluxcd.io/v1",
                "kind": "GitRepository",
                "metadata": {"name": f"wild-{name}", "labels": {"team": team}},
                "spec": {"url": "https://example.invalid/x.git", "interval": "1h", "suspend": True},
            },
            namespace=p.namespace,
        )
    url = await p.receiver(
        "team-web",
        "generic",
        "unused",
        [{"kind": "GitRepository", "name": "*", "matchLabels": {"team": "web"}}],
    )
    status, _ = await p.post(url, b"{}", {})
    assert status == 200
    annotated = {
        name: requested_at(await p.kube.get(GITREPO, f"wild-{name}", p.namespace)) is not None
        for name in "abc"
    }
    assert annotated == {"a": True, "b": True, "c": False}
