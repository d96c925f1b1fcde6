"""The helm.toolkit.fluxcd.io HelmRelease: a Helm release driven from a chart source.

Flux's v2 schema field for field, plus Sluice's optional `spec.gates`. The
helm-controller refuses (Stalled, naming the field) every field it does not
build yet, so a manifest written for Flux never half-works silently.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, StringConstraints

from sluice_api.kustomize import DependencyReference, Image, KubeConfigReference, Patch, Selector
from sluice_api.meta import (
    AGE_COLUMN,
    READY_COLUMN,
    STATUS_COLUMN,
    Duration,
    KubeModel,
    LocalObjectReference,
    PrinterColumn,
    ReconcileStatus,
    Resource,
)

GROUP = "helm.toolkit.fluxcd.io"
VERSION = "v2"

FORCE_REQUESTED_AT_ANNOTATION = "reconcile.fluxcd.io/forceAt"
"""When its value changes (together with requestedAt), run a release action now."""
RESET_REQUESTED_AT_ANNOTATION = "reconcile.fluxcd.io/resetAt"
"""When its value changes (together with requestedAt), reset the failure counters."""

NAME_LABEL = f"{GROUP}/name"
"""Label on the HelmChart a HelmRelease owns: the HelmRelease's name."""
NAMESPACE_LABEL = f"{GROUP}/namespace"
"""Label on the HelmChart a HelmRelease owns: the HelmRelease's namespace."""


class HelmReleaseCondition(StrEnum):
    """Condition types of a HelmRelease."""

    READY = "Ready"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"
    RELEASED = "Released"
    TEST_SUCCESS = "TestSuccess"
    REMEDIATED = "Remediated"
    APPROVED = "Approved"
    """Sluice: False while a gate in spec.gates is closed."""


class HelmReleaseReason(StrEnum):
    """Reasons the helm-controller gives for its conditions, as Flux's."""

    INSTALL_SUCCEEDED = "InstallSucceeded"
    INSTALL_FAILED = "InstallFailed"
    UPGRADE_SUCCEEDED = "UpgradeSucceeded"
    UPGRADE_FAILED = "UpgradeFailed"
    TEST_SUCCEEDED = "TestSucceeded"
    TEST_FAILED = "TestFailed"
    ROLLBACK_SUCCEEDED = "RollbackSucceeded"
    ROLLBACK_FAILED = "RollbackFailed"
    UNINSTALL_SUCCEEDED = "UninstallSucceeded"
    UNINSTALL_FAILED = "UninstallFailed"
    ARTIFACT_FAILED = "ArtifactFailed"
    INIT_FAILED = "InitFailed"
    GET_LAST_RELEASE_FAILED = "GetLastReleaseFailed"
    DEPENDENCY_NOT_READY = "DependencyNotReady"
    PROGRESSING = "Progressing"
    PROGRESSING_WITH_RETRY = "ProgressingWithRetry"
    RECONCILIATION_FAILED = "ReconciliationFailed"
    RETRIES_EXHAUSTED = "RetriesExhausted"
    VALUES_ERROR = "ValuesError"
    UNSUPPORTED = "UnsupportedField"
    """Sluice: a field the controller does not build is set."""
    GATE_CLOSED = "GateClosed"
    SUCCEEDED = "Succeeded"
    DRIFT_DETECTED = "DriftDetected"
    DRIFT_CORRECTED = "DriftCorrected"
    DRIFT_CORRECTION_FAILED = "DriftCorrectionFailed"


class CrossNamespaceObjectReference(KubeModel):
    """The source a HelmChart template takes its chart from."""

    api_version: str | None = None
    """API version of the referent."""

    kind: Literal["HelmRepository", "GitRepository", "Bucket"]
    """Kind of the referent."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    """Name of the referent."""

    namespace: Annotated[str, StringConstraints(min_length=1, max_length=63)] | None = None
    """Namespace of the referent; the HelmRelease's namespace when not set."""


