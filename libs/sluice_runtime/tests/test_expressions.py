"""CEL health check expressions: Flux's order and the generic rules, as a table."""

from __future__ import annotations

from typing import Any

import pytest

from sluice_runtime.kube.expressions import HealthCheckExpr, HealthRules, InvalidExpression

WIDGET = HealthCheckExpr(
    api_version="example.com/v1",
    kind="Widget",
    current="status.phase == 'Ready'",
    in_progress="status.phase == 'Pending'",
    failed="status.phase == 'Broken' || status.phase == 'Pending'",
)
CONFIG = HealthCheckExpr(api_version="v1", kind="ConfigMap", current="data.ready == 'yes'")
RULES = HealthRules([WIDGET, CONFIG])


def widget(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "generation": 2},
        "status": {"observedGeneration": 2, **status},
    }


@pytest.mark.parametrize(
    ("obj", "status", "says"),
    [
        pytest.param(widget(phase="Ready"), "Current", "current", id="current"),
        pytest.param(widget(phase="Broken"), "Failed", "failed", id="failed"),
        pytest.param(widget(phase="Pending"), "InProgress", "inProgress", id="inprogress-first"),
        pytest.param(widget(phase="Other"), "InProgress", "none", id="none-true"),
        pytest.param(widget(), "InProgress", "cannot be evaluated", id="missing-field"),
        pytest.param(
            {**widget(phase="Ready"), "status": {"observedGeneration": 1, "phase": "Ready"}},
            "InProgress",
            "observed 1",
            id="stale-generation",
        ),
        pytest.param(
            {**widget(phase="Ready"), "metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}},
            "Terminating",
            "deleted",
            id="terminating",
        ),
        pytest.param(
            {"apiVersion": "v1", "kind": "ConfigMap", "data": {"ready": "no"}},
            "InProgress",
            "none",
            id="configmap-not-yet",
        ),
        pytest.param(
            {"apiVersion": "v1", "kind": "ConfigMap", "data": {"ready": "yes"}},
            "Current",
            "current",
            id="configmap-ready",
        ),
        pytest.param(
            {"apiVersion": "v1", "kind": "Secret", "data": {}},
            "Current",
            "Secret",
            id="other-kind-kstatus",
        ),
        pytest.param(
            {**widget(phase="Ready"), "apiVersion": "example.com/v2"},
            "Current",
            "Widget is current",
            id="other-version-kstatus",
        ),
    ],
)
def test_health_rules(obj: dict[str, Any], status: str, says: str) -> None:
    health = RULES.status(obj)
    assert health.status == status
    assert says in health.message


@pytest.mark.parametrize(
    ("check", "named"),
    [
        pytest.param(
            HealthCheckExpr("example.com/v1", "Widget", current="status.phase =="),
            "current expression 'status.phase =='",
            id="current",
        ),
        pytest.param(
            HealthCheckExpr("example.com/v1", "Widget", current="true", failed="foo("),
            "failed expression 'foo('",
            id="failed",
        ),
    ],
)
def test_invalid_expression_named(check: HealthCheckExpr, named: str) -> None:
    with pytest.raises(InvalidExpression, match=r"example\.com/v1/Widget") as raised:
        HealthRules([check])
    assert named in str(raised.value)


def test_non_bool_is_not_a_verdict() -> None:
    rules = HealthRules([HealthCheckExpr("v1", "ConfigMap", current="1 + 1")])
    health = rules.status({"apiVersion": "v1", "kind": "ConfigMap"})
    assert health.status == "InProgress" and "not a bool" in health.message


def test_an_expression_past_its_cost_budget_fails_the_object_naming_it() -> None:
    # Three nested comprehensions over 100 items of the object: a million iterations.
    rules = HealthRules(
        [
            HealthCheckExpr(
                api_version="v1",
                kind="ConfigMap",
                current="data.a.all(x, data.a.all(y, data.a.all(z, x + y + z >= 0)))",
            )
        ]
    )
    health = rules.status(
        {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": list(range(100))}}
    )
    assert health.status == "Failed"
    assert health.message.endswith(
        "CEL evaluation exceeded its cost budget of 100000 steps (spent 100001)"
    )
