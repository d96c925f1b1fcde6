"""The kustomize.toolkit.fluxcd.io Kustomization: applying a source to the cluster.

Flux's v1 schema field for field, plus Sluice's optional `spec.gates`. The
labels and annotations the kustomize-controller reads on applied objects are
part of that API too, so they are named here once.

v1beta2 and v1beta1 are served too, with conversion `None`: the API server
only rewrites `apiVersion`, so every version's schema is the same superset.
The fields only the old versions had (`validation`, `patchesStrategicMerge`,
`patchesJson6902`) are kept in it, which makes every round trip lossless, and
the controller honours them whatever version an object was written in.

One module per part, every name importable from `sluice_api.kustomize`:
`common` (group, labels, annotations, condition types and reasons),
`patches` (patches, images, selectors), `spec`, `status` (the inventory) and
`kustomization` (the kind).
"""

from __future__ import annotations

from sluice_api.kustomize.common import (
    FORCE_ANNOTATION,
    GROUP,
    NAME_LABEL,
    NAMESPACE_LABEL,
    PRUNE_ANNOTATION,
    RECONCILE_ANNOTATION,
    SSA_ANNOTATION,
    SUBSTITUTE_ANNOTATION,
    VERSION,
    AnyJSON,
    AnyObject,
    KustomizationCondition,
    KustomizationReason,
)
from sluice_api.kustomize.kustomization import Kustomization
from sluice_api.kustomize.patches import Image, JSON6902Operation, JSON6902Patch, Patch, Selector
from sluice_api.kustomize.spec import (
    KUBECONFIG_ONE_OF,
    KUBECONFIG_RULES,
    CommonMetadata,
    CrossNamespaceSourceReference,
    CustomHealthCheck,
    Decryption,
    DependencyReference,
    DriftIgnoreRule,
    KubeConfigReference,
    KustomizationSpec,
    PostBuild,
    SubstituteReference,
)
from sluice_api.kustomize.status import KustomizationStatus, ResourceInventory, ResourceRef

__all__ = [
    "FORCE_ANNOTATION",
    "GROUP",
    "KUBECONFIG_ONE_OF",
    "KUBECONFIG_RULES",
    "NAMESPACE_LABEL",
    "NAME_LABEL",
    "PRUNE_ANNOTATION",
    "RECONCILE_ANNOTATION",
    "SSA_ANNOTATION",
    "SUBSTITUTE_ANNOTATION",
    "VERSION",
    "AnyJSON",
    "AnyObject",
    "CommonMetadata",
    "CrossNamespaceSourceReference",
    "CustomHealthCheck",
    "Decryption",
    "DependencyReference",
    "DriftIgnoreRule",
    "Image",
    "JSON6902Operation",
    "JSON6902Patch",
    "KubeConfigReference",
    "Kustomization",
    "KustomizationCondition",
    "KustomizationReason",
    "KustomizationSpec",
    "KustomizationStatus",
    "Patch",
    "PostBuild",
    "ResourceInventory",
    "ResourceRef",
    "Selector",
    "SubstituteReference",
]