class CrossNamespaceSourceReference(KubeModel):
    """A source-controller object holding the chart artifact."""

    api_version: str | None = None
    """API version of the referent."""

    kind: Literal["OCIRepository", "HelmChart", "ExternalArtifact"]
    """Kind of the referent (ExternalArtifact: Flux 2.7)."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    """Name of the referent."""

    namespace: Annotated[str, StringConstraints(min_length=1, max_length=63)] | None = None
    """Namespace of the referent; the HelmRelease's namespace when not set."""


class HelmChartTemplateVerification(KubeModel):
    """How to verify the chart's signature (OCI HelmRepositories only)."""

    provider: Literal["cosign", "notation"] = "cosign"
    """The signature provider."""

    secret_ref: LocalObjectReference | None = None
    """Secret with the trusted public keys."""


class HelmChartTemplateSpec(KubeModel):
    """The spec of the HelmChart the controller creates for a HelmRelease."""

    chart: Annotated[str, StringConstraints(min_length=1, max_length=2048)]
    """Name or path of the chart, relative to the source's root."""

    version: str = "*"
    """SemVer range of chart versions; ignored for Git and Bucket sources."""

    source_ref: CrossNamespaceObjectReference
    """The source the chart is taken from."""

    interval: Duration | None = None
    """How often to check the source; the HelmRelease's interval when not set."""

    reconcile_strategy: Literal["ChartVersion", "Revision"] = "ChartVersion"
    """What makes a new artifact: a new chart version, or a new source revision."""

    values_files: list[str] | None = None
    """Values files in the source, merged in order, replacing values.yaml."""

    ignore_missing_values_files: bool = False
    """Skip values files that do not exist instead of failing."""

    verify: HelmChartTemplateVerification | None = None
    """Verify the chart's signature; only for HelmRepositories of `type: oci`."""


class HelmChartTemplateObjectMeta(KubeModel):
    """Labels and annotations for the HelmChart the controller creates."""

    labels: dict[str, str] | None = None
    """Labels to set on the HelmChart."""

    annotations: dict[str, str] | None = None
    """Annotations to set on the HelmChart."""


class HelmChartTemplate(KubeModel):
    """The template of the HelmChart the controller creates and owns."""

    metadata: HelmChartTemplateObjectMeta | None = None
    """Labels and annotations of the HelmChart."""

    spec: HelmChartTemplateSpec
    """The HelmChart's spec."""


class IgnoreRule(KubeModel):
    """Paths drift detection neither corrects nor reports."""

    paths: list[str]
    """JSON pointers (RFC 6901) to ignore."""

    target: Selector | None = None
    """The objects the rule applies to; every object when not set."""


class DriftDetection(KubeModel):
    """Whether and how to detect and correct drift from the release manifest."""

    mode: Literal["enabled", "warn", "disabled"] | None = None
    """`enabled` corrects drift, `warn` only reports it; `disabled` when not set."""

    ignore: list[IgnoreRule] | None = None
    """Fields to leave out of the comparison."""


CRDsPolicy = Literal["Skip", "Create", "CreateReplace"]


class InstallRemediation(KubeModel):
    """What to do when an install fails."""

    retries: int = 0
    """How many times to retry; a negative value retries forever."""

    ignore_test_failures: bool | None = None
    """Do not treat a failed test as a failed install; test.ignoreFailures when not set."""

    remediate_last_failure: bool | None = None
    """Remediate the last failure when retries are exhausted; true when retries > 0."""


