"""The Helm chart (charts/sluice) and the plain manifest rendered from it
(deploy/sluice.yaml): they render and lint, keep the multi-tenant lockdown, and
every value reaches the objects. e2e/test_chart_install.py applies them to a
real API server and drives real controllers with them."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
import yaml

from application_controller import __main__ as application_main
from sluice_cli import controllers
from sluice_envtest import image, manifest
from sluice_runtime import app
from sluice_runtime.helming import helm_binary

from .charting import (
    CHART,
    DEFAULT,
    ENABLE_ALL,
    ROOT,
    VALUE_KEYS,
    Loader,
    container,
    of_kind,
    options,
    render,
)


def test_helm_lint_passes_with_default_and_other_values() -> None:
    helm = str(helm_binary())
    for values in ([], ["--set", "multitenancy.enabled=false,serviceMonitor.create=true"]):
        done = subprocess.run(
            [helm, "lint", "--strict", str(CHART), *values], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr


SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def _resolved(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = SCHEMA["definitions"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _untyped(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Values of values.yaml the schema does not give a type (or does not know)."""
    schema = _resolved(schema)
    if "type" not in schema:
        return [path]
    if not isinstance(value, dict) or "properties" not in schema:
        return []
    problems = []
    if schema.get("additionalProperties") is not False:
        problems.append(f"{path}: open to unknown keys")
    for key, item in value.items():
        if key not in schema["properties"]:
            problems.append(f"{path}.{key}: not in the schema")
        else:
            problems += _untyped(item, schema["properties"][key], f"{path}.{key}")
    return problems


def test_the_schema_types_every_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert _untyped(values, SCHEMA, "(root)") == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(
            "sourceController.replicas=abc",
            "sourceController.replicas: Invalid type. Expected: integer, given: string",
            id="replicas-not-a-number",
        ),
        pytest.param(
            "sourceController.replica=3",
            "sourceController: Additional property replica is not allowed",
            id="unknown-controller-key",
        ),
        pytest.param(
            "imagee.tag=1",
            "(root): Additional property imagee is not allowed",
            id="unknown-top-key",
        ),
        pytest.param(
            "multitenancy.platformServiceAccount.nmae=x",
            "multitenancy.platformServiceAccount: Additional property nmae is not allowed",
            id="unknown-nested-key",
        ),
        pytest.param(
            "helmController.logLevel=verbose",
            "helmController.logLevel: helmController.logLevel must be one of the following",
            id="log-level",
        ),
        pytest.param(
            "kustomizeController.resources.limits.memory=lots",
            "kustomizeController.resources.limits.memory: Does not match pattern",
            id="quantity",
        ),
        pytest.param(
            "kustomizeController.resources.limit.memory=1Gi",
            "kustomizeController.resources: Additional property limit is not allowed",
            id="resources-typo",
        ),
        pytest.param(
            "notificationController.concurrent=0",
            "notificationController.concurrent: Must be greater than or equal to 1",
            id="no-workers",
        ),
        pytest.param(
            "image.digest=sha256:abc", "image.digest: Does not match pattern", id="short-digest"
        ),
        pytest.param(
            "watchAllNamespaces=yes",
            "watchAllNamespaces: Invalid type. Expected: boolean, given: string",
            id="boolean",
        ),
    ],
)
def test_the_schema_refuses_wrong_values_naming_the_key(value: str, message: str) -> None:
    helm = str(helm_binary())
    for command in (["lint", "--strict"], ["template", "sluice"]):
        done = subprocess.run(
            [helm, *command, str(CHART), "--set", value], capture_output=True, text=True
        )
        assert done.returncode != 0, (command, done.stdout)
        assert message in done.stdout + done.stderr, (command, done.stdout + done.stderr)


