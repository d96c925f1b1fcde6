"""Webhook receivers end to end: a CI push reaches the cluster within seconds."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import time
import typing
import zlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from structlog.testing import capture_logs

from notification_controller.receivers import unsupported
from notification_controller.signatures import (
    REPLAY_PROTECTION_ANNOTATION,
    sign,
    timestamped_payload,
)
from notification_controller.webhooks import DEFAULT_API_VERSIONS, ActionFailed
from sluice_api import ALL_KINDS
from sluice_api.notification import Receiver, ReferableKind
from sluice_envtest.gitserver import GitHttpServer, WorkRepo
from sluice_envtest.harness import condition, github_headers, make_secret, push_payload
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime import lanes
from sluice_runtime.conditions import is_ready
from sluice_runtime.kube.attributing import Request
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import KubeError
from sluice_runtime.kube.resources import NAMESPACE, SECRET, ResourceType

from .conftest import (
    CONFIG_MAP,
    GATE,
    GITREPO,
    KUSTOMIZATION,
    RECEIVER,
    Platform,
    cached,
    config_map,
    notification_alone,
    parked,
)

TOKEN = "s3cr3t-webhook-token"


def gitlab_headers(token: str, body: bytes) -> dict[str, str]:
    return {"X-Gitlab-Token": token, "X-Gitlab-Event": "Push Hook"}


def generic_hmac_headers(
    token: str, body: bytes, *, signed_at: float | None = None, flux: bool = False
) -> dict[str, str]:
    """Sluice's timestamped mode (signed now unless `signed_at`); with `flux`,
    Flux's X-Signature over the body alone."""
    if flux:
        return {"X-Signature": sign(token, body)}
    stamp = str(int(time.time() if signed_at is None else signed_at))
    return {
        "X-Signature-Timestamp": stamp,
        "X-Signature-Timestamped": sign(token, timestamped_payload(stamp, body)),
    }


def logged_secrets(entries: list[dict[str, Any]], *secrets: str) -> list[str]:
    """The secrets among `secrets` that appear anywhere in the captured log entries."""
    text = json.dumps(entries, default=str)
    return [secret for secret in secrets if secret in text]