class Install(KubeModel):
    """How to run `helm install`."""

    timeout: Duration | None = None
    """Time to wait for the install; spec.timeout when not set."""

    remediation: InstallRemediation | None = None
    """What to do when the install fails."""

    disable_wait: bool = False
    """Do not wait for the release's resources to be ready."""

    disable_wait_for_jobs: bool = False
    """Do not wait for the release's Jobs to complete."""

    disable_hooks: bool = False
    """Do not run the chart's hooks."""

    disable_open_api_validation: bool = False
    """Do not validate the rendered manifests against the Kubernetes OpenAPI schema."""

    disable_schema_validation: bool = False
    """Do not validate the values against the chart's JSON schema."""

    replace: bool = False
    """Reuse the release name even if it is in the history (unsafe in production)."""

    skip_crds: bool = False
    """Deprecated: use crds: Skip."""

    crds: CRDsPolicy | None = None
    """How CRDs in the chart's crds/ directory are installed; Create when not set."""

    create_namespace: bool = False
    """Create the target namespace if it does not exist."""


class UpgradeRemediation(KubeModel):
    """What to do when an upgrade fails."""

    retries: int = 0
    """How many times to retry; a negative value retries forever."""

    ignore_test_failures: bool | None = None
    """Do not treat a failed test as a failed upgrade; test.ignoreFailures when not set."""

    remediate_last_failure: bool | None = None
    """Remediate the last failure when retries are exhausted; true when retries > 0."""

    strategy: Literal["rollback", "uninstall"] | None = None
    """How to remediate; rollback when not set."""


class Upgrade(KubeModel):
    """How to run `helm upgrade`."""

    timeout: Duration | None = None
    """Time to wait for the upgrade; spec.timeout when not set."""

    remediation: UpgradeRemediation | None = None
    """What to do when the upgrade fails."""

    disable_wait: bool = False
    """Do not wait for the release's resources to be ready."""

    disable_wait_for_jobs: bool = False
    """Do not wait for the release's Jobs to complete."""

    disable_hooks: bool = False
    """Do not run the chart's hooks."""

    disable_open_api_validation: bool = False
    """Do not validate the rendered manifests against the Kubernetes OpenAPI schema."""

    disable_schema_validation: bool = False
    """Do not validate the values against the chart's JSON schema."""

    force: bool = False
    """Replace resources through delete and re-create when needed."""

    preserve_values: bool = False
    """Reuse the last release's values and merge in the overrides."""

    cleanup_on_fail: bool = False
    """Delete new resources created by a failed upgrade."""

    crds: CRDsPolicy | None = None
    """How CRDs in the chart's crds/ directory are upgraded; Skip when not set."""


class Filter(KubeModel):
    """Selects a chart test hook by name."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    """Name of the test."""

    exclude: bool = False
    """Exclude the test instead of selecting it."""


class Test(KubeModel):
    """How to run `helm test` after an install or upgrade."""

    enable: bool = False
    """Run the chart's tests."""

    timeout: Duration | None = None
    """Time to wait for the tests; spec.timeout when not set."""

    ignore_failures: bool = False
    """Do not treat a failed test as a failed release."""

    filters: list[Filter] | None = None
    """Which tests to run."""


class Rollback(KubeModel):
    """How to run `helm rollback` when remediating a failed upgrade."""

    timeout: Duration | None = None
    """Time to wait for the rollback; spec.timeout when not set."""

    disable_wait: bool = False
    """Do not wait for the release's resources to be ready."""

    disable_wait_for_jobs: bool = False
    """Do not wait for the release's Jobs to complete."""

    disable_hooks: bool = False
    """Do not run the chart's hooks."""

    recreate: bool = False
    """Restart the release's pods."""

    force: bool = False
    """Replace resources through delete and re-create when needed."""

    cleanup_on_fail: bool = False
    """Delete new resources created by a failed rollback."""


class Uninstall(KubeModel):
    """How to run `helm uninstall`."""

    timeout: Duration | None = None
    """Time to wait for the uninstall; spec.timeout when not set."""

    disable_hooks: bool = False
    """Do not run the chart's hooks."""

    keep_history: bool = False
    """Keep the release history (and the name) after uninstalling."""

    disable_wait: bool = False
    """Do not wait for the release's resources to be deleted."""

    deletion_propagation: Literal["background", "foreground", "orphan"] = "background"
    """How dependents of the release's resources are deleted."""