def test_the_install_has_one_deployment_per_controller_and_the_generated_crds() -> None:
    objects = render(crds=True)
    deployments = of_kind(objects, "Deployment")
    assert set(deployments) == DEFAULT
    crds = sorted(of_kind(objects, "CustomResourceDefinition"))
    generated = sorted(
        yaml.safe_load(p.read_text().split("---\n", 1)[1])["metadata"]["name"]
        for p in (ROOT / "crds").glob("*_*.yaml")
    )
    assert crds == generated
    for name, deployment in deployments.items():
        assert container(deployment)["command"] == [name]
        assert container(deployment)["image"] == "ghcr.io/sluice-gitops/sluice:0.1.0"
        assert "--enable-leader-election" in container(deployment)["args"]
        assert container(deployment)["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert deployment["metadata"]["namespace"] == "flux-system"
        assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == name


@pytest.mark.parametrize("name", controllers.NAMES)
def test_every_controller_parses_the_charts_arguments(name: str) -> None:
    parsed = options(of_kind(render(*ENABLE_ALL), "Deployment")[name])
    assert parsed.enable_leader_election is True
    assert parsed.log_level == "info"
    if name != "notification-controller":
        assert (
            parsed.events_addr == "http://notification-controller.flux-system.svc.cluster.local./"
        )


def test_the_install_locks_tenants_down() -> None:
    objects = render()
    deployments = of_kind(objects, "Deployment")
    for name in ("kustomize-controller", "helm-controller", "resourceset-controller"):
        parsed = options(deployments[name])
        assert parsed.no_cross_namespace_refs is True, name
        assert parsed.default_service_account == "default", name
    notification = options(deployments["notification-controller"])
    assert notification.no_cross_namespace_refs is True
    # ArtifactGenerators read only their own namespace's sources.
    assert options(deployments["source-controller"]).no_cross_namespace_refs is True
    # The event hub takes events from the deployed controllers only.
    assert set(notification.events_service_accounts.split(",")) == {
        "source-controller", "kustomize-controller", "helm-controller",
        "resourceset-controller", "gating-controller",
    }  # fmt: skip
    # The gating-controller takes neither flag (Gates refer to nothing across namespaces).
    assert not hasattr(options(deployments["gating-controller"]), "no_cross_namespace_refs")
    # No controller is cluster-admin: the appliers impersonate, and only the
    # platform's own ServiceAccount is bound to cluster-admin.
    admins = [
        subject
        for binding in of_kind(objects, "ClusterRoleBinding").values()
        if binding["roleRef"]["name"] == "cluster-admin"
        for subject in binding["subjects"]
    ]
    assert admins == [
        {"kind": "ServiceAccount", "name": "platform-admin", "namespace": "flux-system"}
    ]
    appliers = {"kustomize-controller", "helm-controller", "resourceset-controller"}
    impersonate = {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]}
    roles = of_kind(objects, "ClusterRole")
    for name in DEFAULT:
        # Each controller has its own role, bound to it alone; only the
        # appliers may impersonate.
        binding = of_kind(objects, "ClusterRoleBinding")[f"sluice-{name}-flux-system"]
        assert binding["roleRef"]["name"] == f"sluice-{name}-flux-system"
        assert [s["name"] for s in binding["subjects"]] == [name]
        rules = roles[f"sluice-{name}-flux-system"]["rules"]
        assert (impersonate in rules) is (name in appliers), name
    for role in roles.values():
        if role["metadata"]["name"] not in {f"sluice-{a}-flux-system" for a in appliers}:
            assert not any("impersonate" in r["verbs"] for r in role["rules"]), role["metadata"]


