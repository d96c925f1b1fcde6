"""driftDetection against the real control plane: a `kubectl edit` of a released
Deployment is put back (enabled) or only reported (warn), never by `helm upgrade`."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

from sluice_envtest.harness import condition
from sluice_runtime.kube.resources import ResourceType

from .conftest import HELMRELEASE, HelmDelivery

DEPLOYMENT = ResourceType("apps", "v1", "deployments", "Deployment")

DEPLOYMENT_TEMPLATE = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
  labels:
    app: {{ .Release.Name }}
spec:
  replicas: 1
  selector:
    matchLabels:
      app: {{ .Release.Name }}
  template:
    metadata:
      labels:
        app: {{ .Release.Name }}
    spec:
      containers:
        - name: web
          image: {{ .Values.image | quote }}
"""

# No kubelet or controller-manager runs in the test control plane: a
# Deployment never becomes available, so helm must not wait for it.
NO_WAIT = {"install": {"disableWait": True}, "upgrade": {"disableWait": True}}


def kubectl_edit(d: HelmDelivery, tmp_path: Path, name: str, old: str, new: str) -> None:
    """`kubectl edit` with an editor script that replaces `old` with `new`."""
    editor = tmp_path / "editor.sh"
    editor.write_text(f'#!/bin/sh\nsed -i "s|{old}|{new}|" "$1"\n')
    editor.chmod(editor.stat().st_mode | stat.S_IXUSR)
    done = subprocess.run(
        ["kubectl", "edit", f"deployment/{name}", "--namespace", d.namespace],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "KUBECONFIG": d.kubeconfig, "KUBE_EDITOR": str(editor)},
    )
    assert done.returncode == 0, done.stderr


def image(deployment: dict[str, Any]) -> str:
    return str(deployment["spec"]["template"]["spec"]["containers"][0]["image"])


async def release_deployment(d: HelmDelivery, drift: dict[str, Any]) -> None:
    d.charts.add(
        "app", "1.0.0", values={"image": "nginx:1.25"}, templates={"d.yaml": DEPLOYMENT_TEMPLATE}
    )
    await d.helm_repository()
    await d.helm_release("web", driftDetection=drift, **NO_WAIT)
    await d.observe.wait_ready(HELMRELEASE, "web", timeout=60)
    # Steady and undrifted: a reconcile finds nothing to report or correct.
    await d.observe.poke(HELMRELEASE, "web", "steady")
    assert not await d.events("web", reason="DriftDetected")
    assert not await d.events("web", reason="DriftCorrected")


async def test_drift_is_corrected_after_kubectl_edit_without_an_upgrade(
    helm_delivery: HelmDelivery, tmp_path: Path
) -> None:
    d = helm_delivery
    ns = d.namespace
    await release_deployment(
        d,
        {
            "mode": "enabled",
            "ignore": [{"paths": ["/spec/replicas"], "target": {"kind": "Deployment"}}],
        },
    )
    kubectl_edit(d, tmp_path, "web", "nginx:1.25", "nginx:edited")
    # Another manager (an autoscaler, say) owns replicas: the ignore rule leaves it.
    await d.kube.request(
        "PATCH",
        DEPLOYMENT.path(namespace=ns, name="web"),
        query=[("fieldManager", "autoscaler")],
        body={"spec": {"replicas": 3}},
        content_type="application/merge-patch+json",
    )
    assert image(await d.kube.get(DEPLOYMENT, "web", ns)) == "nginx:edited"

    obj = await d.observe.poke(HELMRELEASE, "web", "after-edit", timeout=30)
    event = await d.wait_event("web", reason="DriftCorrected")
    assert event["type"] == "Normal"
    assert event["message"] == (
        f"Cluster state of release {ns}/web.v1 has been corrected:\nDeployment/{ns}/web configured"
    )
    live = await d.kube.get(DEPLOYMENT, "web", ns)
    assert image(live) == "nginx:1.25"
    assert live["spec"]["replicas"] == 3
    ready = condition(obj, "Ready")
    assert ready is not None and ready["status"] == "True", obj["status"]
    # Corrected in place: helm's history has no new revision.
    assert [r["revision"] for r in d.helm("history", "web")] == [1]
    assert [h["version"] for h in obj["status"]["history"]] == [1]

    # Corrected means steady again: the next reconcile finds nothing.
    await d.observe.poke(HELMRELEASE, "web", "steady-again")
    assert len(await d.events("web", reason="DriftCorrected")) == 1
    assert not await d.events("web", reason="DriftDetected")


async def test_drift_in_warn_mode_is_reported_and_left(
    helm_delivery: HelmDelivery, tmp_path: Path
) -> None:
    d = helm_delivery
    ns = d.namespace
    await release_deployment(d, {"mode": "warn"})
    kubectl_edit(d, tmp_path, "web", "nginx:1.25", "nginx:edited")

    obj = await d.observe.poke(HELMRELEASE, "web", "after-edit", timeout=30)
    event = await d.wait_event("web", reason="DriftDetected")
    assert event["type"] == "Warning"
    assert event["message"] == (
        f"Cluster state of release {ns}/web.v1 has drifted from the desired state:\n"
        f"Deployment/{ns}/web changed"
    )
    assert image(await d.kube.get(DEPLOYMENT, "web", ns)) == "nginx:edited"
    assert not await d.events("web", reason="DriftCorrected")
    assert condition(obj, "Ready")["status"] == "True"  # type: ignore[index]
    assert [r["revision"] for r in d.helm("history", "web")] == [1]


async def test_a_deleted_object_is_recreated_and_an_unusable_ignore_rule_stalls(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    ns = d.namespace
    await release_deployment(d, {"mode": "enabled"})
    await d.kube.delete(DEPLOYMENT, "web", namespace=ns)
    await d.observe.poke(HELMRELEASE, "web", "after-delete", timeout=30)
    event = await d.wait_event("web", reason="DriftCorrected")
    assert event["message"].endswith(f"Deployment/{ns}/web created")
    assert image(await d.kube.get(DEPLOYMENT, "web", ns)) == "nginx:1.25"

    await d.kube.merge_patch(
        HELMRELEASE,
        "web",
        {"spec": {"driftDetection": {"ignore": [{"paths": ["spec/replicas"]}]}}},
        namespace=ns,
    )
    obj = await d.observe.wait_stalled(HELMRELEASE, "web", timeout=30)
    ready = condition(obj, "Ready")
    assert ready is not None and ready["reason"] == "InitFailed"
    assert "spec.driftDetection.ignore" in ready["message"]
    assert "'spec/replicas'" in ready["message"]
