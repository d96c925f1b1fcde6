"""The source.toolkit.fluxcd.io kinds: where artifacts come from.

The source-controller turns each of these into an artifact other
controllers download. The schema is Flux's v1 API field for field, plus
Sluice's optional `spec.gates` (the gating RFC), so Flux manifests apply
unchanged and Flux tooling reads our status.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import Field, StringConstraints

from sluice_api.meta import (
    AGE_COLUMN,
    ARTIFACT_REVISION_COLUMN,
    READY_COLUMN,
    STATUS_COLUMN,
    Artifact,
    Duration,
    KubeModel,
    LocalObjectReference,
    PrinterColumn,
    ReconcileStatus,
    Resource,
    TimeoutDuration,
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


# GitRepository ----------------------------------------------------------------


class GitRepositoryRef(KubeModel):
    """The Git reference to check out.

    Precedence: commit, then name, then semver, then tag, then branch.
    """

    branch: str | None = None
    """Branch to check out; `master` when no other field is set."""

    tag: str | None = None
    """Tag to check out; takes precedence over branch."""

    semver: str | None = None
    """SemVer range of tags; the highest matching tag is checked out."""

    name: str | None = None
    """Full Git reference, e.g. `refs/heads/main` or `refs/pull/420/head`."""

    commit: str | None = None
    """Commit SHA to check out; with branch, the branch is cloned shallowly."""


class GitRepositoryVerification(KubeModel):
    """How to verify the signatures of Git commits and tags."""

    mode: Literal["head", "HEAD", "Tag", "TagAndHEAD"] = "HEAD"
    """Which Git objects to verify; `head` is an alias of `HEAD`."""

    secret_ref: LocalObjectReference
    """Secret holding the trusted keys (`*.asc` PGP, `*.sshpub` SSH)."""


class GitRepositoryInclude(KubeModel):
    """Another GitRepository's artifact to copy into this one."""

    repository: LocalObjectReference
    """The GitRepository whose artifact is included."""

    from_path: str | None = None
    """Path in the included artifact to copy from; its root by default."""

    to_path: str | None = None
    """Path to copy to; the included repository's name by default."""


class GitRepositorySpec(KubeModel):
    """How to produce an artifact from a Git repository."""

    url: GitURL
    """Repository URL, http(s):// or ssh://."""

    secret_ref: LocalObjectReference | None = None
    """Secret with credentials: `username`/`password` or `bearerToken` for
    HTTPS, `identity` and `known_hosts` for SSH, optionally `ca.crt`."""

    provider: Literal["generic", "aws", "azure", "github"] | None = None
    """Authentication provider; `generic` (the secretRef) when not set."""

    service_account_name: str | None = None
    """ServiceAccount to authenticate as, for the `azure` and `aws` providers."""

    interval: Duration
    """How often to check the repository for a new revision."""

    timeout: TimeoutDuration = "60s"
    """Timeout for Git operations such as cloning."""

    ref: GitRepositoryRef | None = None
    """The Git reference to resolve and watch; branch `master` by default."""

    verify: GitRepositoryVerification | None = None
    """Verify commit or tag signatures before producing an artifact."""

    proxy_secret_ref: LocalObjectReference | None = None
    """Secret with the proxy (`address`, `username`, `password`) to use."""

    ignore: str | None = None
    """Exclusions in .gitignore syntax; replaces the default exclusions."""

    suspend: bool = False
    """Stop reconciling this object."""

    recurse_submodules: bool = False
    """Initialise and check out all submodules."""

    include: list[GitRepositoryInclude] | None = None
    """Other GitRepositories whose artifacts are copied into this artifact."""

    sparse_checkout: list[str] | None = None
    """Directories to check out; only these end up in the artifact."""

    gates: list[LocalObjectReference] | None = None
    """Sluice: Gates that must be open before a new revision is fetched."""

    git_implementation: Literal["go-git", "libgit2"] | None = None
    """(v1beta1, v1beta2) Which Git library to use. Deprecated by Flux and without
    effect, as in Flux v1beta2: Sluice always uses libgit2 (through pygit2)."""

    access_from: AccessFrom | None = None
    """(v1beta1, v1beta2) Namespaces allowed to reference this source. Deprecated by
    Flux and not enforced, as in Flux v1beta2."""