async def deliverable(p: Platform, name: str) -> WorkRepo:
    repo = await p.delivery(name)
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
    ("case", "expect", "reason"),
    [
        pytest.param(
            "bad-signature", 400, "X-Hub-Signature-256 signature does not match", id="bad-signature"
        ),
        pytest.param(
            "missing-signature",
            400,
            "missing X-Hub-Signature-256 or X-Hub-Signature header",
            id="missing-signature",
        ),
        pytest.param("unknown-path", 404, "no receiver for this path", id="unknown-path"),
        pytest.param("oversize", 413, "body larger than 3145728 bytes", id="oversize-body"),
        pytest.param("suspended", 503, "receiver is suspended", id="suspended-receiver"),
        pytest.param("wrong-event", 400, "event 'issues' is not accepted", id="unknown-event-type"),
    ],
)
async def test_rejected_webhooks_annotate_nothing_and_log_why(
    platform: Platform, case: str, expect: int, reason: str
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
        await cached(p.webhooks.receivers, f"{p.namespace}/gh", lambda o: o["spec"].get("suspend"))
    elif case == "wrong-event":
        headers = github_headers(TOKEN, body, event="issues")
    with capture_logs() as entries:
        status, text = await p.post(url, body, headers)
    assert (status, text) == (expect, reason)
    rejections = [e for e in entries if e["event"] == "webhook rejected"]
    assert [(e["status"], e["reason"]) for e in rejections] == [(expect, reason)], entries
    sent = headers.get("X-Hub-Signature-256", "").removeprefix("sha256=")
    valid = github_headers(TOKEN, body)["X-Hub-Signature-256"].removeprefix("sha256=")
    digest = url.rpartition("/")[2]
    secrets = [TOKEN, valid, *([sent] if sent else [])]
    # The path is logged only when no receiver has it (and so it is no one's secret).
    secrets += [] if case == "unknown-path" else [digest]
    assert logged_secrets(entries, *secrets) == []
    assert requested_at(await p.kube.get(GITREPO, "guarded", p.namespace)) is None
    assert p.counts.actions == 0


async def test_a_guessed_token_is_rejected_and_never_logged(platform: Platform) -> None:
    p = platform
    await parked(p, "guessed")
    url = await p.receiver(
        "gl", "gitlab", TOKEN, [{"kind": "GitRepository", "name": "guessed"}], events=["Push Hook"]
    )
    guess = "guessed-token-0000"
    with capture_logs() as entries:
        status, text = await p.post(url, b"{}", gitlab_headers(guess, b"{}"))
    assert (status, text) == (400, "X-Gitlab-Token header does not match the receiver token")
    assert [e["reason"] for e in entries if e["event"] == "webhook rejected"] == [text]
    assert logged_secrets(entries, TOKEN, guess, url.rpartition("/")[2]) == []
    assert requested_at(await p.kube.get(GITREPO, "guessed", p.namespace)) is None
    assert p.counts.actions == 0


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
    headers = generic_hmac_headers(TOKEN, body, signed_at=time.time())
    with capture_logs() as entries:
        answers = await asyncio.gather(*(p.answer(url, body, headers) for _ in range(50)))
    statuses = [status for status, _, _ in answers]
    assert set(statuses) <= {200, 429}
    assert statuses.count(429) > 0, "past the burst, 429"
    for status, text, answered in answers:
        if status == 429:
            assert text == "too many requests"
            assert int(answered["Retry-After"]) >= 1, "429 says when to come back"
    limited = [e for e in entries if e["event"] == "webhook rate limited"]
    assert len(limited) == statuses.count(429)
    assert (
        logged_secrets(entries, TOKEN, headers["X-Signature-Timestamped"].removeprefix("sha256="))
        == []
    )
    await p.webhooks.settle()  # the trailing action, at the end of the debounce window
    assert 1 <= p.counts.actions <= 3, f"{p.counts.actions} actions for 50 pushes"
    assert requested_at(await p.kube.get(GITREPO, "bursty", p.namespace)) is not None


async def test_a_receiver_can_open_a_gate(platform: Platform) -> None:
    p = platform
    await p.create(GATE, "release", {"interval": "1h", "default": "closed", "window": "1h"})
    url = await p.receiver(
        "approve", "generic-hmac", TOKEN, [{"kind": "Gate", "name": "release", "action": "open"}]
    )
    body = b'{"approved_by": "release-bot"}'
    status, _ = await p.post(url, body, generic_hmac_headers(TOKEN, body, signed_at=time.time()))
    assert status == 200
    gate = await p.kube.get(GATE, "release", p.namespace)
    annotations = gate["metadata"]["annotations"]
    assert annotations["open.gate.fluxcd.io/requestedAt"].endswith("Z")
    assert annotations["open.gate.fluxcd.io/requestedBy"] == f"receiver:{p.namespace}/approve"


async def test_an_action_on_a_non_gate_is_refused_at_reconcile(platform: Platform) -> None:
    p = platform
    await p.create(
        RECEIVER,
        "confused",
        {
            "type": "generic",
            "secretRef": {"name": "whatever"},
            "resources": [{"kind": "GitRepository", "name": "x", "action": "open"}],
        },
    )
    obj = await p.observe.wait(
        RECEIVER, "confused", lambda o: (condition(o, "Stalled") or {}).get("status") == "True"
    )
    assert "applies to Gates only" in condition(obj, "Stalled")["message"]  # type: ignore[index]


async def test_a_receiver_without_its_token_secret_is_not_ready(platform: Platform) -> None:
    p = platform
    await p.create(
        RECEIVER,
        "tokenless",
        {
            "type": "generic",
            "secretRef": {"name": "nope"},
            "resources": [{"kind": "GitRepository", "name": "x"}],
        },
    )
    obj = await p.observe.wait_reason(RECEIVER, "tokenless", "TokenNotFound")
    assert condition(obj, "Ready")["message"] == f"secret '{p.namespace}/nope' not found"  # type: ignore[index]
    assert json.dumps(obj).count("hook") == 0


async def test_a_wildcard_resource_reaches_every_labelled_object(platform: Platform) -> None:
    p = platform
    for name, team in (("a", "web"), ("b", "web"), ("c", "data")):
        await parked(p, f"wild-{name}", team=team)
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


async def test_a_burst_of_invalid_webhooks_annotates_nothing_nor_spends_the_budget(
    platform: Platform,
) -> None:
    p = platform
    await parked(p, "forged")
    url = await p.receiver(
        "gh", "github", TOKEN, [{"kind": "GitRepository", "name": "forged"}], events=["push"]
    )
    body = push_payload()
    invalid = [
        github_headers("not-the-token", body),
        {"X-GitHub-Event": "push"},
        github_headers(TOKEN, body, event="issues"),
        {**github_headers(TOKEN, body), "X-Hub-Signature-256": "sha256=zz"},
    ]
    answers = await asyncio.gather(
        *(p.post(url, body, invalid[n % len(invalid)]) for n in range(60))
    )
    assert {status for status, _ in answers} == {400}
    assert requested_at(await p.kube.get(GITREPO, "forged", p.namespace)) is None
    assert p.counts.actions == 0
    # 60 forged requests, three times the burst of 20: none of them was counted.
    assert await p.post(url, body, github_headers(TOKEN, body)) == (200, "ok")
    assert requested_at(await p.kube.get(GITREPO, "forged", p.namespace)) is not None


async def test_a_failed_action_answers_500_naming_what_failed(platform: Platform) -> None:
    p = platform
    ns = p.namespace
    await parked(p, "present")
    resources = [
        {"kind": "GitRepository", "name": "missing"},
        {"kind": "GitRepository", "name": "present"},
        {"kind": "ImageRepository", "name": "uninstalled"},  # no such CRD in the cluster
    ]
    url = await p.receiver("partial", "generic", "unused", resources)
    with capture_logs() as entries:
        status, text = await p.post(url, b"{}", {})
        # Within the debounce window: folded into one trailing action, answered at once.
        assert await p.post(url, b"{}", {}) == (200, "ok")
        await p.webhooks.settle()
    assert status == 500
    failures = text.split("; ")
    assert len(failures) == 2, text
    assert failures[0].startswith(f"GitRepository/{ns}/missing: ")
    assert failures[1].startswith(
        f"ImageRepository/{ns}/uninstalled: the API server serves no kind 'ImageRepository'"
    )
    failed = [e for e in entries if e["event"] == "webhook action failed"]
    assert [(e["error"], e.get("trailing", False)) for e in failed] == [(text, False), (text, True)]
    # One resource that cannot be annotated does not hold back the others.
    assert requested_at(await p.kube.get(GITREPO, "present", ns)) is not None


async def test_a_receiver_whose_token_secret_is_gone_answers_503(platform: Platform) -> None:
    p = platform
    await parked(p, "orphaned")
    url = await p.receiver(
        "ci", "generic-hmac", TOKEN, [{"kind": "GitRepository", "name": "orphaned"}]
    )
    await p.kube.delete(SECRET, "ci-token", namespace=p.namespace)
    await p.kube.merge_patch(
        RECEIVER,
        "ci",
        {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": "secret-deleted"}}},
        namespace=p.namespace,
    )
    obj = await p.observe.wait_reason(RECEIVER, "ci", "TokenNotFound")
    assert condition(obj, "Ready")["message"] == f"secret '{p.namespace}/ci-token' not found"  # type: ignore[index]
    await cached(p.webhooks.receivers, f"{p.namespace}/ci", _not_ready)
    body = b'{"n": 1}'
    with capture_logs() as entries:
        status, text = await p.post(
            url, body, generic_hmac_headers(TOKEN, body, signed_at=time.time())
        )
    assert (status, text) == (503, "receiver is not ready")
    assert [e["reason"] for e in entries if e["event"] == "webhook rejected"] == [text]
    assert requested_at(await p.kube.get(GITREPO, "orphaned", p.namespace)) is None
    assert p.counts.actions == 0


def _not_ready(obj: JSON) -> bool:
    return (condition(obj, "Ready") or {}).get("status") == "False"


async def test_cross_namespace_resources_stall_with_no_cross_namespace_refs(
    strict: Platform,
) -> None:
    p = strict
    await make_secret(p.kube, p.namespace, "ci-token", {"token": TOKEN})
    await p.create(
        RECEIVER,
        "ci",
        {
            "type": "generic",
            "secretRef": {"name": "ci-token"},
            "resources": [
                {"kind": "GitRepository", "name": "own", "namespace": p.namespace},
                {"kind": "GitRepository", "name": "theirs", "namespace": "elsewhere"},
            ],
        },
    )
    obj = await p.observe.wait(
        RECEIVER, "ci", lambda o: (condition(o, "Stalled") or {}).get("status") == "True"
    )
    message = "resource GitRepository/elsewhere/theirs: cross-namespace references are not allowed"
    assert condition(obj, "Stalled")["message"] == message  # type: ignore[index]
    ready = condition(obj, "Ready") or {}
    assert (ready.get("status"), ready.get("reason"), ready.get("message")) == (
        "False",
        "InvalidConfig",
        message,
    )
    assert "webhookPath" not in obj["status"], "no path: no webhook can reach it"


async def test_the_same_receiver_is_ready_without_the_flag(alone: Platform) -> None:
    p = alone
    await p.receiver(
        "ci", "generic", TOKEN, [{"kind": "GitRepository", "name": "x", "namespace": "elsewhere"}]
    )


async def test_replay_protection_end_to_end(strict: Platform) -> None:
    p = strict
    await parked(p, "replayed")
    url = await p.receiver(
        "ci", "generic-hmac", TOKEN, [{"kind": "GitRepository", "name": "replayed"}]
    )
    body = b'{"ref": "refs/heads/main"}'
    now = time.time()
    rejected = [
        (
            generic_hmac_headers(TOKEN, body, flux=True),
            "missing X-Signature-Timestamp header "
            "(replay protection required by the controller (--require-signed-timestamp))",
        ),
        (
            generic_hmac_headers(TOKEN, body, signed_at=now - 3600),
            "X-Signature-Timestamp outside the replay window of 0:01:00",
        ),
        (
            generic_hmac_headers(TOKEN, body, signed_at=now + 3600),
            "X-Signature-Timestamp outside the replay window of 0:01:00",
        ),
        (
            {**generic_hmac_headers(TOKEN, body, signed_at=now), "X-Signature-Timestamp": "1"},
            "X-Signature-Timestamp outside the replay window of 0:01:00",
        ),
    ]
    for headers, reason in rejected:
        assert await p.post(url, body, headers) == (400, reason)
    assert requested_at(await p.kube.get(GITREPO, "replayed", p.namespace)) is None
    assert p.counts.actions == 0
    fresh = generic_hmac_headers(TOKEN, body, signed_at=time.time())
    assert await p.post(url, body, fresh) == (200, "ok")
    assert requested_at(await p.kube.get(GITREPO, "replayed", p.namespace)) is not None


@contextlib.asynccontextmanager
async def other_namespace(p: Platform) -> AsyncIterator[str]:
    """A second tenant's namespace, removed afterwards."""
    name = f"{p.namespace}-b"[:63]
    await p.kube.create(
        NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    try:
        yield name
    finally:
        with contextlib.suppress(KubeError):
            await p.kube.delete(NAMESPACE, name)


async def their_gate(p: Platform, namespace: str) -> JSON:
    return await p.kube.create(
        GATE,
        {
            "apiVersion": GATE.api_version,
            "kind": "Gate",
            "metadata": {"name": "release", "namespace": namespace},
            "spec": {"interval": "1h", "default": "closed", "window": "1h"},
        },
        namespace=namespace,
    )


def gate_requests(obj: JSON) -> list[str]:
    annotations = obj["metadata"].get("annotations") or {}
    return sorted(k for k in annotations if k.endswith(".gate.fluxcd.io/requestedAt"))


@pytest.mark.parametrize("action", ["open", "close"])
async def test_a_receiver_cannot_act_on_another_namespaces_gate(
    alone: Platform, action: str
) -> None:
    """Without --no-cross-namespace-refs, and still refused: the action would be
    the controller's, not the tenant's."""
    p = alone
    async with other_namespace(p) as theirs:
        await their_gate(p, theirs)
        await make_secret(p.kube, p.namespace, "hijack-token", {"token": TOKEN})
        await p.create(
            RECEIVER,
            "hijack",
            {
                "type": "generic",
                "secretRef": {"name": "hijack-token"},
                "resources": [
                    {"kind": "Gate", "name": "release", "namespace": theirs, "action": action}
                ],
            },
        )
        obj = await p.observe.wait(
            RECEIVER, "hijack", lambda o: (condition(o, "Stalled") or {}).get("status") == "True"
        )
        message = (
            f"resource Gate/{theirs}/release: a Receiver can open or close Gates "
            "in its own namespace only"
        )
        assert condition(obj, "Stalled")["message"] == message  # type: ignore[index]
        assert (condition(obj, "Ready") or {}).get("status") == "False"
        assert "webhookPath" not in obj["status"], "no path: no webhook can reach it"
        assert gate_requests(await p.kube.get(GATE, "release", theirs)) == []


async def test_a_ready_receiver_edited_to_reach_another_namespace_never_touches_it(
    alone: Platform,
) -> None:
    p = alone
    async with other_namespace(p) as theirs:
        await their_gate(p, theirs)
        await p.create(GATE, "release", {"interval": "1h", "default": "closed", "window": "1h"})
        own = [{"kind": "Gate", "name": "release", "action": "open"}]
        url = await p.receiver("approve", "generic", "unused", own)
        foreign = [{"kind": "Gate", "name": "release", "namespace": theirs, "action": "open"}]
        await p.kube.merge_patch(
            RECEIVER, "approve", {"spec": {"resources": foreign}}, namespace=p.namespace
        )
        # Whatever the cache holds meanwhile, the webhook never reaches their Gate.
        await p.post(url, b"{}", {})
        await p.observe.wait(
            RECEIVER, "approve", lambda o: (condition(o, "Stalled") or {}).get("status") == "True"
        )
        await cached(p.webhooks.receivers, f"{p.namespace}/approve", _stalled)
        assert await p.post(url, b"{}", {}) == (503, "receiver is not ready")
        await p.webhooks.settle()
        assert gate_requests(await p.kube.get(GATE, "release", theirs)) == []


def _stalled(obj: JSON) -> bool:
    return (condition(obj, "Stalled") or {}).get("status") == "True"


async def test_the_webhook_refuses_a_cross_namespace_gate_action_on_its_own(
    alone: Platform,
) -> None:
    """Defence in depth: even a Receiver the reconcile never saw (a stale cache)
    cannot make the webhook server patch another namespace's Gate."""
    p = alone
    async with other_namespace(p) as theirs:
        await their_gate(p, theirs)
        receiver = Receiver.model_validate(
            {
                "apiVersion": RECEIVER.api_version,
                "kind": "Receiver",
                "metadata": {"name": "stale", "namespace": p.namespace},
                "spec": {
                    "type": "generic",
                    "secretRef": {"name": "x"},
                    "resources": [
                        {"kind": "Gate", "name": "release", "namespace": theirs, "action": "open"}
                    ],
                },
            }
        )
        with pytest.raises(ActionFailed) as failed:
            await p.webhooks.act(receiver, datetime.now(UTC))
        assert str(failed.value) == (
            f"Gate/{theirs}/release: a Receiver can open or close Gates in its own namespace only"
        )
        assert gate_requests(await p.kube.get(GATE, "release", theirs)) == []


async def test_a_flux_ci_call_triggers_a_reconcile_by_default(alone: Platform) -> None:
    """A CI job written for Flux signs the body alone (`X-Signature`); replayed, it
    can only ask again for the same idempotent reconcile, so it is accepted. A
    signed timestamp, when sent, must still be fresh."""
    p = alone
    await parked(p, "signed")
    url = await p.receiver(
        "ci", "generic-hmac", TOKEN, [{"kind": "GitRepository", "name": "signed"}]
    )
    body = b'{"ref": "refs/heads/main"}'
    stale = generic_hmac_headers(TOKEN, body, signed_at=time.time() - 600)
    assert await p.post(url, body, stale) == (
        400,
        "X-Signature-Timestamp outside the replay window of 0:05:00",
    )
    assert await p.post(url, body, {"X-Signature": sign("wrong", body)}) == (
        400,
        "X-Signature signature does not match",
    )
    assert requested_at(await p.kube.get(GITREPO, "signed", p.namespace)) is None

    assert await p.post(url, body, generic_hmac_headers(TOKEN, body, flux=True)) == (200, "ok")

    assert requested_at(await p.kube.get(GITREPO, "signed", p.namespace)) is not None


async def test_a_gate_receiver_requires_a_fresh_signed_timestamp(platform: Platform) -> None:
    """Opening a Gate is not idempotent: a captured "open" replayed after the Gate
    was closed again would reopen it. Such a Receiver takes only the timestamped
    form, within the window."""
    p = platform
    await p.create(GATE, "hold", {"interval": "1h", "default": "closed", "window": "1h"})
    url = await p.receiver(
        "opener", "generic-hmac", TOKEN, [{"kind": "Gate", "name": "hold", "action": "open"}]
    )
    body = b'{"approved_by": "release-bot"}'
    assert await p.post(url, body, generic_hmac_headers(TOKEN, body, flux=True)) == (
        400,
        "missing X-Signature-Timestamp header "
        "(replay protection required for a Receiver that opens or closes Gates)",
    )
    captured = generic_hmac_headers(TOKEN, body, signed_at=time.time() - 600)
    assert await p.post(url, body, captured) == (
        400,
        "X-Signature-Timestamp outside the replay window of 0:05:00",
    )
    gate = await p.kube.get(GATE, "hold", p.namespace)
    assert "open.gate.fluxcd.io/requestedAt" not in (gate["metadata"].get("annotations") or {})


async def test_a_receiver_can_ask_for_replay_protection(alone: Platform) -> None:
    p = alone
    await parked(p, "guarded")
    await make_secret(p.kube, p.namespace, "guarded-token", {"token": TOKEN})
    await p.kube.create(
        RECEIVER,
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1",
            "kind": "Receiver",
            "metadata": {
                "name": "guarded",
                "namespace": p.namespace,
                "annotations": {REPLAY_PROTECTION_ANNOTATION: "required"},
            },
            "spec": {
                "type": "generic-hmac",
                "secretRef": {"name": "guarded-token"},
                "resources": [{"kind": "GitRepository", "name": "guarded"}],
            },
        },
    )
    obj = await p.observe.wait_ready(RECEIVER, "guarded")
    await cached(p.webhooks.receivers, f"{p.namespace}/guarded", is_ready)
    url = f"{p.receiver_url}{obj['status']['webhookPath']}"
    body = b"{}"
    assert await p.post(url, body, generic_hmac_headers(TOKEN, body, flux=True)) == (
        400,
        "missing X-Signature-Timestamp header (replay protection required by the Receiver "
        f"({REPLAY_PROTECTION_ANNOTATION}))",
    )
    assert requested_at(await p.kube.get(GITREPO, "guarded", p.namespace)) is None
    assert await p.post(url, body, generic_hmac_headers(TOKEN, body)) == (200, "ok")


async def test_the_operator_can_require_signed_timestamps_everywhere(
    cluster: Cluster, kube: KubeClient, namespace: str, git_http: GitHttpServer
) -> None:
    async with notification_alone(
        cluster, kube, namespace, git_http, "--require-signed-timestamp"
    ) as p:
        await parked(p, "flux")
        url = await p.receiver(
            "ci", "generic-hmac", TOKEN, [{"kind": "GitRepository", "name": "flux"}]
        )
        body = b'{"ref": "refs/heads/main"}'
        assert await p.post(url, body, generic_hmac_headers(TOKEN, body, flux=True)) == (
            400,
            "missing X-Signature-Timestamp header "
            "(replay protection required by the controller (--require-signed-timestamp))",
        )
        assert await p.post(url, body, generic_hmac_headers(TOKEN, body)) == (200, "ok")


def _receiver(generation: int | None, observed: int | None, ready: str | None) -> JSON:
    status: JSON = {}
    if observed is not None:
        status["observedGeneration"] = observed
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": ready}]
    metadata: JSON = (
        {"name": "r"} if generation is None else {"name": "r", "generation": generation}
    )
    return {"metadata": metadata, "status": status}


@pytest.mark.parametrize(
    ("obj", "trusted"),
    [
        pytest.param(_receiver(2, 2, "True"), True, id="ready-for-this-spec"),
        pytest.param(_receiver(3, 2, "True"), False, id="spec-changed-not-reconciled"),
        pytest.param(_receiver(2, None, "True"), False, id="never-observed"),
        pytest.param(_receiver(None, 1, "True"), False, id="no-generation"),
        pytest.param(_receiver(2, 2, "False"), False, id="not-ready"),
        pytest.param(_receiver(2, 2, None), False, id="no-ready-condition"),
    ],
)
def test_the_webhook_trusts_ready_only_for_the_current_generation(obj: JSON, trusted: bool) -> None:
    assert is_ready(obj) is trusted


def receiver_of(**spec: Any) -> Receiver:
    base: dict[str, Any] = {
        "type": "generic",
        "secretRef": {"name": "token"},
        "resources": [{"kind": "GitRepository", "name": "app"}],
    }
    return Receiver.from_obj({"metadata": {"name": "r"}, "spec": {**base, **spec}})


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        pytest.param({}, None, id="generic"),
        pytest.param(
            {
                "resources": [
                    {"kind": "ResourceSetInputProvider", "name": "*", "matchLabels": {"a": "b"}}
                ]
            },
            None,
            id="flux-operator-kind",
        ),
        pytest.param(
            {"type": "generic-oidc", "secretRef": None, "oidcProviders": [{"issuerURL": "x"}]},
            "spec.type 'generic-oidc' is not supported by this version of Sluice",
            id="generic-oidc",
        ),
        pytest.param(
            {"oidcProviders": [{"issuerURL": "https://token.actions.githubusercontent.com"}]},
            "spec.oidcProviders is only valid with spec.type 'generic-oidc'",
            id="oidc-providers-without-oidc",
        ),
        pytest.param(
            {"type": "github", "secretRef": None},
            "spec.secretRef is required unless spec.type is 'generic-oidc'",
            id="no-secret-ref",
        ),
        # CEL filters are honoured (test_receiver_filters.py); only ones that do not
        # compile are refused.
        pytest.param({"resourceFilter": "true"}, None, id="resource-filter"),
        pytest.param(
            {"resources": [{"kind": "OCIRepository", "name": "a"}, {"kind": "GitRepository",
                           "name": "b", "filter": "true"}]},
            None,
            id="resource-level-filter",
        ),
    ],
)  # fmt: skip
def test_unsupported_receiver_specs_name_the_field(
    spec: dict[str, Any], problem: str | None
) -> None:
    assert unsupported(receiver_of(**spec)) == problem


