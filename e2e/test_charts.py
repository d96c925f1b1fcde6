"""The cluster install (charts/sluice) builds and is accepted by a real API server."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from sluice_runtime.kube.applying import ResourceManager
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.discovery import RestMapper
from sluice_runtime.kube.resources import ResourceType

ROOT = Path(__file__).resolve().parents[1]
DEPLOYMENT = ResourceType("apps", "v1", "deployments", "Deployment")


def build() -> list[dict[str, Any]]:
    built = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / "charts" / "sluice")],
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