class GitRepositoryStatus(SourceStatus):
    """Observed state of a GitRepository."""

    included_artifacts: list[Artifact] | None = None
    """The artifacts of the includes, as last included."""

    observed_ignore: str | None = None
    """The ignore rules the current artifact was built with."""

    observed_recurse_submodules: bool | None = None
    """The submodule setting the current artifact was built with."""

    observed_include: list[GitRepositoryInclude] | None = None
    """The includes the current artifact was built with."""

    observed_sparse_checkout: list[str] | None = None
    """The sparse checkout directories the current artifact was built with."""

    source_verification_mode: Literal["head", "HEAD", "Tag", "TagAndHEAD"] | None = None
    """The verification mode last used."""

    content_config_checksum: str | None = None
    """Checksum of everything besides the commit that shapes the artifact's
    content (ignore rules, includes, sparse checkout, submodules)."""


class GitRepository(Resource[GitRepositorySpec, GitRepositoryStatus]):
    """A Git repository to produce artifacts from."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "GitRepository"
    PLURAL: ClassVar[str] = "gitrepositories"
    SINGULAR: ClassVar[str] = "gitrepository"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("gitrepo",)
    CATEGORIES: ClassVar[tuple[str, ...]] = CATEGORIES
    EXTRA_VERSIONS: ClassVar[tuple[str, ...]] = ("v1beta2", "v1beta1")
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = URL_SOURCE_COLUMNS

    spec: GitRepositorySpec
    status: GitRepositoryStatus = Field(default_factory=GitRepositoryStatus)


# OCIRepository ----------------------------------------------------------------


class OCIRepositoryRef(KubeModel):
    """The OCI artifact to pull; precedence: digest, then semver, then tag."""

    digest: str | None = None
    """Digest to pull, `sha256:<hex>`."""

    semver: str | None = None
    """SemVer range of tags; the highest matching tag is pulled."""

    semver_filter: str | None = None
    """Regular expression the tags within the semver range must match."""

    tag: str | None = None
    """Tag to pull; `latest` when no other field is set."""


class OCILayerSelector(KubeModel):
    """Which layer of the OCI artifact becomes the Sluice artifact, and how."""

    media_type: str | None = None
    """Media type of the layer; the first matching layer is selected."""

    operation: Literal["extract", "copy"] | None = None
    """`extract` (default) unpacks the layer; `copy` stores it as it is."""


class OCIRepositorySpec(KubeModel):
    """How to produce an artifact from an OCI artifact in a container registry."""

    url: OCIURL
    """Repository address, `oci://host/repository`."""

    ref: OCIRepositoryRef | None = None
    """The OCI reference to pull and watch; tag `latest` by default."""

    layer_selector: OCILayerSelector | None = None
    """The layer to use; the first layer when not set."""

    provider: Literal["generic", "aws", "azure", "gcp"] = "generic"
    """Authentication provider; `generic` uses secretRef."""

    secret_ref: LocalObjectReference | None = None
    """Secret of type kubernetes.io/dockerconfigjson with registry credentials."""

    verify: OCIRepositoryVerification | None = None
    """Verify the artifact's signature before producing an artifact."""

    service_account_name: str | None = None
    """ServiceAccount whose image pull secrets are used to authenticate."""

    cert_secret_ref: LocalObjectReference | None = None
    """Secret with a client certificate (`tls.crt`, `tls.key`) and/or a CA
    certificate (`ca.crt`) for the registry connection."""

    proxy_secret_ref: LocalObjectReference | None = None
    """Secret with the proxy (`address`, `username`, `password`) to use."""

    interval: Duration
    """How often to check the registry for a new revision."""

    timeout: TimeoutDuration = "60s"
    """Timeout for registry operations such as pulling."""

    ignore: str | None = None
    """Exclusions in .gitignore syntax; replaces the default exclusions."""

    insecure: bool = False
    """Allow connecting to a registry over plain HTTP."""

    suspend: bool = False
    """Stop reconciling this object."""

    gates: list[LocalObjectReference] | None = None
    """Sluice: Gates that must be open before a new revision is fetched."""