async def test_a_generic_oidc_receiver_stalls_naming_the_type(platform: Platform) -> None:
    """Flux 2.8's secret-less Receiver applies, and says why it will not act."""
    p = platform
    await p.create(
        RECEIVER,
        "oidc",
        {
            "type": "generic-oidc",
            "oidcProviders": [
                {
                    "issuerURL": "https://token.actions.githubusercontent.com",
                    "validations": [{"expression": "claims.repository == 'a/b'"}],
                }
            ],
            "resources": [{"kind": "GitRepository", "name": "app", "filter": "true"}],
        },
    )
    obj = await p.observe.wait(
        RECEIVER, "oidc", lambda o: (condition(o, "Stalled") or {}).get("status") == "True"
    )
    message = condition(obj, "Stalled")["message"]  # type: ignore[index]
    assert message == "spec.type 'generic-oidc' is not supported by this version of Sluice"
    assert "webhookPath" not in obj["status"]


async def test_a_receiver_without_a_secret_ref_stalls_with_fluxs_cel_message(
    platform: Platform,
) -> None:
    """Flux's CEL rule (secretRef unless generic-oidc), which a 1.20 API server cannot
    evaluate: the controller enforces it with the rule's message."""
    p = platform
    spec = {"type": "github", "resources": [{"kind": "GitRepository", "name": "app"}]}
    await p.create(RECEIVER, "secretless", spec)
    obj = await p.observe.wait(
        RECEIVER, "secretless", lambda o: (condition(o, "Stalled") or {}).get("status") == "True"
    )
    message = condition(obj, "Stalled")["message"]  # type: ignore[index]
    assert message == "spec.secretRef is required unless spec.type is 'generic-oidc'"
    assert "webhookPath" not in obj["status"]