class ValuesReference(KubeModel):
    """A ConfigMap or Secret key holding values."""

    kind: Literal["Secret", "ConfigMap"]
    """Kind of the referent."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    """Name of the referent, in the HelmRelease's namespace."""

    values_key: (
        Annotated[str, StringConstraints(max_length=253, pattern=r"^[\-._a-zA-Z0-9]+$")] | None
    ) = None
    """Key in the referent holding the values; `values.yaml` when not set."""

    target_path: (
        Annotated[
            str,
            StringConstraints(max_length=250, pattern=r"^([a-zA-Z0-9_\-.\\\/]|\[[0-9]{1,5}\])+$"),
        ]
        | None
    ) = None
    """Where to put the value (a single value, not YAML) in the values, as with `--set`."""

    optional: bool = False
    """Proceed without it when the referent or key does not exist."""


class Kustomize(KubeModel):
    """Kustomize patches and image overrides applied to the rendered manifests."""

    patches: list[Patch] | None = None
    """Strategic merge and JSON 6902 patches."""

    images: list[Image] | None = None
    """Image names, tags or digests to replace."""


class PostRenderer(KubeModel):
    """A post-renderer applied to the rendered manifests."""

    kustomize: Kustomize | None = None
    """A kustomize post-renderer."""


class CommonMetadata(KubeModel):
    """Labels and annotations set on every object of the release."""

    annotations: dict[str, str] | None = None
    """Annotations to set."""

    labels: dict[str, str] | None = None
    """Labels to set."""


class HelmReleaseSpec(KubeModel):
    """How to install and keep up to date a Helm release."""

    chart: HelmChartTemplate | None = None
    """The HelmChart to create for this release; exactly one of chart and chartRef."""

    chart_ref: CrossNamespaceSourceReference | None = None
    """An existing OCIRepository or HelmChart holding the chart artifact."""

    interval: Duration
    """How often to reconcile the release."""

    kube_config: KubeConfigReference | None = None
    """Release to a remote cluster with this kubeconfig."""

    suspend: bool = False
    """Stop reconciling this object; a reconcile under way finishes."""

    release_name: Annotated[str, StringConstraints(min_length=1, max_length=53)] | None = None
    """The Helm release name; `[<targetNamespace>-]<name>` when not set."""

    target_namespace: Annotated[str, StringConstraints(min_length=1, max_length=63)] | None = None
    """Namespace to install the release into; the HelmRelease's namespace when not set."""

    storage_namespace: Annotated[str, StringConstraints(min_length=1, max_length=63)] | None = None
    """Namespace of Helm's release storage; the HelmRelease's namespace when not set."""

    depends_on: list[DependencyReference] | None = None
    """HelmReleases that must be ready before this one is reconciled."""

    timeout: Duration | None = None
    """Time to wait for a Helm action; 5m when not set."""

    max_history: int | None = None
    """How many releases Helm keeps in its history; 5 when not set, 0 for no limit."""

    service_account_name: Annotated[str, StringConstraints(min_length=1, max_length=253)] | None = (
        None
    )
    """ServiceAccount to impersonate for every Helm action."""

    persistent_client: bool | None = None
    """Keep one Kubernetes client per release; a performance knob, on by default."""

    drift_detection: DriftDetection | None = None
    """Detect and correct drift of the cluster from the release manifest."""

    install: Install | None = None
    """How to install."""

    upgrade: Upgrade | None = None
    """How to upgrade."""

    test: Test | None = None
    """How to test."""

    rollback: Rollback | None = None
    """How to roll back."""

    uninstall: Uninstall | None = None
    """How to uninstall."""

    values_from: list[ValuesReference] | None = None
    """ConfigMaps and Secrets with values, merged in order, before values."""

    values: dict[str, Any] | None = None
    """Values merged over valuesFrom."""

    post_renderers: list[PostRenderer] | None = None
    """Post-renderers applied to the rendered manifests, in order."""

    common_metadata: CommonMetadata | None = None
    """Labels and annotations set on every object of the release."""

    gates: list[LocalObjectReference] | None = None
    """Sluice: Gates that must all be open before an install or upgrade."""


