"""The HelmRelease API of Flux 2.9, written down field by field, against the CRD.

FLUX_SPEC and FLUX_STATUS list every field path of helm.toolkit.fluxcd.io/v2
HelmRelease as Flux 2.9's CRD and API reference spell them (`[]` is a list
item, `{}` a map value). Every served version must have each one, and the
CRD may have nothing else but Sluice's own additions and the fields only
v2beta2 and v2beta1 had. A field Flux adds, or one Sluice spells differently
(`disableOpenApiValidation` for `disableOpenAPIValidation`), fails here, not
in a user's repository.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sluice_api.crds import crd_for
from sluice_api.helm import HelmRelease

SELECTOR = ("annotationSelector", "group", "kind", "labelSelector", "name", "namespace", "version")


def _under(prefix: str, *names: str) -> list[str]:
    return [f"{prefix}.{name}" for name in names]


FLUX_SPEC = [
    "spec.chart",
    "spec.chart.metadata",
    *_under("spec.chart.metadata", "annotations", "labels"),
    "spec.chart.spec",
    *_under(
        "spec.chart.spec",
        "chart",
        "ignoreMissingValuesFiles",
        "interval",
        "reconcileStrategy",
        "sourceRef",
        "valuesFiles",
        "verify",
        "version",
    ),
    *_under("spec.chart.spec.sourceRef", "apiVersion", "kind", "name", "namespace"),
    *_under("spec.chart.spec.verify", "provider", "secretRef"),
    "spec.chart.spec.verify.secretRef.name",
    "spec.chartRef",
    *_under("spec.chartRef", "apiVersion", "kind", "name", "namespace"),
    "spec.commonMetadata",
    *_under("spec.commonMetadata", "annotations", "labels"),
    "spec.dependsOn",
    *_under("spec.dependsOn[]", "name", "namespace", "readyExpr"),
    "spec.driftDetection",
    *_under("spec.driftDetection", "ignore", "mode"),
    *_under("spec.driftDetection.ignore[]", "paths", "target"),
    *_under("spec.driftDetection.ignore[].target", *SELECTOR),
    "spec.healthCheckExprs",
    *_under("spec.healthCheckExprs[]", "apiVersion", "current", "failed", "inProgress", "kind"),
    "spec.install",
    *_under(
        "spec.install",
        "crds",
        "createNamespace",
        "disableHooks",
        "disableOpenAPIValidation",
        "disableSchemaValidation",
        "disableTakeOwnership",
        "disableWait",
        "disableWaitForJobs",
        "remediation",
        "replace",
        "serverSideApply",
        "skipCRDs",
        "strategy",
        "timeout",
    ),
    *_under("spec.install.remediation", "ignoreTestFailures", "remediateLastFailure", "retries"),
    *_under("spec.install.strategy", "name", "retryInterval"),
    "spec.interval",
    "spec.kubeConfig",
    *_under("spec.kubeConfig", "configMapRef", "secretRef"),
    "spec.kubeConfig.configMapRef.name",
    *_under("spec.kubeConfig.secretRef", "key", "name"),
    "spec.maxHistory",
    "spec.persistentClient",
    "spec.postRenderStrategy",
    "spec.postRenderers",
    "spec.postRenderers[].kustomize",
    *_under("spec.postRenderers[].kustomize", "images", "patches"),
    *_under("spec.postRenderers[].kustomize.images[]", "digest", "name", "newName", "newTag"),
    *_under("spec.postRenderers[].kustomize.patches[]", "patch", "target"),
    *_under("spec.postRenderers[].kustomize.patches[].target", *SELECTOR),
    "spec.releaseName",
    "spec.rollback",
    *_under(
        "spec.rollback",
        "cleanupOnFail",
        "disableHooks",
        "disableWait",
        "disableWaitForJobs",
        "force",
        "recreate",
        "serverSideApply",
        "timeout",
    ),
    "spec.serviceAccountName",
    "spec.storageNamespace",
    "spec.suspend",
    "spec.targetNamespace",
    "spec.test",
    *_under("spec.test", "enable", "filters", "ignoreFailures", "timeout"),
    *_under("spec.test.filters[]", "exclude", "name"),
    "spec.timeout",
    "spec.uninstall",
    *_under(
        "spec.uninstall",
        "deletionPropagation",
        "disableHooks",
        "disableWait",
        "keepHistory",
        "timeout",
    ),
    "spec.upgrade",
    *_under(
        "spec.upgrade",
        "chartNameChangeStrategy",
        "cleanupOnFail",
        "crds",
        "disableHooks",
        "disableOpenAPIValidation",
        "disableSchemaValidation",
        "disableTakeOwnership",
        "disableWait",
        "disableWaitForJobs",
        "force",
        "preserveValues",
        "remediation",
        "serverSideApply",
        "strategy",
        "timeout",
    ),
    *_under(
        "spec.upgrade.remediation",
        "ignoreTestFailures",
        "remediateLastFailure",
        "retries",
        "strategy",
    ),
    *_under("spec.upgrade.strategy", "name", "retryInterval"),
    "spec.values",
    "spec.valuesFrom",
    *_under("spec.valuesFrom[]", "kind", "literal", "name", "optional", "targetPath", "valuesKey"),
    "spec.waitStrategy",
    "spec.waitStrategy.name",
]

FLUX_STATUS = [
    "status.conditions",
    *_under(
        "status.conditions[]",
        "lastTransitionTime",
        "message",
        "observedGeneration",
        "reason",
        "status",
        "type",
    ),
    "status.failures",
    "status.helmChart",
    "status.history",
    *_under(
        "status.history[]",
        "action",
        "apiVersion",
        "appVersion",
        "chartName",
        "chartVersion",
        "configDigest",
        "deleted",
        "digest",
        "firstDeployed",
        "lastDeployed",
        "name",
        "namespace",
        "ociDigest",
        "status",
        "testHooks",
        "version",
    ),
    *_under("status.history[].testHooks{}", "lastCompleted", "lastStarted", "phase"),
    "status.installFailures",
    "status.inventory",
    "status.inventory.entries",
    *_under("status.inventory.entries[]", "id", "v"),
    *_under(
        "status",
        "lastAttemptedConfigDigest",
        "lastAttemptedGeneration",
        "lastAttemptedReleaseAction",
        "lastAttemptedReleaseActionDuration",
        "lastAttemptedRevision",
        "lastAttemptedRevisionDigest",
        "lastAttemptedValuesChecksum",
        "lastHandledForceAt",
        "lastHandledReconcileAt",
        "lastHandledResetAt",
        "lastReleaseRevision",
        "observedCommonMetadataDigest",
        "observedGeneration",
        "observedPostRenderersDigest",
        "storageNamespace",
        "upgradeFailures",
    ),
]

OLD_ONLY = (
    # v2beta1 and v2beta2 (Flux until 2.6).
    "spec.chart.spec.valuesFile",
    "spec.postRenderers[].kustomize.patchesStrategicMerge",
    "spec.postRenderers[].kustomize.patchesJson6902",
    # v2beta1.
    "status.lastAppliedRevision",
)
"""Fields only an older served version had, with everything under them."""

SLUICE = ("spec.gates",)
"""Sluice's own additions, with everything under them."""