async def test_a_receiver_reaches_a_resourceset_input_provider(platform: Platform) -> None:
    """A Receiver names the Flux Operator's kinds, without an apiVersion too; the
    provider's CRD is Sluice's own (the resourceset-controller serves it)."""
    p = platform
    rt = ResourceType(
        "fluxcd.controlplane.io", "v1", "resourcesetinputproviders", "ResourceSetInputProvider"
    )
    await p.kube.create(
        rt,
        {
            "apiVersion": "fluxcd.controlplane.io/v1",
            "kind": rt.kind,
            "metadata": {"name": "inputs"},
            "spec": {"type": "Static"},
        },
        namespace=p.namespace,
    )
    url = await p.receiver("operator", "generic", "unused", [{"kind": rt.kind, "name": "inputs"}])
    status, _ = await p.post(url, b"{}", {})
    assert status == 200
    assert requested_at(await p.kube.get(rt, "inputs", p.namespace)) is not None


@pytest.mark.parametrize(
    "encoding", [pytest.param("gzip", id="gzip"), pytest.param("deflate", id="deflate")]
)
async def test_a_compressed_body_is_taken_as_sent(
    alone: Platform, caplog: pytest.LogCaptureFixture, encoding: str
) -> None:
    """Found by the webhook fuzz: bodies were decompressed by aiohttp, so a signature
    over the bytes sent (what Flux's Go server checks) failed, and an undecodable body
    on an unknown path raised in aiohttp's drain, one traceback per request."""
    p = alone
    await parked(p, "target")
    url = await p.receiver(
        "hmac", "generic-hmac", TOKEN, [{"kind": "GitRepository", "name": "target"}]
    )
    junk = b"\x78\x9c not really compressed"
    status, _ = await p.post(
        f"{p.receiver_url}/hook/{'0' * 64}", junk, {"Content-Encoding": encoding}
    )
    assert status == 404
    body = gzip.compress(b'{"ref": "main"}') if encoding == "gzip" else zlib.compress(b"{}")
    headers = {**generic_hmac_headers(TOKEN, body), "Content-Encoding": encoding}
    assert await p.post(url, body, headers) == (200, "ok")
    status, text = await p.post(
        url, junk, {**generic_hmac_headers(TOKEN, b"other"), "Content-Encoding": encoding}
    )
    assert (status, text) == (400, "X-Signature-Timestamped signature does not match")
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []


@pytest.mark.parametrize("kind", typing.get_args(ReferableKind))
def test_every_kind_a_receiver_may_name_has_a_default_api_version(kind: str) -> None:
    own = {model.KIND: model.api_version_str() for model in ALL_KINDS}
    assert DEFAULT_API_VERSIONS[kind] == own.get(kind, DEFAULT_API_VERSIONS[kind])
    assert DEFAULT_API_VERSIONS[kind].count("/") == 1


async def test_a_push_patches_its_resources_as_requested_work(platform: Platform) -> None:
    """Its patch goes ahead of the controller's other work in the event loop and over the
    requested lane's connections (sluice_runtime.lanes), as a requested reconcile's."""
    p = platform
    await deliverable(p, "lane")
    url = await p.receiver("lane-ci", "github", TOKEN, [{"kind": "GitRepository", "name": "lane"}])
    seen: list[tuple[str, str, bool]] = []

    class Lanes:
        def requested(self, request: Request) -> None:
            seen.append((request.verb, request.path, lanes.is_requested()))

    stop = p.webhooks.client.observe(Lanes())
    try:
        body = push_payload()
        assert await p.post(url, body, github_headers(TOKEN, body)) == (200, "ok")
    finally:
        stop()
    path = f"/apis/source.toolkit.fluxcd.io/v1/namespaces/{p.namespace}/gitrepositories/lane"
    assert ("patch", path, True) in seen
    assert p.webhooks.client.lane_pools == 2