class OCIRepositoryStatus(SourceStatus):
    """Observed state of an OCIRepository."""

    observed_ignore: str | None = None
    """The ignore rules the current artifact was built with."""

    observed_layer_selector: OCILayerSelector | None = None
    """The layer selector the current artifact was built with."""

    content_config_checksum: str | None = None
    """Checksum of everything besides the digest that shapes the artifact's content."""


class OCIRepository(Resource[OCIRepositorySpec, OCIRepositoryStatus]):
    """An OCI artifact repository to produce artifacts from."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "OCIRepository"
    PLURAL: ClassVar[str] = "ocirepositories"
    SINGULAR: ClassVar[str] = "ocirepository"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("ocirepo",)
    CATEGORIES: ClassVar[tuple[str, ...]] = CATEGORIES
    EXTRA_VERSIONS: ClassVar[tuple[str, ...]] = ("v1beta2",)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        URL_COLUMN,
        READY_COLUMN,
        STATUS_COLUMN,
        AGE_COLUMN,
        ARTIFACT_REVISION_COLUMN,
    )

    spec: OCIRepositorySpec
    status: OCIRepositoryStatus = Field(default_factory=OCIRepositoryStatus)


# HelmRepository ---------------------------------------------------------------


class HelmRepositorySpec(KubeModel):
    """How to produce an artifact from a Helm repository index."""

    url: HelmRepositoryURL
    """Repository address: http(s):// for an index, oci:// for a registry."""

    secret_ref: LocalObjectReference | None = None
    """Secret with `username` and `password` for basic authentication."""

    cert_secret_ref: LocalObjectReference | None = None
    """Secret with a client certificate (`tls.crt`, `tls.key`) and/or a CA
    certificate (`ca.crt`); takes precedence over TLS keys in secretRef."""

    pass_credentials: bool = False
    """Send the credentials to chart hosts other than the repository's host."""

    interval: Duration | None = None
    """How often to fetch the index; not used for `type: oci`."""

    insecure: bool = False
    """Allow a registry over plain HTTP; only for `type: oci`."""

    timeout: TimeoutDuration | None = None
    """Timeout for fetching the index or pulling charts; 60s when not set."""

    suspend: bool = False
    """Stop reconciling this object."""

    access_from: AccessFrom | None = None
    """Cross-namespace access control list (provisional, not enforced)."""

    type: Literal["default", "oci"] | None = None
    """`oci` for a Helm OCI registry (the URL must start with oci://)."""

    provider: Literal["generic", "aws", "azure", "gcp"] = "generic"
    """Authentication provider for `type: oci`; `generic` uses secretRef."""

    gates: list[LocalObjectReference] | None = None
    """Sluice: Gates that must be open before a new index is fetched."""


class HelmRepositoryStatus(SourceStatus):
    """Observed state of a HelmRepository."""