FLUX_ENUMS = {
    "spec.chart.spec.reconcileStrategy": ["ChartVersion", "Revision"],
    "spec.chart.spec.sourceRef.kind": ["HelmRepository", "GitRepository", "Bucket"],
    "spec.chart.spec.verify.provider": ["cosign", "notation"],
    "spec.chartRef.kind": ["OCIRepository", "HelmChart", "ExternalArtifact"],
    "spec.driftDetection.mode": ["enabled", "warn", "disabled"],
    "spec.install.crds": ["Skip", "Create", "CreateReplace"],
    "spec.install.strategy.name": ["RemediateOnFailure", "RetryOnFailure"],
    "spec.postRenderStrategy": ["nohooks", "combined", "separate"],
    "spec.rollback.serverSideApply": ["enabled", "disabled", "auto"],
    "spec.uninstall.deletionPropagation": ["background", "foreground", "orphan"],
    "spec.upgrade.chartNameChangeStrategy": ["InPlaceUpdate", "Reinstall"],
    "spec.upgrade.crds": ["Skip", "Create", "CreateReplace"],
    "spec.upgrade.remediation.strategy": ["rollback", "uninstall"],
    "spec.upgrade.serverSideApply": ["enabled", "disabled", "auto"],
    "spec.upgrade.strategy.name": ["RemediateOnFailure", "RetryOnFailure"],
    "spec.valuesFrom[].kind": ["Secret", "ConfigMap"],
    "spec.waitStrategy.name": ["poller", "legacy"],
    "status.lastAttemptedReleaseAction": ["install", "upgrade"],
}

FLUX_TYPES = {
    "spec.install.serverSideApply": "boolean",
    "spec.valuesFrom[].literal": "boolean",
    "spec.install.disableTakeOwnership": "boolean",
    "spec.upgrade.disableTakeOwnership": "boolean",
    "spec.install.strategy.retryInterval": "string",
    "spec.maxHistory": "integer",
    "status.lastAttemptedReleaseActionDuration": "string",
}


def paths(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every field path under `node`, with its schema."""
    for name, child in node.get("properties", {}).items():
        here = f"{path}.{name}" if path else name
        yield here, child
        yield from paths(child, here)
    if isinstance(node.get("items"), dict):
        yield from paths(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from paths(node["additionalProperties"], f"{path}{{}}")


def served_schemas() -> dict[str, dict[str, dict[str, Any]]]:
    crd = crd_for(HelmRelease)
    return {
        v["name"]: dict(paths(v["schema"]["openAPIV3Schema"], "")) for v in crd["spec"]["versions"]
    }


SCHEMAS = served_schemas()
VERSIONS = [pytest.param(name, id=name) for name in SCHEMAS]


def test_every_version_flux_served_is_served() -> None:
    assert set(SCHEMAS) == {"v2", "v2beta2", "v2beta1"}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_crd_has_every_flux_field(version: str) -> None:
    missing = [p for p in (*FLUX_SPEC, *FLUX_STATUS, *OLD_ONLY) if p not in SCHEMAS[version]]
    assert missing == []


@pytest.mark.parametrize("version", VERSIONS)
def test_the_crd_has_no_field_flux_does_not_spell_so(version: str) -> None:
    known = {*FLUX_SPEC, *FLUX_STATUS, "metadata", "spec", "status", "apiVersion", "kind"}
    extra = [
        p
        for p in SCHEMAS[version]
        if p not in known
        and not any(p == root or p.startswith((f"{root}.", f"{root}[")) for root in OLD_ONLY)
        and not any(p == root or p.startswith((f"{root}.", f"{root}[")) for root in SLUICE)
    ]
    assert extra == []


@pytest.mark.parametrize(("path", "values"), list(FLUX_ENUMS.items()))
def test_enums_are_flux_values(path: str, values: list[str]) -> None:
    assert sorted(SCHEMAS["v2"][path]["enum"]) == sorted(values)


@pytest.mark.parametrize(("path", "kind"), list(FLUX_TYPES.items()))
def test_types_are_flux_types(path: str, kind: str) -> None:
    assert SCHEMAS["v2"][path]["type"] == kind
