"""Kustomization fields Flux added in 2.7 to 2.9: each honoured, or refused with
a Stalled condition naming it (never accepted and silently ignored)."""

from __future__ import annotations

from typing import Any

import pytest

from kustomize_controller.specs import ignore_rules, ignore_rules_by_field, unsupported
from sluice_api.kustomize import KUBECONFIG_ONE_OF, Kustomization
from sluice_envtest.harness import condition
from sluice_runtime.kube.ignoring import IgnoreRule, Target

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
            None,
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


DRIFT = {"paths": ["/data/a"]}
IGNORE = {"paths": ["/data/b"], "target": {"kind": "ConfigMap", "name": "tun.*"}}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({}, [], id="none"),
        pytest.param({"driftIgnoreRules": [DRIFT]}, [IgnoreRule(paths=("/data/a",))], id="drift"),
        pytest.param(
            {"ignore": [IGNORE]},
            [IgnoreRule(paths=("/data/b",), target=Target(kind="ConfigMap", name="tun.*"))],
            id="ignore",
        ),
        pytest.param(
            {"driftIgnoreRules": [DRIFT], "ignore": [IGNORE]},
            [
                IgnoreRule(paths=("/data/a",)),
                IgnoreRule(paths=("/data/b",), target=Target(kind="ConfigMap", name="tun.*")),
            ],
            id="both",
        ),
    ],
)
def test_both_ignore_fields_reach_the_apply(
    spec: dict[str, Any], expected: list[IgnoreRule]
) -> None:
    """Flux 2.9's `ignore` is the same rule as `driftIgnoreRules`: both are applied."""
    assert ignore_rules(ks(**spec)) == expected


def test_ignore_rules_are_kept_by_field() -> None:
    """So a rule that cannot be used is named by the field that holds it."""
    by_field = ignore_rules_by_field(ks(ignore=[IGNORE]))
    assert by_field["driftIgnoreRules"] == []
    assert [rule.paths for rule in by_field["ignore"]] == [("/data/b",)]


@pytest.mark.parametrize(
    ("kube_config", "message"),
    [
        pytest.param({"configMapRef": {"name": "aks"}},
                     "spec.kubeConfig.configMapRef (workload identity for remote clusters) is not "
                     "supported", id="config-map-ref-refused"),
        # Flux's CEL rule, which a 1.20 API server cannot evaluate: the controller does.
        pytest.param({}, KUBECONFIG_ONE_OF, id="cel-rule-none"),
        pytest.param({"configMapRef": {"name": "aks"}, "secretRef": {"name": "remote"}},
                     KUBECONFIG_ONE_OF, id="cel-rule-both"),
    ],
)  # fmt: skip
async def test_a_kubeconfig_it_cannot_use_stalls_naming_why(
    delivery: Delivery, kube_config: dict[str, Any], message: str
) -> None:
    d = delivery
    repo = d.repo("app")
    repo.commit("v1", files={"cm.yaml": config_map("remote", d.namespace)})
    repo.push()
    await d.git_repository("app")
    await d.kustomization("app", source="app", kubeConfig=kube_config)
    stalled = await d.observe.wait(
        KUSTOMIZATION, "app", lambda o: (condition(o, "Stalled") or {}).get("status") == "True"
    )
    assert condition(stalled, "Stalled")["message"].startswith(message)  # type: ignore[index]
    assert condition(stalled, "Ready")["status"] == "False"  # type: ignore[index]
    assert "inventory" not in stalled["status"]
