"""The source.toolkit.fluxcd.io kinds: where artifacts come from.

The source-controller turns each of these into an artifact other
controllers download. The schema is Flux's v1 API field for field, plus
Sluice's optional `spec.gates` (the gating RFC), so Flux manifests apply
unchanged and Flux tooling reads our status.

The kinds, one module each (`git`, `oci`, `helm`, `bucket`, `external`), over
what they share (`common`); every name is importable from `sluice_api.source`.
"""

from __future__ import annotations

from sluice_api.source.bucket import (
    Bucket,
    BucketSpec,
    BucketStatus,
    BucketSTSSpec,
)
from sluice_api.source.common import (
    CATEGORIES,
    GROUP,
    OCIURL,
    URL_COLUMN,
    URL_SOURCE_COLUMNS,
    VERSION,
    AccessFrom,
    GitURL,
    HelmRepositoryURL,
    NamespaceSelector,
    OCIRepositoryVerification,
    OIDCIdentityMatch,
    SourceCondition,
    SourceReason,
    SourceStatus,
)
from sluice_api.source.external import (
    ExternalArtifact,
    ExternalArtifactSourceReference,
    ExternalArtifactSpec,
)
from sluice_api.source.git import (
    GitRepository,
    GitRepositoryInclude,
    GitRepositoryRef,
    GitRepositorySpec,
    GitRepositoryStatus,
    GitRepositoryVerification,
)
from sluice_api.source.helm import (
    HelmChart,
    HelmChartSpec,
    HelmChartStatus,
    HelmRepository,
    HelmRepositorySpec,
    HelmRepositoryStatus,
    LocalHelmChartSourceReference,
)
from sluice_api.source.oci import (
    OCILayerSelector,
    OCIRepository,
    OCIRepositoryRef,
    OCIRepositorySpec,
    OCIRepositoryStatus,
)

__all__ = [
    "CATEGORIES",
    "GROUP",
    "OCIURL",
    "URL_COLUMN",
    "URL_SOURCE_COLUMNS",
    "VERSION",
    "AccessFrom",
    "Bucket",
    "BucketSTSSpec",
    "BucketSpec",
    "BucketStatus",
    "ExternalArtifact",
    "ExternalArtifactSourceReference",
    "ExternalArtifactSpec",
    "GitRepository",
    "GitRepositoryInclude",
    "GitRepositoryRef",
    "GitRepositorySpec",
    "GitRepositoryStatus",
    "GitRepositoryVerification",
    "GitURL",
    "HelmChart",
    "HelmChartSpec",
    "HelmChartStatus",
    "HelmRepository",
    "HelmRepositorySpec",
    "HelmRepositoryStatus",
    "HelmRepositoryURL",
    "LocalHelmChartSourceReference",
    "NamespaceSelector",
    "OCILayerSelector",
    "OCIRepository",
    "OCIRepositoryRef",
    "OCIRepositorySpec",
    "OCIRepositoryStatus",
    "OCIRepositoryVerification",
    "OIDCIdentityMatch",
    "SourceCondition",
    "SourceReason",
    "SourceStatus",
]