class HelmRepository(Resource[HelmRepositorySpec, HelmRepositoryStatus]):
    """A Helm chart repository to produce index artifacts from."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "HelmRepository"
    PLURAL: ClassVar[str] = "helmrepositories"
    SINGULAR: ClassVar[str] = "helmrepository"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("helmrepo",)
    CATEGORIES: ClassVar[tuple[str, ...]] = CATEGORIES
    EXTRA_VERSIONS: ClassVar[tuple[str, ...]] = ("v1beta2", "v1beta1")
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = URL_SOURCE_COLUMNS

    spec: HelmRepositorySpec
    status: HelmRepositoryStatus = Field(default_factory=HelmRepositoryStatus)


# HelmChart --------------------------------------------------------------------


class LocalHelmChartSourceReference(KubeModel):
    """The source, in the same namespace, a chart is taken from."""

    api_version: str | None = None
    """API version of the referent."""

    kind: Literal["HelmRepository", "GitRepository", "Bucket"]
    """Kind of the referent."""

    name: str
    """Name of the referent."""


class HelmChartSpec(KubeModel):
    """How to produce a packaged Helm chart artifact."""

    chart: str
    """Name of the chart in a HelmRepository, or its path in a Git or Bucket source."""

    version: str = "*"
    """SemVer range of chart versions; ignored for Git and Bucket sources."""

    source_ref: LocalHelmChartSourceReference
    """The source the chart is taken from."""

    interval: Duration
    """How often to check the source for a new chart."""

    reconcile_strategy: Literal["ChartVersion", "Revision"] = "ChartVersion"
    """What makes a new artifact: a new chart version, or a new source revision."""

    values_files: list[str] | None = None
    """Values files in the source, merged in order, replacing values.yaml."""

    values_file: str | None = None
    """Deprecated: a single values file, merged before valuesFiles."""

    ignore_missing_values_files: bool = False
    """Skip values files that do not exist instead of failing."""

    suspend: bool = False
    """Stop reconciling this object."""

    access_from: AccessFrom | None = None
    """Cross-namespace access control list (provisional, not enforced)."""

    verify: OCIRepositoryVerification | None = None
    """Verify the chart's signature; only for HelmRepositories of `type: oci`."""

    gates: list[LocalObjectReference] | None = None
    """Sluice: Gates that must be open before a new chart is built."""


class HelmChartStatus(SourceStatus):
    """Observed state of a HelmChart."""

    observed_source_artifact_revision: str | None = None
    """The revision of the source artifact last seen."""

    observed_chart_name: str | None = None
    """The chart name of the last resolved chart reference."""

    observed_values_files: list[str] | None = None
    """The values files the current artifact was built with."""


