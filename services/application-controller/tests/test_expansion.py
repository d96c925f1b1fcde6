"""What an Application expands into, and what it refuses: pure, table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from application_controller.expansion import (
    Invalid,
    destination_name,
    expand,
    ready_message,
    saved_template,
    wants_template,
)
from sluice_api.gitops import Application, Destination

GIT = {"kind": "GitRepository", "name": "repo"}


def app(
    config: dict[str, Any] | None,
    *,
    source: dict[str, Any] | None = GIT,
    labels: dict[str, str] | None = None,
) -> Application:
    spec: dict[str, Any] = {}
    if source is not None:
        spec["source"] = {"sourceRef": source}
    if config is not None:
        spec["config"] = config
    return Application.model_validate(
        {
            "metadata": {"name": "shop", "namespace": "team", "uid": "u-1", "labels": labels},
            "spec": {"kind": "fluxcd", "fluxApp": {"spec": spec}},
        }
    )


HOST = {"destination": {"targetNamespace": "web"}}
MEMBER = {"destination": {"targetNamespace": "web", "kubeConfig": {"secretRef": {"name": "prod"}}}}
CHART = {"chart": "./chart", "valuesFiles": ["./chart/values.yaml"]}
TEMPLATE = {
    "metadata": {"name": "saved", "namespace": "team"},
    "spec": {
        "chart": "podinfo",
        "version": "6.*",
        "interval": "5m",
        "sourceRef": {"kind": "HelmRepository", "name": "charts"},
    },
}


@pytest.mark.parametrize(
    ("destination", "expected"),
    [
        pytest.param({"targetNamespace": "app"}, "app", id="host-is-the-namespace"),
        pytest.param({}, "host", id="host-without-namespace"),
        pytest.param({"kubeConfig": {"secretRef": {"name": "prod"}}, "targetNamespace": "app"}, "prod-app", id="member-is-secret-and-namespace"),
        pytest.param({"kubeConfig": {"secretRef": {"name": "prod"}}}, "prod", id="member-without-namespace"),
    ],
)  # fmt: skip
def test_destination_names_are_kubesphere_s(destination: dict[str, Any], expected: str) -> None:
    assert destination_name(Destination.model_validate(destination)) == expected


@pytest.mark.parametrize(
    ("application", "template", "field"),
    [
        pytest.param(app({}), None, "spec.fluxApp.spec.config: exactly one of helmRelease and kustomization must be set, neither is", id="neither"),
        pytest.param(app(None), None, "neither is", id="no-config"),
        pytest.param(app({"helmRelease": {"chart": CHART, "deploy": [HOST]}, "kustomization": [HOST]}), None, "both is", id="both"),
        pytest.param(app({"helmRelease": {"template": "gone", "deploy": [HOST]}}), None, "spec.fluxApp.spec.config.helmRelease.template: HelmChart gone not found", id="missing-template"),
        pytest.param(app({"helmRelease": {"deploy": [HOST]}}), None, "spec.fluxApp.spec.config.helmRelease: one of chart and template must be set", id="no-chart"),
        pytest.param(app({"helmRelease": {"chart": CHART, "deploy": [HOST]}}, source={"kind": "OCIRepository", "name": "o"}), None, "spec.fluxApp.spec.source.sourceRef.kind: a OCIRepository cannot serve a Helm chart", id="oci-cannot-serve-a-chart"),
        pytest.param(app({"kustomization": [HOST]}, source={"kind": "HelmRepository", "name": "h"}), None, "a HelmRepository cannot serve a kustomization", id="helmrepo-cannot-serve-manifests"),
        pytest.param(app({"helmRelease": {"chart": CHART, "deploy": [HOST]}}, source=None), None, "spec.fluxApp.spec.source.sourceRef: required to deploy a Helm chart", id="no-source"),
        pytest.param(app({"helmRelease": {"chart": CHART, "deploy": []}}), None, "helmRelease.deploy: at least one destination", id="no-deploy"),
        pytest.param(app({"kustomization": [HOST, {"destination": {"targetNamespace": "web"}, "path": "./b"}]}), None, "two entries deploy to the same destination 'web'", id="duplicate-destination"),
        pytest.param(app({"kustomization": [{"destination": {"targetNamespace": "n" * 60}}]}), None, "longer than 63 characters", id="child-name-too-long"),
    ],
)  # fmt: skip
def test_invalid_specs_are_refused_naming_the_field(
    application: Application, template: dict[str, Any] | None, field: str
) -> None:
    with pytest.raises(Invalid) as raised:
        expand(application, template=template)
    assert field in str(raised.value)


def test_a_helm_app_expands_to_one_owned_labelled_helmrelease_per_destination() -> None:
    deploy = [
        {**HOST, "values": {"a": 1}, "install": {"createNamespace": True}},
        {**MEMBER, "interval": "1m", "valuesFrom": [{"kind": "Secret", "name": "db"}]},
    ]
    children = expand(app({"helmRelease": {"chart": CHART, "deploy": deploy}}))
    assert [(c.kind, c.name, c.destination) for c in children] == [
        ("HelmRelease", "shop-web", "web"),
        ("HelmRelease", "shop-prod-web", "prod-web"),
    ]
    host, member = (c.body for c in children)
    assert host["metadata"] == {
        "name": "shop-web",
        "namespace": "team",
        "labels": {"app.kubernetes.io/managed-by": "shop"},
        "annotations": {"app.kubernetes.io/name": "web"},
        "ownerReferences": [
            {
                "apiVersion": "gitops.kubesphere.io/v1alpha1",
                "kind": "Application",
                "name": "shop",
                "uid": "u-1",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    chart = {
        "chart": "./chart",
        "valuesFiles": ["./chart/values.yaml"],
        "sourceRef": {"kind": "GitRepository", "name": "repo", "namespace": "team"},
    }
    assert host["spec"] == {
        "chart": {"spec": chart},
        "interval": "10m",
        "targetNamespace": "web",
        "values": {"a": 1},
        "install": {"createNamespace": True},
    }
    assert member["spec"] == {
        "chart": {"spec": chart},
        "interval": "1m",
        "targetNamespace": "web",
        "kubeConfig": {"secretRef": {"name": "prod"}},
        "valuesFrom": [{"kind": "Secret", "name": "db"}],
    }
    assert (children[1].secret, children[1].secret_field) == (
        "prod",
        "spec.fluxApp.spec.config.helmRelease.deploy[1].destination.kubeConfig.secretRef.name",
    )


def test_a_template_is_the_chart_and_wins_over_the_source() -> None:
    children = expand(
        app({"helmRelease": {"template": "saved", "deploy": [HOST]}}, source=None),
        template=TEMPLATE,
    )
    assert children[0].body["spec"]["chart"]["spec"] == {
        "chart": "podinfo",
        "version": "6.*",
        "interval": "5m",
        "sourceRef": {"kind": "HelmRepository", "name": "charts", "namespace": "team"},
    }


def test_a_kustomize_app_takes_the_source_with_its_namespace() -> None:
    children = expand(
        app({"kustomization": [{**MEMBER, "path": "./deploy", "prune": True}]}, source={**GIT, "namespace": "infra"})
    )  # fmt: skip
    assert children[0].body["spec"] == {
        "sourceRef": {"kind": "GitRepository", "name": "repo", "namespace": "infra"},
        "interval": "10m",
        "prune": True,
        "path": "./deploy",
        "targetNamespace": "web",
        "kubeConfig": {"secretRef": {"name": "prod"}},
    }


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param({"gitops.kubesphere.io/save-helmtemplate": "true"}, True, id="seed-spelling"),
        pytest.param({"gitops.kubesphere.io/save-helm-template": "true"}, True, id="code-spelling"),
        pytest.param({"gitops.kubesphere.io/save-helmtemplate": "false"}, False, id="false"),
        pytest.param(None, False, id="none"),
    ],
)
def test_the_save_label_in_either_spelling(labels: dict[str, str] | None, expected: bool) -> None:
    assert wants_template(app({}, labels=labels)) is expected


def test_a_saved_template_needs_the_source_in_the_apps_namespace() -> None:
    config = {"helmRelease": {"chart": CHART, "deploy": [HOST]}}
    saved = saved_template(app(config))
    assert saved["spec"] == {
        "chart": "./chart",
        "version": "*",
        "sourceRef": {"kind": "GitRepository", "name": "repo"},
        "interval": "10m",
        "valuesFiles": ["./chart/values.yaml"],
    }
    with pytest.raises(Invalid, match=r"spec\.fluxApp\.spec\.source\.sourceRef\.namespace"):
        saved_template(app(config, source={**GIT, "namespace": "elsewhere"}))


@pytest.mark.parametrize(
    ("child", "expected"),
    [
        pytest.param({"metadata": {"generation": 1}}, (False, "not reconciled yet"), id="new"),
        pytest.param({"metadata": {"generation": 2}, "status": {"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "True", "message": "ok"}]}}, (True, "ok"), id="ready"),
        pytest.param({"metadata": {"generation": 3}, "status": {"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "True", "message": "ok"}]}}, (False, "a new generation is not reconciled yet"), id="stale-ready"),
        pytest.param({"metadata": {"generation": 2}, "status": {"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "False", "reason": "InstallFailed", "message": "boom"}]}}, (False, "boom"), id="failed"),
    ],
)  # fmt: skip
def test_a_child_is_ready_only_for_its_current_generation(
    child: dict[str, Any], expected: tuple[bool, str]
) -> None:
    assert ready_message(child) == expected
