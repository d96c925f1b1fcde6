"""Flux 2.9's HelmRelease API against the real control plane and the real helm.

Manifests shaped as Flux's docs write them, in each version Flux served (v2,
v2beta2, v2beta1), are applied server-side (which fails on any field the
schema does not declare) and go Ready; each Flux 2.6-2.9 field the
controller honours changes what helm does, and each one it cannot honour
stalls naming it.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from sluice_envtest.chartrepo import CONFIGMAP_TEMPLATE
from sluice_envtest.harness import condition
from sluice_runtime.kube.resources import ResourceType

from .conftest import CONFIG_MAP, HELMREPO, HelmDelivery

NO_WAIT = {"disableWait": True}


def helmrelease(version: str) -> ResourceType:
    return ResourceType("helm.toolkit.fluxcd.io", version, "helmreleases", "HelmRelease")


V2 = helmrelease("v2")


def flux_docs_release(version: str) -> dict[str, Any]:
    """A HelmRelease as Flux's docs write one, in `version` (v2beta1 with its old-only
    fields: a post-renderer's patchesStrategicMerge and patchesJson6902)."""
    spec: dict[str, Any] = {
        "interval": "5m",
        "timeout": "2m",
        "chart": {
            "spec": {
                "chart": "app",
                "version": "1.x",
                "sourceRef": {"kind": "HelmRepository", "name": "charts"},
                "interval": "1m",
            }
        },
        "install": {"remediation": {"retries": 3}, **NO_WAIT},
        "upgrade": {"remediation": {"retries": 3, "remediateLastFailure": True}, **NO_WAIT},
        "test": {"enable": False},
        "values": {"greeting": f"hello from {version}"},
    }
    if version == "v2":
        spec |= {
            "driftDetection": {"mode": "warn"},
            "waitStrategy": {"name": "legacy"},
            "postRenderStrategy": "nohooks",
            "commonMetadata": {"labels": {"team": "web"}},
        }
        spec["install"] |= {
            "strategy": {"name": "RemediateOnFailure"},
            "serverSideApply": False,
            "disableTakeOwnership": False,
        }
        spec["upgrade"] |= {
            "strategy": {"name": "RetryOnFailure", "retryInterval": "1m"},
            "serverSideApply": "auto",
            "chartNameChangeStrategy": "InPlaceUpdate",
        }
        spec["rollback"] = {"serverSideApply": "disabled", "cleanupOnFail": True}
    if version == "v2beta1":
        spec["postRenderers"] = [
            {
                "kustomize": {
                    "patchesStrategicMerge": [
                        {
                            "apiVersion": "v1",
                            "kind": "ConfigMap",
                            "metadata": {"name": "web-config", "labels": {"patched": "psm"}},
                        }
                    ],
                    "patchesJson6902": [
                        {
                            "target": {"version": "v1", "kind": "ConfigMap", "name": "web-config"},
                            "patch": [{"op": "add", "path": "/data/extra", "value": "json6902"}],
                        }
                    ],
                }
            }
        ]
    return {
        "apiVersion": f"helm.toolkit.fluxcd.io/{version}",
        "kind": "HelmRelease",
        "metadata": {"name": "web"},
        "spec": spec,
    }


@pytest.mark.parametrize("version", ["v2", "v2beta2", "v2beta1"])
async def test_flux_manifests_of_every_version_apply_server_side_and_go_ready(
    helm_delivery: HelmDelivery, version: str
) -> None:
    d = helm_delivery
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    body = flux_docs_release(version)
    body["metadata"]["namespace"] = d.namespace
    applied = await d.kube.apply(helmrelease(version), body, field_manager="flux-user")
    assert applied["spec"]["install"] == body["spec"]["install"]
    await d.observe.wait_ready(V2, "web", timeout=60)
    cm = await d.kube.get(CONFIG_MAP, "web-config", d.namespace)
    assert cm["data"]["greeting"] == f"hello from {version}"
    if version == "v2":
        assert cm["metadata"]["labels"]["team"] == "web"
    if version == "v2beta1":
        # The old-only post-renderer fields are applied, as Flux's v2beta1 did.
        assert cm["metadata"]["labels"]["patched"] == "psm"
        assert cm["data"]["extra"] == "json6902"


