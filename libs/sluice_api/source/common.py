"""What every source kind shares: the group, its conditions and reasons, the
status fields, and the access and verification types more than one kind uses."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from sluice_api.meta import (
    AGE_COLUMN,
    ARTIFACT_REVISION_COLUMN,
    READY_COLUMN,
    STATUS_COLUMN,
    Artifact,
    KubeModel,
    LocalObjectReference,
    PrinterColumn,
    ReconcileStatus,
)

GROUP = "source.toolkit.fluxcd.io"
VERSION = "v1"
CATEGORIES = ("all", "fluxcd", "fluxcd-sources")

URL_COLUMN = PrinterColumn(name="URL", type="string", json_path=".spec.url")
URL_SOURCE_COLUMNS = (URL_COLUMN, AGE_COLUMN, READY_COLUMN, STATUS_COLUMN, ARTIFACT_REVISION_COLUMN)
"""What `kubectl get` shows of a source fetched from a URL (Flux's printer columns)."""

GitURL = Annotated[str, StringConstraints(pattern=r"^(http|https|ssh)://.*$")]
OCIURL = Annotated[str, StringConstraints(pattern=r"^oci://.*$")]
HelmRepositoryURL = Annotated[str, StringConstraints(pattern=r"^(http|https|oci)://.*$")]


class SourceCondition(StrEnum):
    """Condition types of the source kinds, besides Ready/Reconciling/Stalled."""

    READY = "Ready"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"
    ARTIFACT_IN_STORAGE = "ArtifactInStorage"
    ARTIFACT_OUTDATED = "ArtifactOutdated"
    FETCH_FAILED = "FetchFailed"
    BUILD_FAILED = "BuildFailed"
    STORAGE_OPERATION_FAILED = "StorageOperationFailed"
    SOURCE_VERIFIED = "SourceVerified"
    INCLUDE_UNAVAILABLE = "IncludeUnavailable"
    BLOCKED = "Blocked"
    """Sluice: a closed gate holds the source at its last artifact."""


class SourceReason(StrEnum):
    """Reasons the source-controller gives for its conditions."""

    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PROGRESSING = "Progressing"
    PROGRESSING_WITH_RETRY = "ProgressingWithRetry"
    NEW_REVISION = "NewRevision"
    ARTIFACT_UP_TO_DATE = "ArtifactUpToDate"
    AUTHENTICATION_FAILED = "AuthenticationFailed"
    URL_INVALID = "URLInvalid"
    VERIFICATION_ERROR = "VerificationError"
    GIT_OPERATION_SUCCEEDED = "GitOperationSucceeded"
    GIT_OPERATION_FAILED = "GitOperationFailed"
    OCI_ARTIFACT_PULL_FAILED = "OCIArtifactPullFailed"
    OCI_ARTIFACT_LAYER_OPERATION_FAILED = "OCIArtifactLayerOperationFailed"
    INDEXATION_FAILED = "IndexationFailed"
    BUCKET_OPERATION_SUCCEEDED = "BucketOperationSucceeded"
    BUCKET_OPERATION_FAILED = "BucketOperationFailed"
    CHART_PULL_SUCCEEDED = "ChartPullSucceeded"
    CHART_PACKAGE_SUCCEEDED = "ChartPackageSucceeded"
    CHART_PULL_ERROR = "ChartPullError"
    CHART_PACKAGE_ERROR = "ChartPackageError"
    INVALID_CHART_REFERENCE = "InvalidChartReference"
    DIRECTORY_CREATION_FAILED = "DirectoryCreationFailed"
    STAT_OPERATION_FAILED = "StatOperationFailed"
    READ_OPERATION_FAILED = "ReadOperationFailed"
    ACQUIRE_LOCK_FAILED = "AcquireLockFailed"
    INVALID_PATH = "InvalidPath"
    ARCHIVE_OPERATION_FAILED = "ArchiveOperationFailed"
    SYMLINK_UPDATE_FAILED = "SymlinkUpdateFailed"
    CACHE_OPERATION_FAILED = "CacheOperationFailed"
    COPY_FAILED = "CopyFailed"
    GATE_CLOSED = "GateClosed"


class SourceStatus(ReconcileStatus):
    """Status fields every source kind has."""

    artifact: Artifact | None = None
    """The artifact of the last successful reconciliation."""

    url: str | None = None
    """A stable link to the newest artifact, best effort; prefer artifact.url."""


class NamespaceSelector(KubeModel):
    """Selects the namespaces an access control list applies to."""

    match_labels: dict[str, str] | None = None
    """Labels a namespace must have; an empty map matches every namespace."""


class AccessFrom(KubeModel):
    """An access control list for cross-namespace references (not enforced yet)."""

    namespace_selectors: list[NamespaceSelector]
    """Namespace selectors, ORed."""


class OIDCIdentityMatch(KubeModel):
    """An identity a keyless cosign signature must match."""

    issuer: str
    """Regular expression the OIDC issuer of the Fulcio certificate must match."""

    subject: str
    """Regular expression the identity subject of the Fulcio certificate must match."""


class OCIRepositoryVerification(KubeModel):
    """How to verify the signature of an OCI artifact."""

    provider: Literal["cosign", "notation"] = "cosign"
    """The technology the artifact was signed with."""

    secret_ref: LocalObjectReference | None = None
    """Secret holding the trusted public keys."""

    match_oidc_identity: list[OIDCIdentityMatch] | None = Field(
        default=None, alias="matchOIDCIdentity"
    )
    """Identities a keyless signature may have; any match verifies it."""

    trusted_root_secret_ref: LocalObjectReference | None = None
    """Secret holding a Sigstore trusted_root.json for self-hosted Sigstore."""
