"""A Provider's `commitStatusExpr` (Flux 2.6): the commit status context is what the
CEL expression gives over `event`, `provider` and `alert`; one that cannot give a
string fails the delivery naming it, one that does not compile stalls the Provider."""

from __future__ import annotations

import json
from typing import Any

import pytest

from notification_controller.outbound import DeliveryError
from notification_controller.provider_objects import unsupported_type
from notification_controller.providers import build_request
from sluice_envtest.harness import condition, make_secret

from . import test_alerts
from .conftest import PROVIDER, Platform
from .test_alerts import GIT_SOURCES, Peers, alerting, emit
from .test_alerts import event as source_event
from .test_providers import NOW, SHA, TOKEN, event, provider

peers = test_alerts.peers
"""The GitHub-API-shaped peer of the alert tests, as a fixture of this module too."""

ALERT = {"metadata": {"name": "fleet", "namespace": "flux-system"}, "spec": {"summary": "prod"}}
CLUSTER = (
    "(event.involvedObject.kind + '/' + event.involvedObject.name + '/' + alert.metadata.name)"
)


@pytest.mark.parametrize(
    ("type_", "address", "expression", "field", "context"),
    [
        pytest.param("github", "https://github.com/acme/fleet", CLUSTER, "context",
                     "Kustomization/Apps/fleet", id="github-event-and-alert"),
        pytest.param("gitlab", "https://gitlab.com/acme/fleet", CLUSTER, "name",
                     "Kustomization/Apps/fleet", id="gitlab-event-and-alert"),
        pytest.param("github", "https://github.com/acme/fleet",
                     "provider.metadata.name + '/' + event.metadata.env", "context", "chat/prod",
                     id="provider-and-metadata"),
        pytest.param("github", "https://github.com/acme/fleet", None, "context",
                     "kustomization/apps/0c9c2e41", id="default-without-expression"),
    ],
)  # fmt: skip
def test_the_expression_names_the_commit_status(
    type_: str, address: str, expression: str | None, field: str, context: str
) -> None:
    spec = {"commitStatusExpr": expression} if expression else {}
    request = build_request(
        provider(type_, **spec),
        event(),
        address=address,
        token=TOKEN,
        headers={},
        now=NOW,
        alert=ALERT,
    )
    assert request is not None
    assert json.loads(request.body)[field] == context
    assert request.url.endswith(f"/statuses/{SHA}")


@pytest.mark.parametrize(
    ("expression", "match"),
    [
        pytest.param("1 + 2", "gave IntType '3', not a non-empty string", id="not-a-string"),
        pytest.param("''", "gave StringType '', not a non-empty string", id="empty"),
        pytest.param("alert.spec.missing", "cannot be evaluated", id="missing-field"),
        pytest.param("event.(", "invalid CEL expression", id="does-not-compile"),
    ],
)
def test_an_expression_that_gives_no_context_fails_naming_it(expression: str, match: str) -> None:
    with pytest.raises(DeliveryError, match=match) as raised:
        build_request(
            provider("github", commitStatusExpr=expression),
            event(),
            address="https://github.com/acme/fleet",
            token=TOKEN,
            headers={},
            now=NOW,
            alert=ALERT,
        )
    assert "commitStatusExpr" in raised.value.message


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        pytest.param({"commitStatusExpr": CLUSTER}, None, id="valid"),
        pytest.param({"commitStatusExpr": "event.("},
                     "spec.commitStatusExpr: invalid CEL expression 'event.('", id="invalid"),
        pytest.param({"serviceAccountName": "notifier"},
                     "spec.serviceAccountName (workload identity) is not supported",
                     id="service-account"),
    ],
)  # fmt: skip
def test_a_provider_that_cannot_be_served_is_refused(
    spec: dict[str, Any], problem: str | None
) -> None:
    found = unsupported_type(provider("github", **spec))
    assert found == problem or (problem is not None and str(found).startswith(problem))


async def test_the_hub_sets_the_commit_status_the_expression_names(
    alone: Platform, peers: Peers
) -> None:
    p = alone
    ns = p.namespace
    await make_secret(p.kube, ns, "gh-expr", {"token": TOKEN})
    github = {
        "type": "github",
        "address": f"{peers.base}/acme/app",
        "secretRef": {"name": "gh-expr"},
        "commitStatusExpr": "event.involvedObject.name + '/' + alert.metadata.name",
    }
    await alerting(p, "expr", github, GIT_SOURCES)
    before = len(peers.statuses)
    await emit(p, source_event(ns, "app", revision=f"main@sha1:{SHA}"))
    # Other tests' GitHub Providers may share the namespace: this one's status only.
    ours = [(path, body["context"]) for path, body, _ in peers.statuses[before:]]
    assert (f"/api/v3/repos/acme/app/statuses/{SHA}", "app/expr") in ours


@pytest.mark.parametrize(
    ("name", "spec", "message"),
    [
        pytest.param("bad-expr", {"commitStatusExpr": "event.("},
                     "spec.commitStatusExpr: invalid CEL expression 'event.('", id="expression"),
        pytest.param("identity", {"serviceAccountName": "notifier"},
                     "spec.serviceAccountName (workload identity) is not supported",
                     id="service-account"),
    ],
)  # fmt: skip
async def test_a_provider_that_cannot_be_served_stalls(
    alone: Platform, name: str, spec: dict[str, Any], message: str
) -> None:
    p = alone
    await p.create(PROVIDER, name, {"type": "github", "address": "https://github.com/a/b", **spec})
    stalled = await p.observe.wait(
        PROVIDER,
        name,
        lambda o: (condition(o, "Stalled") or {}).get("status") == "True",
        what="Stalled",
    )
    assert condition(stalled, "Stalled")["message"].startswith(message)  # type: ignore[index]
    assert condition(stalled, "Ready")["status"] == "False"  # type: ignore[index]