async def test_objects_the_chart_renders_are_taken_over_unless_disable_take_ownership(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    for name in ("adopt", "keep"):
        await d.kube.create(
            CONFIG_MAP,
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-config"}},
            namespace=d.namespace,
        )
    # Flux takes ownership of an existing object the chart renders: helm would refuse it.
    await d.helm_release("adopt", install=NO_WAIT)
    await d.observe.wait_ready(V2, "adopt", timeout=60)
    adopted = await d.kube.get(CONFIG_MAP, "adopt-config", d.namespace)
    assert adopted["metadata"]["annotations"]["meta.helm.sh/release-name"] == "adopt"
    assert adopted["data"]["greeting"] == "hello"

    await d.helm_release("keep", install={"disableTakeOwnership": True, **NO_WAIT})
    obj = await d.observe.wait(
        V2,
        "keep",
        lambda o: (condition(o, "Released") or {}).get("reason") == "InstallFailed",
        timeout=60,
    )
    released = condition(obj, "Released")
    assert released is not None and "keep-config" in released["message"]
    kept = await d.kube.get(CONFIG_MAP, "keep-config", d.namespace)
    assert "data" not in kept


LITERAL_TEMPLATE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
data:
  replicas: {{ kindOf .Values.replicas | quote }}
  enabled: {{ kindOf .Values.enabled | quote }}
"""


async def test_values_from_target_path_is_typed_as_helm_set_unless_literal(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    d.charts.add("app", "1.0.0", templates={"cm.yaml": LITERAL_TEMPLATE})
    await d.helm_repository()
    await d.kube.create(
        CONFIG_MAP,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "settings"},
            "data": {"replicas": "3", "enabled": "true"},
        },
        namespace=d.namespace,
    )

    def refs(literal: bool) -> list[dict[str, Any]]:
        return [
            {"kind": "ConfigMap", "name": "settings", "valuesKey": k, "targetPath": k}
            | ({"literal": True} if literal else {})
            for k in ("replicas", "enabled")
        ]

    await d.helm_release("typed", valuesFrom=refs(False), install=NO_WAIT)
    await d.helm_release("literal", valuesFrom=refs(True), install=NO_WAIT)
    await d.observe.wait_ready(V2, "typed", timeout=60)
    await d.observe.wait_ready(V2, "literal", timeout=60)
    typed = await d.kube.get(CONFIG_MAP, "typed-config", d.namespace)
    literal = await d.kube.get(CONFIG_MAP, "literal-config", d.namespace)
    # helm reads values from JSON, where every number is a float64.
    assert typed["data"] == {"replicas": "float64", "enabled": "bool"}
    assert literal["data"] == {"replicas": "string", "enabled": "string"}


BROKEN_TEMPLATE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
data:
  needed: {{ required "values.needed is required" .Values.needed | quote }}
"""


async def test_retry_on_failure_retries_without_remediating_or_stalling(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    d.charts.add("app", "1.0.0", templates={"cm.yaml": BROKEN_TEMPLATE})
    await d.helm_repository()
    await d.helm_release(
        "web",
        install={"strategy": {"name": "RetryOnFailure", "retryInterval": "1s"}, **NO_WAIT},
        upgrade={"strategy": {"name": "RetryOnFailure", "retryInterval": "1s"}, **NO_WAIT},
    )
    # Retried, not exhausted: with the default strategy and no retries, the first
    # failure would stall the release (RetriesExceeded).
    obj = await d.observe.wait(
        V2, "web", lambda o: (o.get("status", {}).get("failures") or 0) >= 3, timeout=60
    )
    stalled = condition(obj, "Stalled")
    assert stalled is None or stalled["status"] != "True"
    ready = condition(obj, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert "values.needed is required" in ready["message"]
    assert not await d.events("web", reason="UninstallSucceeded")


HEALTH_EXPR = {"apiVersion": "example.com/v1", "kind": "Widget", "current": "true"}


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        pytest.param(
            {"install": {"serverSideApply": True}}, "spec.install.serverSideApply", id="ssa"
        ),
        pytest.param({"waitStrategy": {"name": "poller"}}, "spec.waitStrategy.name", id="poller"),
        pytest.param({"healthCheckExprs": [HEALTH_EXPR]}, "spec.healthCheckExprs", id="cel"),
    ],
)
async def test_what_cannot_be_honoured_stalls_naming_the_field(
    helm_delivery: HelmDelivery, spec: dict[str, Any], named: str
) -> None:
    d = helm_delivery
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    await d.helm_release("web", **spec)
    obj = await d.observe.wait_reason(V2, "web", "UnsupportedField", timeout=30)
    stalled = condition(obj, "Stalled")
    assert stalled is not None and stalled["status"] == "True"
    assert named in stalled["message"]
    listed = await d.kube.list(CONFIG_MAP, namespace=d.namespace)
    assert "web-config" not in {c["metadata"]["name"] for c in listed.items}


CLUSTER_ROLE_TEMPLATE = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ .Release.Namespace }}-reader
rules: []
"""


async def test_status_has_the_inventory_and_each_history_action(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    ns = d.namespace
    templates = {"cm.yaml": CONFIGMAP_TEMPLATE, "cr.yaml": CLUSTER_ROLE_TEMPLATE}
    d.charts.add("app", "1.0.0", templates=templates)
    await d.helm_repository()
    await d.helm_release("web", install=NO_WAIT, upgrade=NO_WAIT)
    obj = await d.observe.wait_ready(V2, "web", timeout=60)
    assert obj["status"]["inventory"] == {
        "entries": [
            {"id": f"_{ns}-reader_rbac.authorization.k8s.io_ClusterRole", "v": "v1"},
            {"id": f"{ns}_web-config__ConfigMap", "v": "v1"},
        ]
    }
    assert [h["action"] for h in obj["status"]["history"]] == ["install"]
    # A Go duration, as Flux writes it ("1.234s", "850ms").
    duration = obj["status"]["lastAttemptedReleaseActionDuration"]
    assert re.fullmatch(r"([0-9]+m)?[0-9.]+(ms|s)", duration), duration

    d.charts.add("app", "1.1.0", templates={"cm.yaml": CONFIGMAP_TEMPLATE})
    await d.observe.poke(HELMREPO, "charts", "new-index")
    obj = await d.observe.wait(
        V2,
        "web",
        lambda o: (
            [h.get("action") for h in o.get("status", {}).get("history") or []]
            == ["upgrade", "install"]
            and len(o["status"].get("inventory", {}).get("entries", [])) == 1
        ),
        timeout=90,
    )
    assert obj["status"]["inventory"]["entries"] == [
        {"id": f"{ns}_web-config__ConfigMap", "v": "v1"}
    ]


OTHER_TEMPLATE = CONFIGMAP_TEMPLATE.replace("-config", "-other")


@pytest.mark.parametrize(
    ("strategy", "history"),
    [
        # Flux's default: the release of the old chart goes, the new one starts at v1.
        pytest.param(None, [("other", "install")], id="reinstall-by-default"),
        pytest.param("Reinstall", [("other", "install")], id="reinstall"),
        # The history goes on (a spec change may upgrade once more before the new
        # chart's artifact arrives).
        pytest.param("InPlaceUpdate", [("other", "upgrade"), ("app", "install")], id="in-place"),
    ],
)
async def test_a_new_chart_name_reinstalls_unless_in_place_update(
    helm_delivery: HelmDelivery, strategy: str | None, history: list[tuple[str, str]]
) -> None:
    d = helm_delivery
    d.charts.add("app", "1.0.0")
    d.charts.add("other", "1.0.0", templates={"cm.yaml": OTHER_TEMPLATE})
    await d.helm_repository()
    upgrade = {**NO_WAIT, **({"chartNameChangeStrategy": strategy} if strategy else {})}
    await d.helm_release("web", install=NO_WAIT, upgrade=upgrade)
    await d.observe.wait_ready(V2, "web", timeout=60)
    created = await d.kube.get(V2, "web", d.namespace)
    created["spec"]["chart"]["spec"]["chart"] = "other"
    await d.kube.replace(V2, created)
    obj = await d.observe.wait(
        V2,
        "web",
        lambda o: (
            (o.get("status", {}).get("history") or [{}])[0].get("chartName") == "other"
            and (condition(o, "Ready") or {}).get("status") == "True"
        ),
        timeout=90,
    )
    got = [(h["chartName"], h["action"]) for h in obj["status"]["history"]]
    if strategy == "InPlaceUpdate":
        assert [got[0], got[-1]] == history
    else:
        assert got == history
    listed = await d.kube.list(CONFIG_MAP, namespace=d.namespace)
    assert {c["metadata"]["name"] for c in listed.items} >= {"web-other"}
    assert "web-config" not in {c["metadata"]["name"] for c in listed.items}
