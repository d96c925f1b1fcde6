"""Alert matching and the event each Provider receives, as Flux's event server does it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from notification_controller.alerting import (
    enrich,
    invalid_patterns,
    matches,
    metadata_conflicts,
)
from sluice_api.notification import Alert

KS_GROUP = "kustomize.toolkit.fluxcd.io"


def alert(**spec: Any) -> Alert:
    body: dict[str, Any] = {"providerRef": {"name": "chat"}, "eventSources": [], **spec}
    return Alert.model_validate(
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Alert",
            "metadata": {"name": "on-call", "namespace": "flux-system"},
            "spec": body,
        }
    )


def event(
    *,
    kind: str = "Kustomization",
    name: str = "apps",
    namespace: str = "flux-system",
    severity: str = "info",
    message: str = "Reconciliation finished",
    metadata: dict[str, str] | None = None,
    api_version: str = f"{KS_GROUP}/v1",
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "involvedObject": {
            "apiVersion": api_version,
            "kind": kind,
            "name": name,
            "namespace": namespace,
            "uid": "1234",
        },
        "severity": severity,
        "timestamp": "2025-01-02T03:04:05Z",
        "message": message,
        "reason": "ReconciliationSucceeded",
        "reportingController": "kustomize-controller",
        "reportingInstance": "kustomize-controller-0",
    }
    if metadata is not None:
        body["metadata"] = metadata
    return body


LABELS: dict[tuple[str, str, str], dict[str, str]] = {
    ("Kustomization", "flux-system", "apps"): {"team": "platform", "tier": "infra"},
    ("Kustomization", "flux-system", "web"): {"team": "web"},
    ("Kustomization", "flux-system", "bare"): {},
}


def labels_of(involved: Mapping[str, Any]) -> Mapping[str, str] | None:
    return LABELS.get((involved["kind"], involved["namespace"], involved["name"]))


def source(**fields: Any) -> dict[str, Any]:
    return {"kind": "Kustomization", "name": "apps", **fields}


@pytest.mark.parametrize(
    ("spec", "evt", "expected"),
    [
        pytest.param({"eventSources": [source()]}, event(), True, id="by-name"),
        pytest.param({"eventSources": [source(name="*")]}, event(), True, id="wildcard-name"),
        pytest.param({"eventSources": [source(name="other")]}, event(), False, id="other-name"),
        # Flux 2.7 Alerts name the Flux Operator's kinds.
        pytest.param(
            {"eventSources": [source(kind="FluxInstance", name="flux")]},
            event(kind="FluxInstance", name="flux", api_version="fluxcd.controlplane.io/v1"),
            True,
            id="flux-operator-kind",
        ),
        pytest.param(
            {"eventSources": [source(kind="ResourceSet", name="*")]},
            event(kind="ResourceSetInputProvider", api_version="fluxcd.controlplane.io/v1"),
            False,
            id="flux-operator-other-kind",
        ),
        pytest.param(
            {"eventSources": [source(name="App")]}, event(), False, id="name-is-case-sensitive"
        ),
        pytest.param(
            {"eventSources": [source(name="app*")]}, event(), False, id="no-name-globbing"
        ),
        pytest.param(
            {"eventSources": [source(kind="GitRepository")]}, event(), False, id="other-kind"
        ),
        pytest.param(
            {"eventSources": [source(name="*")]},
            event(namespace="apps"),
            False,
            id="namespace-defaults-to-alerts",
        ),
        pytest.param(
            {"eventSources": [source(namespace="apps")]},
            event(namespace="apps"),
            True,
            id="explicit-namespace",
        ),
        pytest.param(
            {"eventSources": [source(namespace="apps")]},
            event(),
            False,
            id="explicit-namespace-excludes-own",
        ),
        pytest.param(
            {"eventSources": [source(name="*", namespace="*")]},
            event(),
            False,
            id="no-namespace-wildcard",
        ),
        pytest.param(
            {"eventSources": [source(kind="GitRepository"), source(name="*")]},
            event(),
            True,
            id="any-source",
        ),
        pytest.param({"eventSources": []}, event(), False, id="no-sources"),
        # severity
        pytest.param(
            {"eventSources": [source()], "eventSeverity": "info"},
            event(severity="error"),
            True,
            id="info-gets-errors",
        ),
        pytest.param(
            {"eventSources": [source()], "eventSeverity": "error"},
            event(severity="error"),
            True,
            id="error-gets-errors",
        ),
        pytest.param(
            {"eventSources": [source()], "eventSeverity": "error"},
            event(severity="info"),
            False,
            id="error-skips-info",
        ),
        # suspend
        pytest.param({"eventSources": [source()], "suspend": True}, event(), False, id="suspended"),
        # matchLabels
        pytest.param(
            {"eventSources": [source(name="*", matchLabels={"team": "platform"})]},
            event(),
            True,
            id="labels-match",
        ),
        pytest.param(
            {"eventSources": [source(name="*", matchLabels={"team": "platform", "tier": "infra"})]},
            event(),
            True,
            id="labels-all-match",
        ),
        pytest.param(
            {"eventSources": [source(name="*", matchLabels={"team": "platform", "tier": "app"})]},
            event(),
            False,
            id="labels-one-differs",
        ),
        pytest.param(
            {"eventSources": [source(name="*", matchLabels={"team": "platform"})]},
            event(name="web"),
            False,
            id="labels-other-value",
        ),
        pytest.param(
            {"eventSources": [source(name="*", matchLabels={"team": "platform"})]},
            event(name="bare"),
            False,
            id="labels-object-has-none",
        ),
        pytest.param(
            {"eventSources": [source(name="*", matchLabels={"team": "platform"})]},
            event(name="gone"),
            False,
            id="labels-object-not-found",
        ),
        pytest.param(
            {"eventSources": [source(name="*", matchLabels={})]},
            event(name="bare"),
            True,
            id="empty-labels-match-existing",
        ),
        pytest.param(
            {"eventSources": [source(name="*", matchLabels={})]},
            event(name="gone"),
            False,
            id="empty-labels-need-the-object",
        ),
        pytest.param(
            {"eventSources": [source(matchLabels={"team": "web"})]},
            event(),
            False,
            id="labels-checked-with-a-name-too",
        ),
        # inclusion and exclusion
        pytest.param(
            {"eventSources": [source()], "inclusionList": [".*finished.*"]},
            event(),
            True,
            id="included",
        ),
        pytest.param(
            {"eventSources": [source()], "inclusionList": ["succeeded", "finished"]},
            event(),
            True,
            id="included-by-second",
        ),
        pytest.param(
            {"eventSources": [source()], "inclusionList": ["^failed"]},
            event(),
            False,
            id="not-included",
        ),
        pytest.param(
            {"eventSources": [source()], "inclusionList": ["finished"]},
            event(),
            True,
            id="inclusion-is-a-search",
        ),
        pytest.param(
            {"eventSources": [source()], "exclusionList": ["finished"]},
            event(),
            False,
            id="excluded",
        ),
        pytest.param(
            {"eventSources": [source()], "exclusionList": ["waiting.*socket"]},
            event(),
            True,
            id="not-excluded",
        ),
        pytest.param(
            {
                "eventSources": [source()],
                "inclusionList": ["Reconciliation"],
                "exclusionList": ["finished$"],
            },
            event(),
            False,
            id="exclusion-wins",
        ),
        pytest.param(
            {"eventSources": [source()], "inclusionList": ["("]},
            event(),
            False,
            id="invalid-inclusion-matches-nothing",
        ),
        pytest.param(
            {"eventSources": [source()], "exclusionList": ["(", "nothing"]},
            event(),
            True,
            id="invalid-exclusion-excludes-nothing",
        ),
        pytest.param(
            {"eventSources": [source()], "inclusionList": []},
            event(),
            True,
            id="empty-inclusion-list",
        ),
    ],
)
def test_matches(spec: dict[str, Any], evt: dict[str, Any], expected: bool) -> None:
    assert matches(alert(**spec), evt, labels_of=labels_of) is expected


def test_labels_are_looked_up_only_when_needed() -> None:
    looked_up: list[Mapping[str, Any]] = []

    def recording(involved: Mapping[str, Any]) -> Mapping[str, str] | None:
        looked_up.append(involved)
        return labels_of(involved)

    assert matches(alert(eventSources=[source(name="*")]), event(), labels_of=recording)
    assert not matches(
        alert(eventSources=[source(kind="Bucket", name="*", matchLabels={"a": "b"})]),
        event(),
        labels_of=recording,
    )
    assert looked_up == []
    assert matches(
        alert(eventSources=[source(name="*", matchLabels={"team": "platform"})]),
        event(),
        labels_of=recording,
    )
    assert [obj["name"] for obj in looked_up] == ["apps"]


def test_invalid_patterns_are_listed() -> None:
    errors = invalid_patterns(alert(inclusionList=["ok", "("], exclusionList=["fine", "(?=x)"]))
    assert [(e.what, e.pattern) for e in errors] == [
        ("spec.inclusionList[1]", "("),
        ("spec.exclusionList[1]", "(?=x)"),
    ]
    assert "no backreferences or lookaround" in str(errors[1])
    assert invalid_patterns(alert()) == []


@pytest.mark.timeout(10)
def test_a_catastrophic_pattern_is_matched_in_linear_time() -> None:
    # `(a+)+$` backtracks exponentially on Python's `re` against a's then a b;
    # the whole event dispatcher would stall on it.
    message = "a" * 50 + "b"
    sources = [source()]
    spec = {"eventSources": sources, "inclusionList": ["(a+)+$"]}
    assert matches(alert(**spec), event(message=message), labels_of=labels_of) is False
    spec = {"eventSources": sources, "exclusionList": ["(a+)+$"]}
    assert matches(alert(**spec), event(message=message), labels_of=labels_of) is True


# enrich ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "metadata", "expected"),
    [
        pytest.param({}, None, None, id="nothing"),
        pytest.param(
            {},
            {f"{KS_GROUP}/revision": "main@sha1:abc"},
            {"revision": "main@sha1:abc"},
            id="group-prefix-stripped",
        ),
        pytest.param(
            {"eventMetadata": {"env": "prod"}},
            None,
            {"env": "prod"},
            id="alert-metadata-added",
        ),
        pytest.param(
            {"eventMetadata": {"revision": "from-alert", "env": "prod"}},
            {f"{KS_GROUP}/revision": "main@sha1:abc"},
            {"revision": "main@sha1:abc", "env": "prod"},
            id="event-wins-over-alert",
        ),
        pytest.param(
            {"summary": "Cluster addons impacted"},
            None,
            {"summary": "Cluster addons impacted"},
            id="summary",
        ),
        pytest.param(
            {"summary": "from summary", "eventMetadata": {"summary": "from metadata"}},
            None,
            {"summary": "from summary"},
            id="summary-wins-over-event-metadata",
        ),
        pytest.param(
            {"summary": "from summary"},
            {f"{KS_GROUP}/summary": "from event"},
            {"summary": "from event"},
            id="event-wins-over-summary",
        ),
        pytest.param(
            {"eventMetadata": {"env": "prod"}},
            {"event.toolkit.fluxcd.io/env": "staging", "event.toolkit.fluxcd.io/team": "a"},
            {"env": "prod", "team": "a"},
            id="annotations-lowest",
        ),
        pytest.param(
            {},
            {f"{KS_GROUP}/token": "t0k3n", f"{KS_GROUP}/revision": "r"},
            {"revision": "r"},
            id="token-dropped",
        ),
        pytest.param(
            {},
            {"source.toolkit.fluxcd.io/revision": "r", f"{KS_GROUP}/revision": "k"},
            {"revision": "k"},
            id="other-groups-dropped",
        ),
        pytest.param(
            {},
            {"unprefixed": "kept"},
            {"unprefixed": "kept"},
            id="unsortable-left-as-is",
        ),
        pytest.param(
            {},
            {"unprefixed": "kept", f"{KS_GROUP}/token": "t0k3n"},
            {"unprefixed": "kept"},
            id="unsortable-left-as-is-without-token",
        ),
        pytest.param(
            {"eventMetadata": {"dashboard": "https://ops:pw@grafana.example/d/1"}},
            {f"{KS_GROUP}/source": "https://git:t0k3n@git.example/app.git"},
            {
                "dashboard": "https://redacted@grafana.example/d/1",
                "source": "https://redacted@git.example/app.git",
            },
            id="url-credentials-redacted",
        ),
    ],
)
def test_enrich(
    spec: dict[str, Any], metadata: dict[str, str] | None, expected: dict[str, str] | None
) -> None:
    original = event(metadata=metadata)
    frozen = repr(original)
    enriched = enrich(alert(eventSources=[source()], **spec), original)
    assert enriched.get("metadata") == expected
    assert repr(original) == frozen, "enrich must not change its input"
    assert {k: v for k, v in enriched.items() if k != "metadata"} == {
        k: v for k, v in original.items() if k != "metadata"
    }


def test_metadata_conflicts() -> None:
    a = alert(eventSources=[source()], eventMetadata={"revision": "x", "env": "prod"})
    evt = event(metadata={f"{KS_GROUP}/revision": "main@sha1:abc"})
    assert metadata_conflicts(a, evt) == ["revision"]
    assert metadata_conflicts(alert(eventSources=[source()]), evt) == []


def test_enrich_redacts_url_credentials_in_the_message() -> None:
    original = event(metadata=None)
    original["message"] = "fetch https://bot:ghp_s3cret@github.com/acme/app failed"
    enriched = enrich(alert(eventSources=[source()]), original)
    assert enriched["message"] == "fetch https://redacted@github.com/acme/app failed"