@pytest.mark.parametrize(
    ("values", "flags_on"),
    [
        pytest.param(("multitenancy.enabled=false",), False, id="lockdown-off"),
        pytest.param(("multitenancy.privileged=true",), True, id="lockdown-on-privileged"),
    ],
)
def test_privileged_appliers_are_bound_to_cluster_admin(
    values: tuple[str, ...], flags_on: bool
) -> None:
    objects = render(*values)
    deployments = of_kind(objects, "Deployment")
    kustomize = options(deployments["kustomize-controller"])
    assert kustomize.no_cross_namespace_refs is flags_on
    assert bool(kustomize.default_service_account) is flags_on
    assert options(deployments["notification-controller"]).no_cross_namespace_refs is flags_on
    assert options(deployments["source-controller"]).no_cross_namespace_refs is flags_on
    binding = of_kind(objects, "ClusterRoleBinding")["sluice-cluster-reconciler-flux-system"]
    assert binding["roleRef"]["name"] == "cluster-admin"
    assert {s["name"] for s in binding["subjects"]} == {
        "kustomize-controller", "helm-controller", "resourceset-controller"
    }  # fmt: skip
    # The platform account exists only while a default account confines the rest.
    assert ("platform-admin" in of_kind(objects, "ServiceAccount")) is flags_on