class HelmChart(Resource[HelmChartSpec, HelmChartStatus]):
    """A Helm chart to package from a source."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "HelmChart"
    PLURAL: ClassVar[str] = "helmcharts"
    SINGULAR: ClassVar[str] = "helmchart"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("hc",)
    CATEGORIES: ClassVar[tuple[str, ...]] = CATEGORIES
    EXTRA_VERSIONS: ClassVar[tuple[str, ...]] = ("v1beta2", "v1beta1")
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn(name="Chart", type="string", json_path=".spec.chart"),
        PrinterColumn(name="Version", type="string", json_path=".spec.version"),
        PrinterColumn(name="Source Kind", type="string", json_path=".spec.sourceRef.kind"),
        PrinterColumn(name="Source Name", type="string", json_path=".spec.sourceRef.name"),
        AGE_COLUMN,
        READY_COLUMN,
        STATUS_COLUMN,
        ARTIFACT_REVISION_COLUMN,
    )

    spec: HelmChartSpec
    status: HelmChartStatus = Field(default_factory=HelmChartStatus)


# Bucket -----------------------------------------------------------------------


class BucketSTSSpec(KubeModel):
    """A Security Token Service to fetch temporary bucket credentials from."""

    provider: Literal["aws", "ldap"]
    """The kind of STS: `aws` for the aws provider, `ldap` for generic."""

    endpoint: Annotated[str, StringConstraints(pattern=r"^(http|https)://.*$")]
    """HTTP(S) address of the STS."""

    secret_ref: LocalObjectReference | None = None
    """Secret with `username` and `password`; ldap only."""

    cert_secret_ref: LocalObjectReference | None = None
    """Secret with TLS material for the STS connection; ldap only."""


class BucketSpec(KubeModel):
    """How to produce an artifact from an object storage bucket."""

    provider: Literal["generic", "aws", "gcp", "azure"] = "generic"
    """Object storage provider; `generic` is any S3-compatible API."""

    bucket_name: str
    """Name of the bucket."""

    endpoint: str
    """Address of the object storage, e.g. `minio.example.com:9000`."""

    sts: BucketSTSSpec | None = None
    """Fetch temporary credentials from a Security Token Service."""

    insecure: bool = False
    """Connect to the endpoint over plain HTTP."""

    region: str | None = None
    """Region of the bucket."""

    prefix: str | None = None
    """Only objects whose key starts with this prefix are fetched."""

    secret_ref: LocalObjectReference | None = None
    """Secret with `accesskey` and `secretkey`."""

    service_account_name: str | None = None
    """ServiceAccount to authenticate as, for the `gcp` and `aws` providers."""

    cert_secret_ref: LocalObjectReference | None = None
    """Secret with a client certificate (`tls.crt`, `tls.key`) and/or a CA
    certificate (`ca.crt`); generic provider only."""

    proxy_secret_ref: LocalObjectReference | None = None
    """Secret with the proxy (`address`, `username`, `password`) to use."""

    interval: Duration
    """How often to check the bucket for changes."""

    timeout: TimeoutDuration = "60s"
    """Timeout for fetch operations."""

    ignore: str | None = None
    """Exclusions in .gitignore syntax; replaces the default exclusions."""

    suspend: bool = False
    """Stop reconciling this object."""

    gates: list[LocalObjectReference] | None = None
    """Sluice: Gates that must be open before a new revision is fetched."""

    access_from: AccessFrom | None = None
    """(v1beta1, v1beta2) Namespaces allowed to reference this source. Deprecated by
    Flux and not enforced, as in Flux v1beta2."""


class BucketStatus(SourceStatus):
    """Observed state of a Bucket."""

    observed_ignore: str | None = None
    """The ignore rules the current artifact was built with."""


class Bucket(Resource[BucketSpec, BucketStatus]):
    """An object storage bucket to produce artifacts from."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "Bucket"
    PLURAL: ClassVar[str] = "buckets"
    SINGULAR: ClassVar[str] = "bucket"
    CATEGORIES: ClassVar[tuple[str, ...]] = CATEGORIES
    EXTRA_VERSIONS: ClassVar[tuple[str, ...]] = ("v1beta2", "v1beta1")
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn(name="Endpoint", type="string", json_path=".spec.endpoint"),
        AGE_COLUMN,
        READY_COLUMN,
        STATUS_COLUMN,
        ARTIFACT_REVISION_COLUMN,
    )

    spec: BucketSpec
    status: BucketStatus = Field(default_factory=BucketStatus)


class ExternalArtifactSourceReference(KubeModel):
    """The custom resource an ExternalArtifact was produced from."""

    api_version: str | None = None
    """API version of the referent."""

    kind: str
    """Kind of the referent."""

    name: str
    """Name of the referent."""

    namespace: str | None = None
    """Namespace of the referent; the ExternalArtifact's namespace when not set."""


class ExternalArtifactSpec(KubeModel):
    """What an ExternalArtifact was produced from (RFC-0012, Flux 2.7)."""

    source_ref: ExternalArtifactSourceReference | None = None
    """The custom resource the producing controller built the artifact from."""


class ExternalArtifact(Resource[ExternalArtifactSpec, SourceStatus]):
    """An artifact produced and served by a controller other than the source-controller.

    Nothing reconciles it as such: its producer (an ArtifactGenerator, served
    by the source-controller, or another controller) writes `status.artifact`
    and Ready, and Kustomizations consume it like any other source.
    """

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "ExternalArtifact"
    PLURAL: ClassVar[str] = "externalartifacts"
    SINGULAR: ClassVar[str] = "externalartifact"
    CATEGORIES: ClassVar[tuple[str, ...]] = CATEGORIES
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn(name="Ready", type="string", json_path=READY_COLUMN.json_path),
        PrinterColumn(name="Status", type="string", json_path=STATUS_COLUMN.json_path),
        PrinterColumn(name="Source", type="string", json_path=".spec.sourceRef.name"),
        AGE_COLUMN,
    )

    spec: ExternalArtifactSpec = Field(default_factory=ExternalArtifactSpec)
    status: SourceStatus = Field(default_factory=SourceStatus)
