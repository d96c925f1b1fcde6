"""Kustomization fields Flux added in 2.7 to 2.9: each honoured, or refused with
a Stalled condition naming it (never accepted and silently ignored)."""

from __future__ import annotations

from typing import Any

import pytest

from kustomize_controller.specs import unsupported
from sluice_api.kustomize import Kustomization
from sluice_envtest.harness import condition

from .conftest import CONFIG_MAP, KUSTOMIZATION, Delivery, config_map


def ks(**spec: Any) -> Kustomization:
    return Kustomization.from_obj(
        {
            "metadata": {"name": "app", "namespace": "apps"},
            "spec": {
                "interval": "1h",
                "prune": True,
                "sourceRef": {"kind": "GitRepository", "name": "app"},
                **spec,
            },
        }
    )


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        pytest.param({}, None, id="plain"),
        pytest.param({"kubeConfig": {"secretRef": {"name": "remote"}}}, None, id="kubeconfig"),
        pytest.param({"buildMetadata": ["originAnnotations"]}, None, id="build-metadata"),
        pytest.param(
            {"postBuild": {"substituteStrategy": "Always"}}, None, id="substitute-strategy"
        ),
        pytest.param(
            {"ignore": [{"paths": ["/spec/replicas"], "target": {"kind": "Deployment"}}]},
            "spec.ignore (field ignore rules for server-side apply) is not supported",
            id="ignore",
        ),
        pytest.param(
            {"kubeConfig": {"configMapRef": {"name": "aks"}}},
            "spec.kubeConfig.configMapRef (workload identity for remote clusters) is not supported",
            id="kubeconfig-configmap",
        ),
        pytest.param(
            {"kubeConfig": {}},
            "exactly one of spec.kubeConfig.configMapRef or spec.kubeConfig.secretRef must be "
            "specified",
            id="kubeconfig-empty",
        ),
        pytest.param(
            {"kubeConfig": {"configMapRef": {"name": "aks"}, "secretRef": {"name": "remote"}}},
            "exactly one of spec.kubeConfig.configMapRef or spec.kubeConfig.secretRef must be "
            "specified",
            id="kubeconfig-both",
        ),
    ],
)
def test_unsupported_names_the_field(spec: dict[str, Any], problem: str | None) -> None:
    found = unsupported(ks(**spec))
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem)


async def test_build_metadata_annotates_origins(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    repo = d.repo("app")
    repo.commit("v1", files={"cm.yaml": config_map("cm", ns, k="1")})
    repo.push()
    await d.git_repository("app")
    await d.kustomization("app", source="app", buildMetadata=["originAnnotations"])
    await d.observe.wait_ready(KUSTOMIZATION, "app")
    cm = await d.kube.get(CONFIG_MAP, "cm", ns)
    assert "path: cm.yaml" in cm["metadata"]["annotations"]["config.kubernetes.io/origin"]


async def test_substitute_strategy_always_substitutes_without_variables(
    delivery: Delivery,
) -> None:
    d = delivery
    ns = d.namespace
    repo = d.repo("app")
    repo.commit(
        "v1",
        files={
            "a.yaml": config_map("always", ns, greeting="${greeting:=hello}"),
            "b.yaml": config_map("default", ns, greeting="${greeting:=hello}"),
        },
    )
    repo.push()
    await d.git_repository("app")
    await d.kustomization(
        "always",
        source="app",
        patches=[{"patch": _delete("default", ns)}],
        postBuild={"substituteStrategy": "Always"},
    )
    await d.kustomization("default", source="app", patches=[{"patch": _delete("always", ns)}])
    await d.observe.wait_ready(KUSTOMIZATION, "always")
    await d.observe.wait_ready(KUSTOMIZATION, "default")
    assert (await d.kube.get(CONFIG_MAP, "always", ns))["data"] == {"greeting": "hello"}
    # Without the strategy and without variables, nothing is substituted (Flux's default).
    assert (await d.kube.get(CONFIG_MAP, "default", ns))["data"] == {
        "greeting": "${greeting:=hello}"
    }


def _delete(name: str, namespace: str) -> str:
    return (
        f"$patch: delete\napiVersion: v1\nkind: ConfigMap\n"
        f"metadata:\n  name: {name}\n  namespace: {namespace}\n"
    )


async def test_ignore_rules_are_refused_naming_the_field(delivery: Delivery) -> None:
    d = delivery
    repo = d.repo("app")
    repo.commit("v1", files={"cm.yaml": config_map("cm", d.namespace)})
    repo.push()
    await d.git_repository("app")
    await d.kustomization(
        "app", source="app", ignore=[{"paths": ["/data"], "target": {"kind": "ConfigMap"}}]
    )
    stalled = await d.observe.wait(
        KUSTOMIZATION, "app", lambda o: (condition(o, "Stalled") or {}).get("status") == "True"
    )
    assert condition(stalled, "Stalled")["message"].startswith("spec.ignore ")  # type: ignore[index]
    assert condition(stalled, "Ready")["status"] == "False"  # type: ignore[index]
