"""Webhook authentication per Receiver type: valid, wrong, missing, malformed, replayed."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest
from multidict import CIMultiDict

from notification_controller.signatures import (
    DEFAULT_REPLAY_WINDOW,
    REPLAY_PROTECTION_ANNOTATION,
    Verdict,
    event_allowed,
    sign,
    timestamp_required,
    timestamped_payload,
    verify,
)

TOKEN = "s3cr3t-token-value"
BODY = b'{"ref":"refs/heads/main","after":"abc"}'
NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
TS = str(int(NOW.timestamp()))


def hexmac(algorithm: str, body: bytes = BODY, key: str = TOKEN) -> str:
    return hmac.new(key.encode(), body, getattr(hashlib, algorithm)).hexdigest()


def check(
    receiver_type: str,
    headers: Mapping[str, str],
    body: bytes = BODY,
    *,
    token: str = TOKEN,
    replay_window: timedelta | None = None,
) -> Verdict:
    return verify(
        receiver_type,
        token=token,
        headers=headers,
        body=body,
        now=NOW,
        replay_window=replay_window,
    )


@pytest.mark.parametrize(
    ("receiver_type", "headers", "body", "event"),
    [
        pytest.param("generic", {}, b"anything", None, id="generic-no-auth"),
        pytest.param(
            "generic-hmac", {"X-Signature": f"sha1={hexmac('sha1')}"}, BODY, None, id="hmac-sha1"
        ),
        pytest.param(
            "generic-hmac",
            {"X-Signature": f"sha256={hexmac('sha256')}"},
            BODY,
            None,
            id="hmac-sha256",
        ),
        pytest.param(
            "generic-hmac",
            {"X-Signature": f"sha512={hexmac('sha512')}"},
            BODY,
            None,
            id="hmac-sha512",
        ),
        pytest.param(
            "generic-hmac",
            {"x-signature": f"SHA256={hexmac('sha256').upper()}"},
            BODY,
            None,
            id="hmac-header-and-hex-case-insensitive",
        ),
        pytest.param(
            "github",
            {"X-Hub-Signature-256": f"sha256={hexmac('sha256')}", "X-GitHub-Event": "push"},
            BODY,
            "push",
            id="github-sha256",
        ),
        pytest.param(
            "github",
            {"X-Hub-Signature": f"sha1={hexmac('sha1')}", "X-GitHub-Event": "push"},
            BODY,
            "push",
            id="github-sha1-fallback",
        ),
        pytest.param(
            "github",
            {
                "X-Hub-Signature-256": f"sha256={hexmac('sha256')}",
                "X-Hub-Signature": "sha1=00",
                "X-GitHub-Event": "push",
            },
            BODY,
            "push",
            id="github-256-wins-over-legacy",
        ),
        pytest.param(
            "github",
            {"X-Hub-Signature-256": f"sha256={hexmac('sha256')}"},
            BODY,
            "",
            id="github-no-event-header",
        ),
        pytest.param(
            "gitlab",
            {"X-Gitlab-Token": TOKEN, "X-Gitlab-Event": "Push Hook"},
            BODY,
            "Push Hook",
            id="gitlab",
        ),
        pytest.param(
            "bitbucket",
            {"X-Hub-Signature": f"sha256={hexmac('sha256')}", "X-Event-Key": "repo:refs_changed"},
            BODY,
            "repo:refs_changed",
            id="bitbucket-sha256",
        ),
        pytest.param(
            "bitbucket",
            {"X-Hub-Signature": f"sha1={hexmac('sha1')}", "X-Event-Key": "repo:push"},
            BODY,
            "repo:push",
            id="bitbucket-sha1",
        ),
        pytest.param("harbor", {"Authorization": TOKEN}, BODY, None, id="harbor"),
        pytest.param("dockerhub", {}, b'{"push_data":{"tag":"v1"}}', None, id="dockerhub"),
        pytest.param("quay", {}, b'{"docker_url":"quay.io/x"}', None, id="quay"),
        pytest.param("acr", {}, b'{"action":"push"}', None, id="acr"),
        pytest.param(
            "nexus",
            {"X-Nexus-Webhook-Signature": hexmac("sha1")},
            BODY,
            None,
            id="nexus",
        ),
    ],
)
def test_valid_requests_are_accepted(
    receiver_type: str, headers: dict[str, str], body: bytes, event: str | None
) -> None:
    verdict = check(receiver_type, headers, body)
    assert verdict.ok, verdict.reason
    assert verdict.status == 200
    assert verdict.event == event
    assert not verdict.ping


WRONG = "0" * 64


@pytest.mark.parametrize(
    ("receiver_type", "headers", "body", "reason"),
    [
        # generic-hmac
        pytest.param("generic-hmac", {}, BODY, "missing X-Signature", id="hmac-missing"),
        pytest.param(
            "generic-hmac", {"X-Signature": ""}, BODY, "missing X-Signature", id="hmac-empty"
        ),
        pytest.param(
            "generic-hmac",
            {"X-Signature": f"sha256={WRONG}"},
            BODY,
            "does not match",
            id="hmac-wrong",
        ),
        pytest.param(
            "generic-hmac",
            {"X-Signature": f"sha256={hexmac('sha256', key='other')}"},
            BODY,
            "does not match",
            id="hmac-other-key",
        ),
        pytest.param(
            "generic-hmac",
            {"X-Signature": f"sha256={hexmac('sha256')}"},
            BODY + b" ",
            "does not match",
            id="hmac-body-changed",
        ),
        pytest.param(
            "generic-hmac",
            {"X-Signature": hexmac("sha256")},
            BODY,
            "malformed",
            id="hmac-no-algorithm",
        ),
        pytest.param(
            "generic-hmac", {"X-Signature": "sha256="}, BODY, "malformed", id="hmac-no-digest"
        ),
        pytest.param(
            "generic-hmac",
            {"X-Signature": "sha256=not-hex!"},
            BODY,
            "not hex",
            id="hmac-not-hex",
        ),
        pytest.param(
            "generic-hmac",
            {"X-Signature": f"md5={hmac.new(TOKEN.encode(), BODY, 'md5').hexdigest()}"},
            BODY,
            "unsupported signature algorithm",
            id="hmac-md5",
        ),
        pytest.param(
            "generic-hmac",
            {"X-Signature": f"sha1={hexmac('sha256')}"},
            BODY,
            "does not match",
            id="hmac-algorithm-mismatch",
        ),
        # github
        pytest.param(
            "github", {"X-GitHub-Event": "push"}, BODY, "missing X-Hub", id="github-missing"
        ),
        pytest.param(
            "github",
            {"X-Hub-Signature-256": f"sha256={WRONG}", "X-GitHub-Event": "push"},
            BODY,
            "does not match",
            id="github-wrong",
        ),
        pytest.param(
            "github",
            {"X-Hub-Signature-256": f"sha1={hexmac('sha1')}"},
            BODY,
            "must use sha256",
            id="github-256-header-with-sha1",
        ),
        pytest.param(
            "github",
            {"X-Hub-Signature-256": hexmac("sha256")},
            BODY,
            "malformed",
            id="github-no-prefix",
        ),
        pytest.param(
            "github",
            {"X-Hub-Signature-256": f"sha256={WRONG}", "X-Hub-Signature": f"sha1={hexmac('sha1')}"},
            BODY,
            "does not match",
            id="github-no-downgrade-to-sha1",
        ),
        pytest.param(
            "github",
            {"X-Hub-Signature": f"sha1={'0' * 40}"},
            BODY,
            "does not match",
            id="github-legacy-wrong",
        ),
        # gitlab, harbor
        pytest.param("gitlab", {}, BODY, "missing X-Gitlab-Token", id="gitlab-missing"),
        pytest.param(
            "gitlab", {"X-Gitlab-Token": "nope"}, BODY, "does not match", id="gitlab-wrong"
        ),
        pytest.param(
            "gitlab", {"X-Gitlab-Token": TOKEN + "x"}, BODY, "does not match", id="gitlab-prefix"
        ),
        pytest.param("harbor", {}, BODY, "missing Authorization", id="harbor-missing"),
        pytest.param(
            "harbor",
            {"Authorization": f"Bearer {TOKEN}"},
            BODY,
            "does not match",
            id="harbor-wrong",
        ),
        # bitbucket
        pytest.param(
            "bitbucket", {"X-Event-Key": "repo:push"}, BODY, "missing", id="bitbucket-missing"
        ),
        pytest.param(
            "bitbucket",
            {"X-Hub-Signature": f"sha256={WRONG}"},
            BODY,
            "does not match",
            id="bitbucket-wrong",
        ),
        # nexus
        pytest.param("nexus", {}, BODY, "missing X-Nexus", id="nexus-missing"),
        pytest.param(
            "nexus",
            {"X-Nexus-Webhook-Signature": "0" * 40},
            BODY,
            "does not match",
            id="nexus-wrong",
        ),
        pytest.param(
            "nexus",
            {"X-Nexus-Webhook-Signature": f"sha1={hexmac('sha1')}"},
            BODY,
            "not hex",
            id="nexus-prefixed",
        ),
        pytest.param(
            "nexus",
            {"X-Nexus-Webhook-Signature": hexmac("sha1", b"not json")},
            b"not json",
            "JSON",
            id="nexus-signed-but-not-json",
        ),
        # JSON-only types
        pytest.param("dockerhub", {}, b"not json", "JSON", id="dockerhub-not-json"),
        pytest.param("quay", {}, b"[1, 2]", "not a JSON object", id="quay-array"),
        pytest.param("acr", {}, b"\xff\xfe", "JSON", id="acr-binary"),
        pytest.param("acr", {}, b"", "JSON", id="acr-empty"),
        # unsupported
        pytest.param("gcr", {}, BODY, "not supported", id="gcr-unsupported"),
        pytest.param("svn", {}, BODY, "not supported", id="unknown-type"),
    ],
)
def test_bad_requests_are_rejected(
    receiver_type: str, headers: dict[str, str], body: bytes, reason: str
) -> None:
    verdict = check(receiver_type, headers, body)
    assert not verdict.ok
    assert verdict.status == 400
    assert reason in verdict.reason
    assert TOKEN not in verdict.reason
    for algorithm in ("sha1", "sha256", "sha512"):
        assert hexmac(algorithm, body) not in verdict.reason


@pytest.mark.parametrize(
    "receiver_type", ["generic-hmac", "github", "gitlab", "bitbucket", "harbor", "nexus"]
)
def test_an_empty_token_never_authenticates(receiver_type: str) -> None:
    headers = {
        "X-Signature": f"sha256={hexmac('sha256', key='')}",
        "X-Hub-Signature-256": f"sha256={hexmac('sha256', key='')}",
        "X-Gitlab-Token": "",
        "Authorization": "",
        "X-Nexus-Webhook-Signature": hexmac("sha1", key=""),
    }
    verdict = check(receiver_type, headers, token="")
    assert not verdict.ok
    assert "empty" in verdict.reason


def test_github_ping_is_answered_without_action() -> None:
    headers = {"X-Hub-Signature-256": f"sha256={hexmac('sha256')}", "X-GitHub-Event": "ping"}
    verdict = check("github", headers)
    assert verdict.ok and verdict.ping
    assert verdict.event == "ping"


def test_github_ping_still_needs_a_valid_signature() -> None:
    verdict = check("github", {"X-GitHub-Event": "ping"})
    assert not verdict.ok and not verdict.ping


def test_headers_are_case_insensitive_with_a_multidict() -> None:
    headers = CIMultiDict({"x-hub-signature-256": f"sha256={hexmac('sha256')}"})
    headers["X-GITHUB-EVENT"] = "push"
    verdict = check("github", headers)
    assert verdict.ok and verdict.event == "push"


def test_logged_event_names_are_sanitised() -> None:
    headers = {
        "X-Gitlab-Token": TOKEN,
        "X-Gitlab-Event": "Push\nHook" + "x" * 500,
    }
    verdict = check("gitlab", headers)
    assert verdict.ok
    assert "\n" not in verdict.reason
    assert len(verdict.reason) < 120


# Replay protection -------------------------------------------------------------


def timestamped(
    moment: datetime, *, header: str = "X-Signature-Timestamped", body: bytes = BODY
) -> dict[str, str]:
    stamp = str(int(moment.timestamp()))
    return {
        "X-Signature-Timestamp": stamp,
        header: sign(TOKEN, timestamped_payload(stamp, body)),
    }


@pytest.mark.parametrize(
    ("headers", "window", "ok", "reason"),
    [
        pytest.param(timestamped(NOW), None, True, "", id="fresh-default-window"),
        pytest.param(
            timestamped(NOW, header="X-Signature"),
            None,
            True,
            "",
            id="fresh-signature-in-x-signature",
        ),
        pytest.param(
            timestamped(NOW - timedelta(minutes=4)),
            None,
            True,
            "",
            id="inside-default-window",
        ),
        pytest.param(
            timestamped(NOW - DEFAULT_REPLAY_WINDOW - timedelta(seconds=1)),
            None,
            False,
            "replay window",
            id="older-than-default-window",
        ),
        pytest.param(
            timestamped(NOW + timedelta(minutes=6)),
            None,
            False,
            "replay window",
            id="from-the-future",
        ),
        pytest.param(
            timestamped(NOW - timedelta(seconds=30)),
            timedelta(minutes=1),
            True,
            "",
            id="inside-configured-window",
        ),
        pytest.param(
            timestamped(NOW - timedelta(seconds=90)),
            timedelta(minutes=1),
            False,
            "replay window",
            id="outside-configured-window",
        ),
        pytest.param(
            {"X-Signature": sign(TOKEN, BODY)},
            timedelta(minutes=1),
            True,
            "signature valid",
            id="flux-body-only-not-required",
        ),
        pytest.param(
            {"X-Signature-Timestamp": "yesterday", "X-Signature": sign(TOKEN, BODY)},
            None,
            False,
            "malformed X-Signature-Timestamp",
            id="timestamp-not-a-number",
        ),
        pytest.param(
            {"X-Signature-Timestamp": TS, "X-Signature": sign(TOKEN, BODY)},
            None,
            False,
            "does not match",
            id="timestamp-not-covered-by-signature",
        ),
        pytest.param(
            {
                "X-Signature-Timestamp": TS,
                "X-Signature-Timestamped": sign(
                    TOKEN, timestamped_payload(str(int(NOW.timestamp()) - 10), BODY)
                ),
            },
            None,
            False,
            "does not match",
            id="timestamp-swapped",
        ),
        pytest.param(
            {"X-Signature-Timestamp": TS},
            None,
            False,
            "missing X-Signature",
            id="timestamp-without-signature",
        ),
    ],
)
def test_generic_hmac_replay_protection(
    headers: dict[str, str], window: timedelta | None, ok: bool, reason: str
) -> None:
    verdict = check("generic-hmac", headers, replay_window=window)
    assert verdict.ok is ok, verdict.reason
    assert reason in verdict.reason


def test_a_required_timestamp_refuses_flux_body_only_signatures() -> None:
    flux = {"X-Signature": sign(TOKEN, BODY)}
    verdict = verify(
        "generic-hmac", token=TOKEN, headers=flux, body=BODY, now=NOW, require_timestamp="because"
    )
    assert not verdict.ok
    assert verdict.reason == "missing X-Signature-Timestamp header (replay protection because)"
    assert verify(
        "generic-hmac",
        token=TOKEN,
        headers=timestamped(NOW),
        body=BODY,
        now=NOW,
        require_timestamp="because",
    ).ok


@pytest.mark.parametrize(
    ("gates", "annotations", "controller", "why"),
    [
        pytest.param(False, None, False, None, id="reconcile-only-flux-way"),
        pytest.param(
            True, None, False, "required for a Receiver that opens or closes Gates", id="gates"
        ),
        pytest.param(
            False,
            {REPLAY_PROTECTION_ANNOTATION: "required"},
            False,
            f"required by the Receiver ({REPLAY_PROTECTION_ANNOTATION})",
            id="receiver-asks",
        ),
        pytest.param(False, {REPLAY_PROTECTION_ANNOTATION: "no"}, False, None, id="other-value"),
        pytest.param(
            True,
            None,
            True,
            "required by the controller (--require-signed-timestamp)",
            id="controller-asks",
        ),
    ],
)
def test_when_a_signed_timestamp_is_required(
    gates: bool, annotations: dict[str, str] | None, controller: bool, why: str | None
) -> None:
    assert (
        timestamp_required(
            acts_on_gates=gates, annotations=annotations, controller_requires=controller
        )
        == why
    )


def test_sluice_provider_headers_pass_both_modes() -> None:
    """What the generic-hmac Provider sends, the timestamped signature only, is
    accepted with and without a required window."""
    headers = timestamped(NOW)
    assert check("generic-hmac", headers).ok
    assert check("generic-hmac", headers, replay_window=timedelta(seconds=10)).ok


def test_sign_refuses_unknown_algorithms() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        sign(TOKEN, BODY, algorithm="md5")


# spec.events -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "event", "allowed"),
    [
        pytest.param(None, "push", True, id="no-filter"),
        pytest.param([], "push", True, id="empty-filter"),
        pytest.param(["push"], "push", True, id="listed"),
        pytest.param(["Push"], "push", True, id="case-insensitive"),
        pytest.param(["push Hook"], "Push Hook", True, id="gitlab-case-insensitive"),
        pytest.param(["push"], "pull_request", False, id="not-listed"),
        pytest.param(["push", "release"], "release", True, id="one-of-several"),
        pytest.param(["push"], "", False, id="event-header-missing"),
        pytest.param(["push"], None, True, id="type-without-events"),
    ],
)
def test_event_allowed(events: list[str] | None, event: str | None, allowed: bool) -> None:
    assert event_allowed(events, event) is allowed
