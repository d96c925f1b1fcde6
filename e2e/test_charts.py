"""The cluster install (charts/sluice) builds and is accepted by a real API server."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from gating_controller import __main__ as gating_main
from helm_controller import __main__ as helm_main
from kustomize_controller import __main__ as kustomize_main
from notification_controller import __main__ as notification_main
from sluice_runtime import app
from sluice_runtime.kube.applying import ResourceManager
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.discovery import RestMapper
from sluice_runtime.kube.resources import ResourceType
from source_controller import __main__ as source_main

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "sluice"
DEPLOYMENT = ResourceType("apps", "v1", "deployments", "Deployment")
NETWORK_POLICY = ResourceType("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
CONTROLLERS = {
    "source-controller": source_main,
    "kustomize-controller": kustomize_main,
    "helm-controller": helm_main,
    "gating-controller": gating_main,
    "notification-controller": notification_main,
}


def build(directory: Path = CHART) -> list[dict[str, Any]]:
    built = subprocess.run(
        ["kubectl", "kustomize", str(directory)],
        capture_output=True,
        text=True,
        check=True,
    )
    return [doc for doc in yaml.safe_load_all(built.stdout) if doc]


def test_the_install_has_one_deployment_per_controller_and_the_generated_crds() -> None:
    objects = build()
    deployments = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}
    assert set(deployments) == {
        "source-controller",
        "kustomize-controller",
        "helm-controller",
        "gating-controller",
        "notification-controller",
    }
    crds = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition")
    generated = sorted(
        yaml.safe_load(p.read_text().split("---\n", 1)[1])["metadata"]["name"]
        for p in (ROOT / "crds").glob("*_*.yaml")
    )
    assert crds == generated
    for name, deployment in deployments.items():
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] == [name]
        assert container["image"] == "ghcr.io/sluice-gitops/sluice:0.1.0"
        assert "--enable-leader-election" in container["args"]
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert deployment["metadata"]["namespace"] == "flux-system"


def of_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def options(deployment: dict[str, Any]) -> Any:
    """The Deployment's args as its controller's own flag parser reads them."""
    name = deployment["metadata"]["name"]
    module: Any = CONTROLLERS[name]
    parser = app.parser(service=name, description=name, concurrency=1)
    add_arguments = getattr(module, "add_arguments", None)
    if add_arguments is not None:
        add_arguments(parser)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return parser.parse_args(container["args"])


def test_the_install_locks_tenants_down() -> None:
    deployments = of_kind(build(), "Deployment")
    kustomize = options(deployments["kustomize-controller"])
    assert kustomize.no_cross_namespace_refs is True
    assert kustomize.default_service_account == "default"
    helm = options(deployments["helm-controller"])
    assert helm.no_cross_namespace_refs is True
    assert helm.default_service_account == "default"
    assert options(deployments["notification-controller"]).no_cross_namespace_refs is True
    # The others take neither flag (their objects refer to nothing across namespaces).
    for name in ("source-controller", "gating-controller"):
        assert not hasattr(options(deployments[name]), "no_cross_namespace_refs"), name


def test_the_documented_overlay_turns_the_lockdown_off(tmp_path: Path) -> None:
    # The overlay the chart's kustomization.yaml shows, verbatim.
    comment = (CHART / "kustomization.yaml").read_text().split("for example:\n#\n", 1)[1]
    lines = []
    for line in comment.splitlines():
        if not line.startswith("#   "):
            break
        lines.append(line.removeprefix("#   "))
    # kustomize takes bases by relative path (or URL) only.
    overlay = "\n".join(lines).replace(
        "<path or URL of charts/sluice>", os.path.relpath(CHART, tmp_path)
    )
    (tmp_path / "kustomization.yaml").write_text(overlay + "\n")
    deployments = of_kind(build(tmp_path), "Deployment")
    kustomize = options(deployments["kustomize-controller"])
    assert kustomize.no_cross_namespace_refs is False
    assert not kustomize.default_service_account
    helm = options(deployments["helm-controller"])
    assert helm.no_cross_namespace_refs is False
    assert not helm.default_service_account
    assert options(deployments["notification-controller"]).no_cross_namespace_refs is False


def test_every_empty_dir_has_a_size_limit() -> None:
    volumes = [
        (name, volume)
        for name, deployment in of_kind(build(), "Deployment").items()
        for volume in deployment["spec"]["template"]["spec"]["volumes"]
        if "emptyDir" in volume
    ]
    assert len(volumes) == 6
    for name, volume in volumes:
        assert volume["emptyDir"].get("sizeLimit"), (name, volume["name"])
    assert {"name": "data", "emptyDir": {"sizeLimit": "10Gi"}} in [
        v for name, v in volumes if name == "source-controller"
    ]


def test_network_policies_keep_internal_ports_inside_the_namespace() -> None:
    objects = build()
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
    ports = {
        p["name"]: p["containerPort"]
        for p in notification["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
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


async def test_the_install_applies_to_a_real_api_server(kube: KubeClient) -> None:
    manager = ResourceManager(
        kube,
        RestMapper(kube),
        field_manager="sluice-install-test",
        owner_labels={"app.kubernetes.io/managed-by": "sluice-install-test"},
    )
    objects = build()
    changes = await manager.apply_all_staged(objects)
    assert len(changes.entries) == len(objects)
    notification = await kube.get(DEPLOYMENT, "notification-controller", "flux-system")
    args = notification["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--receiver-addr=:9292" in args
    assert "--no-cross-namespace-refs=true" in args
    for name in ("allow-egress", "allow-scraping", "allow-webhooks"):
        applied = await kube.get(NETWORK_POLICY, name, "flux-system")
        assert applied["spec"]["podSelector"] is not None, name
    webhooks = await kube.get(NETWORK_POLICY, "allow-webhooks", "flux-system")
    assert webhooks["spec"]["ingress"] == [{"ports": [{"port": 9292, "protocol": "TCP"}]}]
