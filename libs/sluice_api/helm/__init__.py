"""The helm.toolkit.fluxcd.io HelmRelease: a Helm release driven from a chart source.

Flux's v2 schema field for field (Flux 2.9), plus Sluice's optional `spec.gates`.
v2beta2 and v2beta1 are served too, with conversion `None` over the same
superset schema: the fields only they had (`chart.spec.valuesFile`, the
post-renderers' `patchesStrategicMerge`/`patchesJson6902`,
`status.lastAppliedRevision`) are kept in it, and the controller maps them as
Flux's v2beta2 did, whatever version an object was written in. The
helm-controller refuses (Stalled, naming the field) every field it does not
build yet, so a manifest written for Flux never half-works silently.

One module per part, every name importable from `sluice_api.helm`: `common`
(group, annotations, labels, condition types and reasons), `charts` (where the
chart comes from), `actions` (install, upgrade, test, rollback, uninstall),
`spec`, `status` (the release history) and `release` (the kind).
"""

from __future__ import annotations

from sluice_api.helm.actions import (
    CRDsPolicy,
    Filter,
    Install,
    InstallRemediation,
    Rollback,
    Strategy,
    Test,
    Uninstall,
    Upgrade,
    UpgradeRemediation,
)
from sluice_api.helm.charts import (
    CrossNamespaceObjectReference,
    CrossNamespaceSourceReference,
    HelmChartTemplate,
    HelmChartTemplateObjectMeta,
    HelmChartTemplateSpec,
    HelmChartTemplateVerification,
)
from sluice_api.helm.common import (
    FORCE_REQUESTED_AT_ANNOTATION,
    GROUP,
    NAME_LABEL,
    NAMESPACE_LABEL,
    RESET_REQUESTED_AT_ANNOTATION,
    VERSION,
    HelmReleaseCondition,
    HelmReleaseReason,
)
from sluice_api.helm.release import HelmRelease
from sluice_api.helm.spec import (
    CommonMetadata,
    DriftDetection,
    HelmReleaseSpec,
    IgnoreRule,
    Kustomize,
    PostRenderer,
    ValuesReference,
    WaitStrategy,
)
from sluice_api.helm.status import HelmReleaseStatus, Snapshot, TestHookStatus

__all__ = [
    "FORCE_REQUESTED_AT_ANNOTATION",
    "GROUP",
    "NAMESPACE_LABEL",
    "NAME_LABEL",
    "RESET_REQUESTED_AT_ANNOTATION",
    "VERSION",
    "CRDsPolicy",
    "CommonMetadata",
    "CrossNamespaceObjectReference",
    "CrossNamespaceSourceReference",
    "DriftDetection",
    "Filter",
    "HelmChartTemplate",
    "HelmChartTemplateObjectMeta",
    "HelmChartTemplateSpec",
    "HelmChartTemplateVerification",
    "HelmRelease",
    "HelmReleaseCondition",
    "HelmReleaseReason",
    "HelmReleaseSpec",
    "HelmReleaseStatus",
    "IgnoreRule",
    "Install",
    "InstallRemediation",
    "Kustomize",
    "PostRenderer",
    "Rollback",
    "Snapshot",
    "Strategy",
    "Test",
    "TestHookStatus",
    "Uninstall",
    "Upgrade",
    "UpgradeRemediation",
    "ValuesReference",
    "WaitStrategy",
]
