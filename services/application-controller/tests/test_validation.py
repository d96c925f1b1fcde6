"""Refusals against the real control plane: Stalled naming the field, nothing created;
a missing template picked up when it appears; argocd Applications left alone."""

from __future__ import annotations

import asyncio
from typing import Any

from sluice_envtest.harness import condition, make_secret

from .conftest import APPLICATION, HELMCHART, HELMRELEASE, KUSTOMIZATION, Fleet


def application(
    name: str, config: dict[str, Any], *, source: str | None = "GitRepository"
) -> dict[str, Any]:
    spec: dict[str, Any] = {"config": config}
    if source is not None:
        spec["source"] = {"sourceRef": {"kind": source, "name": "repo"}}
    return {
        "apiVersion": "gitops.kubesphere.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": name},
        "spec": {"kind": "fluxcd", "fluxApp": {"spec": spec}},
    }


HOST = {"destination": {"targetNamespace": "web"}}
CHART = {"chart": "./chart"}


async def stalled(f: Fleet, name: str) -> str:
    obj = await f.observe.wait_stalled(APPLICATION, name)
    ready = condition(obj, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert ready["reason"] == "InvalidApplication"
    return str(ready["message"])


async def children(f: Fleet, app: str) -> list[str]:
    found = []
    for rt in (HELMRELEASE, KUSTOMIZATION):
        listed = await f.kube.list(
            rt, namespace=f.namespace, label_selector=f"app.kubernetes.io/managed-by={app}"
        )
        found += [o["metadata"]["name"] for o in listed.items]
    return found


async def test_invalid_applications_stall_naming_the_field_and_create_nothing(
    fleet: Fleet,
) -> None:
    f = fleet
    ns = f.namespace
    cases = {
        "both": (
            application("both", {"helmRelease": {"chart": CHART, "deploy": [HOST]}, "kustomization": [HOST]}),
            "spec.fluxApp.spec.config: exactly one of helmRelease and kustomization must be set, both is",
        ),
        "neither": (
            application("neither", {}),
            "spec.fluxApp.spec.config: exactly one of helmRelease and kustomization must be set, neither is",
        ),
        "oci-chart": (
            application("oci-chart", {"helmRelease": {"chart": CHART, "deploy": [HOST]}}, source="OCIRepository"),
            "spec.fluxApp.spec.source.sourceRef.kind: a OCIRepository cannot serve a Helm chart "
            "(use HelmRepository, GitRepository, Bucket)",
        ),
        # The first destination is fine, the second's Secret is missing: neither is created.
        "no-secret": (
            application(
                "no-secret",
                {"kustomization": [HOST, {"destination": {"kubeConfig": {"secretRef": {"name": "prod"}}, "targetNamespace": "web"}}]},
            ),
            "spec.fluxApp.spec.config.kustomization[1].destination.kubeConfig.secretRef.name: "
            f"Secret {ns}/prod not found",
        ),
        "no-template": (
            application("no-template", {"helmRelease": {"template": "later", "deploy": [HOST]}}, source=None),
            "spec.fluxApp.spec.config.helmRelease.template: HelmChart later not found",
        ),
    }  # fmt: skip
    for body, _ in cases.values():
        await f.kube.create(APPLICATION, body, namespace=ns)
    for name, (_, message) in cases.items():
        assert await stalled(f, name) == message
        assert await children(f, name) == [], f"{name}: nothing half-created"
        assert "gitops.kubesphere.io/ready-number" not in (
            (await f.kube.get(APPLICATION, name, ns))["metadata"].get("labels") or {}
        )

    # The Secret appears: the Application is looked at again and expanded.
    await make_secret(f.kube, ns, "prod", {"value": f.cluster.kubeconfig.read_text()})
    obj = await f.observe.wait_reason(APPLICATION, "no-secret", "ChildrenNotReady")
    assert condition(obj, "Stalled") is None
    assert sorted(await children(f, "no-secret")) == ["no-secret-prod-web", "no-secret-web"]

    # The template appears: the Application that waited for it is expanded, unprompted.
    await f.kube.create(
        HELMCHART,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "HelmChart",
            "metadata": {"name": "later"},
            "spec": {
                "interval": "1h",
                "chart": "./chart",
                "sourceRef": {"kind": "GitRepository", "name": "repo"},
            },
        },
        namespace=ns,
    )
    obj = await f.observe.wait_reason(APPLICATION, "no-template", "ChildrenNotReady")
    assert condition(obj, "Stalled") is None
    assert await children(f, "no-template") == ["no-template-web"]
    assert obj["metadata"]["labels"]["gitops.kubesphere.io/ready-number"] == "0-1"
    message = condition(obj, "Ready")["message"]  # type: ignore[index]
    assert message.startswith(
        "0/1 HelmRelease ready; not ready: HelmRelease/no-template-web (destination 'web'): "
    )


async def test_argocd_applications_are_left_alone(fleet: Fleet) -> None:
    f = fleet
    ns = f.namespace
    body = {
        "apiVersion": "gitops.kubesphere.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "argo"},
        "spec": {
            "kind": "argocd",
            "argoApp": {"spec": {"project": "default", "source": {"repoURL": "https://x"}}},
        },
    }
    await f.kube.create(APPLICATION, body, namespace=ns)
    # A fluxcd Application created after it is reconciled, so the argocd one was seen.
    await f.kube.create(APPLICATION, application("flux", {}), namespace=ns)
    await stalled(f, "flux")
    await asyncio.sleep(0.5)
    argo = await f.kube.get(APPLICATION, "argo", ns)
    assert "finalizers" not in argo["metadata"]
    # Only the schema's default, which the API server writes itself: no conditions of ours.
    assert argo.get("status", {}) == {"observedGeneration": -1}
    assert argo["spec"]["argoApp"]["spec"]["source"] == {"repoURL": "https://x"}
