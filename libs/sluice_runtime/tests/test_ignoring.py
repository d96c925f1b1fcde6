"""Drift ignore rules: which objects a rule targets and what it takes out, as a table."""

from __future__ import annotations

from typing import Any

import pytest

from sluice_runtime.kube.ignoring import (
    IgnoreRule,
    InvalidSelector,
    Target,
    selector_matches,
    validate,
    without_ignored,
)


def deploy(**labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "apps", "labels": labels},
        "spec": {"replicas": 2, "template": {"metadata": {"annotations": {"a/b": "1", "c": "2"}}}},
    }


@pytest.mark.parametrize(
    ("rule", "expected_spec"),
    [
        pytest.param(
            IgnoreRule(("/spec/replicas",)),
            {"template": {"metadata": {"annotations": {"a/b": "1", "c": "2"}}}},
            id="no-target-every-object",
        ),
        pytest.param(
            IgnoreRule(("/spec/template/metadata/annotations/a~1b",)),
            {"replicas": 2, "template": {"metadata": {"annotations": {"c": "2"}}}},
            id="escaped-slash",
        ),
        pytest.param(
            IgnoreRule(("/spec/replicas",), Target(kind="Service")),
            deploy()["spec"],
            id="other-kind",
        ),
        pytest.param(
            IgnoreRule(("/spec/replicas",), Target(group="apps", kind="Deploy.*", name="w.b")),
            {"template": {"metadata": {"annotations": {"a/b": "1", "c": "2"}}}},
            id="regex-target",
        ),
        pytest.param(
            IgnoreRule(("/spec/replicas",), Target(name="we")),
            deploy()["spec"],
            id="regex-anchored",
        ),
        pytest.param(
            IgnoreRule(("/spec/replicas",), Target(label_selector="tier=web")),
            {"template": {"metadata": {"annotations": {"a/b": "1", "c": "2"}}}},
            id="label-selector",
        ),
        pytest.param(IgnoreRule(("/spec/nothing/here",)), deploy()["spec"], id="missing-path"),
    ],
)
def test_without_ignored(rule: IgnoreRule, expected_spec: dict[str, Any]) -> None:
    obj = deploy(tier="web")
    stripped = without_ignored(obj, [rule])
    assert stripped["spec"] == expected_spec
    assert obj == deploy(tier="web"), "the input is not modified"


def test_identity_is_never_ignored() -> None:
    stripped = without_ignored(deploy(), [IgnoreRule(("/metadata/name", "/kind"))])
    assert stripped["metadata"]["name"] == "web" and stripped["kind"] == "Deployment"


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        pytest.param("a=1", {"a": "1"}, True, id="equal"),
        pytest.param("a==1,b", {"a": "1"}, False, id="exists-missing"),
        pytest.param("a!=1", {"a": "2"}, True, id="not-equal"),
        pytest.param("!a", {"a": "2"}, False, id="not-exists"),
        pytest.param("a in (1, 2)", {"a": "2"}, True, id="in"),
        pytest.param("a notin (1,2),b", {"a": "3", "b": ""}, True, id="notin-and-exists"),
    ],
)
def test_selector(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert selector_matches(selector, labels) is matches


@pytest.mark.parametrize(
    ("rule", "named"),
    [
        pytest.param(IgnoreRule(("spec/replicas",)), "'spec/replicas'", id="pointer"),
        pytest.param(IgnoreRule(("/a",), Target(name="(")), "'('", id="regex"),
        pytest.param(IgnoreRule(("/a",), Target(label_selector="a in b")), "'a in b'", id="sel"),
    ],
)
def test_invalid_rules_are_named(rule: IgnoreRule, named: str) -> None:
    with pytest.raises(InvalidSelector) as raised:
        validate([rule])
    assert named in str(raised.value)