def test_the_application_controller_is_opt_in_and_manages_only_flux_objects() -> None:
    assert "application-controller" not in of_kind(render(), "Deployment")
    objects = render("applicationController.create=true")
    deployment = of_kind(objects, "Deployment")["application-controller"]
    assert container(deployment)["command"] == ["application-controller"]
    parser = app.parser(service="application-controller", description="", concurrency=1)
    application_main.add_arguments(parser)
    parsed = parser.parse_args(container(deployment)["args"])
    assert parsed.events_addr == "http://notification-controller.flux-system.svc.cluster.local./"
    notification = options(of_kind(objects, "Deployment")["notification-controller"])
    assert "application-controller" in notification.events_service_accounts.split(",")
    # It writes HelmReleases, Kustomizations and HelmCharts, never what they deploy.
    binding = of_kind(objects, "ClusterRoleBinding")["sluice-application-controller-flux-system"]
    assert [s["name"] for s in binding["subjects"]] == ["application-controller"]
    rules = of_kind(objects, "ClusterRole")["sluice-application-controller-flux-system"]["rules"]
    written = {
        (group, resource)
        for rule in rules
        if {"create", "patch", "delete"} & set(rule["verbs"])
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert {g for g, _ in written} == {
        "gitops.kubesphere.io", "helm.toolkit.fluxcd.io", "kustomize.toolkit.fluxcd.io",
        "source.toolkit.fluxcd.io", "",
    }  # fmt: skip
    assert {r for g, r in written if g in ("source.toolkit.fluxcd.io", "")} == {
        "helmcharts",
        "events",
    }
    for other in of_kind(objects, "ClusterRoleBinding").values():
        if other["roleRef"]["name"] == "cluster-admin":
            assert "application-controller" not in {s["name"] for s in other["subjects"]}


@pytest.mark.parametrize("name", controllers.DEFAULT)
def test_a_disabled_controller_is_not_deployed(name: str) -> None:
    objects = render(f"{VALUE_KEYS[name]}.create=false")
    assert name not in of_kind(objects, "Deployment")
    assert name not in of_kind(objects, "ServiceAccount")
    assert set(of_kind(objects, "Deployment")) == DEFAULT - {name}
    subjects = {
        s["name"] for b in of_kind(objects, "ClusterRoleBinding").values() for s in b["subjects"]
    }
    assert name not in subjects
    if name == "notification-controller":
        # Nobody to post events to, and no webhook policy for a pod that is not there.
        for deployment in of_kind(objects, "Deployment").values():
            assert not any(a.startswith("--events-addr") for a in container(deployment)["args"])
        assert "allow-webhooks" not in of_kind(objects, "NetworkPolicy")
    else:
        notification = options(of_kind(objects, "Deployment")["notification-controller"])
        assert name not in notification.events_service_accounts.split(",")


@pytest.mark.parametrize("name", controllers.NAMES)
def test_per_controller_values_reach_the_deployment(name: str) -> None:
    key = VALUE_KEYS[name]
    objects = render(
        *ENABLE_ALL,
        f"{key}.replicas=3",
        f"{key}.concurrent=7",
        f"{key}.logLevel=debug",
        f"{key}.watchLabelSelector=sharding.fluxcd.io/key notin (shard1)",
        f"{key}.extraArgs={{--log-level=warning,--kube-api-qps=12}}",
        f"{key}.resources.limits.memory=2Gi",
        f"{key}.tmpSizeLimit=3Gi",
        f"{key}.extraEnv[0].name=TZ",
        f"{key}.extraEnv[0].value=UTC",
        f"{key}.nodeSelector.disk=ssd",
        f"{key}.tolerations[0].key=dedicated",
        f"{key}.tolerations[0].operator=Exists",
        f"{key}.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
        f"{key}.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.topologyKey=zone",
        f"{key}.podAnnotations.team=platform",
        f"{key}.priorityClassName=system-cluster-critical",
    )
    deployment = of_kind(objects, "Deployment")[name]
    pod = deployment["spec"]["template"]["spec"]
    assert {"name": "TZ", "value": "UTC"} in container(deployment)["env"]
    assert pod["nodeSelector"] == {"disk": "ssd"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert pod["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ] == [{"weight": 1, "podAffinityTerm": {"topologyKey": "zone"}}]
    assert deployment["spec"]["template"]["metadata"]["annotations"]["team"] == "platform"
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert deployment["spec"]["replicas"] == 3
    parsed = options(deployment)
    assert parsed.concurrent == 7
    assert parsed.watch_label_selector == "sharding.fluxcd.io/key notin (shard1)"
    # extraArgs come last, so they win over the chart's own flags.
    assert parsed.log_level == "warning"
    assert parsed.kube_api_qps == 12
    assert container(deployment)["resources"]["limits"]["memory"] == "2Gi"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tmp"]["emptyDir"]["sizeLimit"] == "3Gi"
    # The other controllers keep their defaults.
    for other, deployment in of_kind(objects, "Deployment").items():
        if other != name:
            assert deployment["spec"]["replicas"] == 1
            assert "--concurrent" not in " ".join(container(deployment)["args"])
            assert "nodeSelector" not in deployment["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("values", "image"),
    [
        pytest.param((), "ghcr.io/sluice-gitops/sluice:0.1.0", id="appVersion"),
        pytest.param(("image.tag=0.2.0",), "ghcr.io/sluice-gitops/sluice:0.2.0", id="tag"),
        pytest.param(
            ("image.tag=0.2.0", "image.digest=sha256:" + "a" * 64, "image.repository=r.io/s"),
            "r.io/s@sha256:" + "a" * 64,
            id="digest-wins",
        ),
    ],
)
def test_the_image_values_reach_every_controller(values: tuple[str, ...], image: str) -> None:
    objects = render(*ENABLE_ALL, *values, "imagePullSecrets[0].name=regcred")
    for deployment in of_kind(objects, "Deployment").values():
        assert container(deployment)["image"] == image
        assert deployment["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]


def test_every_pod_is_restricted_and_every_empty_dir_has_a_size_limit() -> None:
    deployments = of_kind(render(), "Deployment")
    volumes = [
        (name, volume)
        for name, deployment in deployments.items()
        for volume in deployment["spec"]["template"]["spec"]["volumes"]
    ]
    assert len(volumes) == 7
    for name, volume in volumes:
        assert volume["emptyDir"].get("sizeLimit"), (name, volume["name"])
    assert {"name": "data", "emptyDir": {"sizeLimit": "10Gi"}} in [
        v for name, v in volumes if name == "source-controller"
    ]
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        security = container(deployment)["securityContext"]
        assert security == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }, name


def test_pods_run_as_the_images_user() -> None:
    """One user everywhere: the Containerfile's USER, the assembled image's, and
    the chart's pods (a mismatch leaves the image's files unwritable to the pod)."""
    (user_line,) = [
        line
        for line in (ROOT / "Containerfile").read_text().splitlines()
        if line.startswith("USER ")
    ]
    assert user_line == f"USER {image.USER}:{image.USER}"
    for name, deployment in of_kind(render(*ENABLE_ALL), "Deployment").items():
        pod = deployment["spec"]["template"]["spec"]["securityContext"]
        ids = (pod["runAsUser"], pod["runAsGroup"], pod["fsGroup"])
        assert ids == (image.USER, image.USER, image.USER), name


def test_network_policies_keep_internal_ports_inside_the_namespace() -> None:
    objects = render()
    policies = of_kind(objects, "NetworkPolicy")
    assert set(policies) == {"allow-egress", "allow-scraping", "allow-webhooks"}
    for policy in policies.values():
        assert policy["metadata"]["namespace"] == "flux-system"
    # Same-namespace pods reach every port; egress is open.
    egress = policies["allow-egress"]["spec"]
    assert egress["podSelector"] == {}
    assert egress["policyTypes"] == ["Ingress", "Egress"]
    assert egress["ingress"] == [{"from": [{"podSelector": {}}]}]
    assert egress["egress"] == [{}]
    # Metrics, from labelled namespaces only.
    scraping = policies["allow-scraping"]["spec"]
    assert scraping["podSelector"] == {}
    assert scraping["ingress"] == [
        {
            "from": [
                {"namespaceSelector": {"matchLabels": {"sluice-gitops.io/scrape-metrics": "true"}}}
            ],
            "ports": [{"port": 8080, "protocol": "TCP"}],
        }
    ]
    # The webhook receiver, from anywhere; and nothing else of the notification-controller.
    webhooks = policies["allow-webhooks"]["spec"]
    assert webhooks["podSelector"] == {"matchLabels": {"app": "notification-controller"}}
    assert webhooks["ingress"] == [{"ports": [{"port": 9292, "protocol": "TCP"}]}]
    notification = of_kind(objects, "Deployment")["notification-controller"]
    ports = {p["name"]: p["containerPort"] for p in container(notification)["ports"]}
    assert ports["http-webhook"] == 9292
    assert (
        ports["http"] == 9090
    )  # the event hub: covered by allow-egress's same-namespace rule only
    assert (
        notification["spec"]["template"]["metadata"]["labels"]["app"] == "notification-controller"
    )
    # Every pod of the install falls under allow-egress's deny-by-default ingress.
    for deployment in of_kind(objects, "Deployment").values():
        assert deployment["metadata"]["namespace"] == "flux-system"
    assert of_kind(render("networkPolicy.create=false"), "NetworkPolicy") == {}


def test_the_service_monitors_are_optional() -> None:
    assert not [o for o in render() if o["apiVersion"].startswith("monitoring.coreos.com")]
    objects = render("serviceMonitor.create=true", "helmController.create=false")
    monitors = of_kind(objects, "ServiceMonitor")
    assert set(monitors) == DEFAULT - {"helm-controller"}
    services = of_kind(objects, "Service")
    for name, monitor in monitors.items():
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["spec"]["endpoints"][0]["port"] == "http-prom"
        # It selects exactly the metrics Service of its controller, whose port it names.
        selected = [
            s for s in services.values()
            if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
        ]  # fmt: skip
        assert [s["metadata"]["name"] for s in selected] == [f"{name}-metrics"]
        assert selected[0]["spec"]["ports"][0]["name"] == "http-prom"
        assert selected[0]["spec"]["selector"] == {"app": name}


def test_the_plain_manifest_is_the_chart_rendered_with_its_defaults() -> None:
    current = (ROOT / manifest.MANIFEST).read_text(encoding="utf-8")
    assert current == manifest.render(ROOT), (
        "deploy/sluice.yaml is stale: run `python -m sluice_envtest.manifest`"
    )
    objects = [doc for doc in yaml.load_all(current, Loader=Loader) if doc]
    assert objects[0]["kind"] == "Namespace"
    assert objects[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert [o for o in objects[1:] if o["kind"] != "CustomResourceDefinition"] == [
        o for o in render() if o["kind"] != "CustomResourceDefinition"
    ]