class TestHookStatus(KubeModel):
    """The last run of one chart test hook."""

    last_started: str | None = None
    """When the test last started."""

    last_completed: str | None = None
    """When the test last completed."""

    phase: str | None = None
    """The test's phase: Succeeded, Failed, Running, Unknown."""


class Snapshot(KubeModel):
    """One release in the history, as Helm stored it."""

    api_version: str | None = None
    """Version of the snapshot format."""

    digest: str
    """Digest of the release object in Helm's storage."""

    name: str
    """Release name."""

    namespace: str
    """Namespace the release is deployed to."""

    version: int
    """Helm's release revision."""

    status: str
    """Helm's release status: deployed, failed, superseded, ..."""

    chart_name: str
    """Name of the chart."""

    chart_version: str
    """Version of the chart."""

    app_version: str | None = None
    """App version of the chart."""

    config_digest: str
    """Digest of the values the release was made with."""

    first_deployed: str
    """When the release was first deployed."""

    last_deployed: str
    """When this release revision was deployed."""

    deleted: str | None = None
    """When the release was uninstalled."""

    test_hooks: dict[str, TestHookStatus] | None = None
    """Test hooks of this release and their last runs."""

    oci_digest: str | None = None
    """Digest of the OCI artifact the chart came from."""


class HelmReleaseStatus(ReconcileStatus):
    """Observed state of a HelmRelease."""

    observed_post_renderers_digest: str | None = None
    """Digest of the post-renderers last reconciled."""

    last_attempted_generation: int | None = None
    """The generation of the last release attempt."""

    helm_chart: str | None = None
    """`<namespace>/<name>` of the HelmChart the controller created."""

    storage_namespace: str | None = None
    """Namespace of Helm's release storage of the current release."""

    history: list[Snapshot] | None = None
    """The releases, newest first."""

    last_attempted_release_action: Literal["install", "upgrade"] | None = None
    """The last release action attempted."""

    failures: int | None = None
    """Failures since the last success."""

    install_failures: int | None = None
    """Install failures since the last successful install."""

    upgrade_failures: int | None = None
    """Upgrade failures since the last successful upgrade."""

    last_attempted_revision: str | None = None
    """The chart version of the last attempt."""

    last_attempted_revision_digest: str | None = None
    """Digest of the chart artifact of the last attempt."""

    last_attempted_values_checksum: str | None = None
    """Deprecated: SHA1 of the values of the last attempt."""

    last_release_revision: int | None = None
    """Deprecated: the last successful Helm release revision."""

    last_attempted_config_digest: str | None = None
    """Digest of the values of the last attempt."""

    last_handled_force_at: str | None = None
    """The value of the reconcile.fluxcd.io/forceAt annotation last handled."""

    last_handled_reset_at: str | None = None
    """The value of the reconcile.fluxcd.io/resetAt annotation last handled."""


class HelmRelease(Resource[HelmReleaseSpec, HelmReleaseStatus]):
    """A Helm release installed and kept up to date from a chart source."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "HelmRelease"
    PLURAL: ClassVar[str] = "helmreleases"
    SINGULAR: ClassVar[str] = "helmrelease"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("hr",)
    CATEGORIES: ClassVar[tuple[str, ...]] = ("all", "fluxcd", "fluxcd-helmreleases")
    EXTRA_VERSIONS: ClassVar[tuple[str, ...]] = ("v2beta2",)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        AGE_COLUMN,
        READY_COLUMN,
        STATUS_COLUMN,
    )

    spec: HelmReleaseSpec
    status: HelmReleaseStatus = Field(default_factory=HelmReleaseStatus)
