"""The fluxcd.controlplane.io kinds of Flux Operator: ResourceSet and ResourceSetInputProvider.

Flux Operator's v1 schema to the field, so its manifests apply unchanged. A
ResourceSetInputProvider exports input sets (a list of string-keyed maps)
read from a registry, a Git server, an HTTP service or its own spec; a
ResourceSet renders its resource templates once per input set and applies
the result as one inventory. Sluice accepts `OCIRepositoryTag` as another
spelling of `OCIArtifactTag` (the name in Flux Operator's design note), and
adds the provider types `GitBranch` and `GitTag` (plain Git, any server).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import Field

from sluice_api.kustomize import ResourceInventory
from sluice_api.meta import (
    AGE_COLUMN,
    READY_COLUMN,
    STATUS_COLUMN,
    KubeModel,
    LocalObjectReference,
    PrinterColumn,
    ReconcileStatus,
    Resource,
    Timestamp,
)

GROUP = "fluxcd.controlplane.io"
VERSION = "v1"
CATEGORIES = ("all", "fluxcd")

NAME_LABEL = "resourceset.fluxcd.controlplane.io/name"
NAMESPACE_LABEL = "resourceset.fluxcd.controlplane.io/namespace"
RECONCILE_ANNOTATION = f"{GROUP}/reconcile"
"""`disabled` stops reconciling the object (on a ResourceSet or provider) or, on an
object a ResourceSet generates, stops updating it once it exists."""
RECONCILE_EVERY_ANNOTATION = f"{GROUP}/reconcileEvery"
RECONCILE_TIMEOUT_ANNOTATION = f"{GROUP}/reconcileTimeout"
PRUNE_ANNOTATION = f"{GROUP}/prune"
FORCE_ANNOTATION = f"{GROUP}/force"
COPY_FROM_ANNOTATION = f"{GROUP}/copyFrom"
DEFAULT_FILTER_LIMIT = 100


class ResourceSetCondition(StrEnum):
    """Condition types of the fluxcd.controlplane.io kinds."""

    READY = "Ready"


class ResourceSetReason(StrEnum):
    """Reasons Flux Operator gives, and Sluice with it."""

    RECONCILIATION_SUCCEEDED = "ReconciliationSucceeded"
    RECONCILIATION_FAILED = "ReconciliationFailed"
    RECONCILIATION_DISABLED = "ReconciliationDisabled"
    BUILD_FAILED = "BuildFailed"
    HEALTH_CHECK_FAILED = "HealthCheckFailed"
    DEPENDENCY_NOT_READY = "DependencyNotReady"
    INVALID_SPEC = "InvalidSpec"
    INVALID_DEFAULT_VALUES = "InvalidDefaultValues"
    INVALID_EXPORTED_INPUTS = "InvalidExportedInputs"
    UNSUPPORTED = "Unsupported"
    PROGRESSING = "Progressing"


ProviderType = Literal[
    "Static",
    "GitHubBranch",
    "GitHubTag",
    "GitHubPullRequest",
    "GitLabBranch",
    "GitLabTag",
    "GitLabMergeRequest",
    "GitLabEnvironment",
    "AzureDevOpsBranch",
    "AzureDevOpsTag",
    "AzureDevOpsPullRequest",
    "GiteaBranch",
    "GiteaTag",
    "GiteaPullRequest",
    "OCIArtifactTag",
    "OCIRepositoryTag",
    "ACRArtifactTag",
    "ECRArtifactTag",
    "GARArtifactTag",
    "ExternalService",
    "GitBranch",
    "GitTag",
]


class InputFilter(KubeModel):
    """What of the provider's answer is exported."""

    include_branch: str | None = None
    """RE2 regular expression a branch must match."""

    exclude_branch: str | None = None
    """RE2 regular expression a branch must not match."""

    include_tag: str | None = None
    """RE2 regular expression a tag must match."""

    exclude_tag: str | None = None
    """RE2 regular expression a tag must not match."""

    include_environment: str | None = None
    """RE2 regular expression an environment must match."""

    exclude_environment: str | None = None
    """RE2 regular expression an environment must not match."""

    labels: list[str] | None = None
    """Labels a pull or merge request must have."""

    limit: int = DEFAULT_FILTER_LIMIT
    """The most input sets exported; 100 when not set."""

    semver: str | None = None
    """Semantic version range tags must be in; they are then sorted newest first."""


class InputSkip(KubeModel):
    """When a provider's answer is not exported."""

    labels: list[str] | None = None
    """Labels (or `!label`) of a pull request that skip the update."""


class Schedule(KubeModel):
    """A recurring time at which the provider runs."""

    cron: str
    """Five-field cron expression."""

    time_zone: str = "UTC"
    """IANA time zone the cron expression is read in."""

    window: str = "0s"
    """How long after each start the provider may run; 0s means at the start only."""


class NextSchedule(Schedule):
    """The next time the provider runs."""

    when: Timestamp
    """When it runs next (Flux Operator's `status.nextSchedule.when`)."""


class ResourceSetInputProviderSpec(KubeModel):
    """Where a provider's input sets come from."""

    type: ProviderType
    """The kind of source; `OCIRepositoryTag` is another name for `OCIArtifactTag`."""

    url: str | None = Field(default=None, pattern=r"^((http|https|oci|ssh)://.*){0,1}$")
    """HTTP(S), SSH or OCI address of the source; none for Static."""

    service_account_name: str | None = None
    """ServiceAccount for cloud workload identity (not supported by Sluice)."""

    secret_ref: LocalObjectReference | None = None
    """Credentials: an image pull secret for OCI, username/password or token otherwise."""

    cert_secret_ref: LocalObjectReference | None = None
    """Secret with `ca.crt` (and `tls.crt`/`tls.key`) for TLS."""

    insecure: bool = False
    """Allow plain HTTP (ExternalService, OCIArtifactTag)."""

    default_values: dict[str, Any] | None = None
    """Values filled into every exported input set that lacks them."""

    filter: InputFilter | None = None
    """What of the answer is exported."""

    skip: InputSkip | None = None
    """When the answer is not exported."""

    schedule: list[Schedule] | None = None
    """When the provider runs; at its interval when not set."""


class ResourceSetInputProviderStatus(ReconcileStatus):
    """What a provider exported last."""

    exported_inputs: list[dict[str, Any]] | None = None
    """The input sets exported, each with a unique `id`."""

    last_exported_revision: str | None = None
    """`sha256:<hex>` of the exported inputs."""

    next_schedule: NextSchedule | None = None
    """The next time the provider runs, when it has a schedule."""

    last_handled_force_at: str | None = None
    """The force request last handled."""


class ResourceSetInputProvider(
    Resource[ResourceSetInputProviderSpec, ResourceSetInputProviderStatus]
):
    """Exports input sets for ResourceSets from a registry, a Git server or a service."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "ResourceSetInputProvider"
    PLURAL: ClassVar[str] = "resourcesetinputproviders"
    SINGULAR: ClassVar[str] = "resourcesetinputprovider"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("rsip",)
    CATEGORIES: ClassVar[tuple[str, ...]] = CATEGORIES
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        AGE_COLUMN,
        READY_COLUMN,
        STATUS_COLUMN,
    )

    spec: ResourceSetInputProviderSpec
    status: ResourceSetInputProviderStatus = Field(default_factory=ResourceSetInputProviderStatus)


class LabelSelectorRequirement(KubeModel):
    """One requirement of a label selector."""

    key: str
    """The label key."""

    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    """How the label's value relates to `values`."""

    values: list[str] | None = None
    """Values for In and NotIn."""


class LabelSelector(KubeModel):
    """Kubernetes' label selector."""

    match_labels: dict[str, str] | None = None
    """Labels the object must have, with these values."""

    match_expressions: list[LabelSelectorRequirement] | None = None
    """Requirements the object's labels must all meet."""


class InputProviderReference(KubeModel):
    """A provider (or providers, by label) whose inputs a ResourceSet uses."""

    api_version: str | None = None
    """API version of the provider; the ResourceSet's when not set."""

    kind: Literal["ResourceSetInputProvider"]
    """Kind of the provider."""

    name: str | None = None
    """Name of the provider, in the ResourceSet's namespace."""

    selector: LabelSelector | None = None
    """Providers by label, in the ResourceSet's namespace, instead of by name."""


class InputStrategy(KubeModel):
    """How the input sets of several providers are combined."""

    name: Literal["Flatten", "Permute"] = "Flatten"
    """Flatten: every set on its own; Permute: the Cartesian product, keyed by provider."""


class Dependency(KubeModel):
    """An object that must exist (and be ready) before the ResourceSet applies."""

    api_version: str
    """API version of the object."""

    kind: str
    """Kind of the object."""

    name: str
    """Name of the object."""

    namespace: str | None = None
    """Namespace of the object; the ResourceSet's when not set."""

    ready: bool = False
    """Also wait for the object's Ready condition (or readyExpr) to be true."""
    ready_expr: str | None = None
    """CEL expression over `self` deciding readiness instead of Ready."""


class CommonMetadata(KubeModel):
    """Labels and annotations set on every generated object."""

    annotations: dict[str, str] | None = None
    """Annotations to set, overriding those with the same key."""

    labels: dict[str, str] | None = None
    """Labels to set, overriding those with the same key."""


class ResourceSetStep(KubeModel):
    """One stage of a ResourceSet: applied, and healthy, before the next one."""

    name: str
    """Name of the step, unique in the ResourceSet."""

    resources: list[dict[str, Any]] | None = None
    """Object templates of this step."""

    resources_template: str | None = None
    """A multi-document Go template of this step's objects."""


class ResourceSetSpec(KubeModel):
    """Templates of objects, rendered per input set."""

    common_metadata: CommonMetadata | None = None
    """Labels and annotations set on every generated object."""

    inputs: list[dict[str, Any]] | None = None
    """In-line input sets."""

    inputs_from: list[InputProviderReference] | None = None
    """Providers whose exported inputs are added to the in-line ones."""

    input_strategy: InputStrategy | None = None
    """How several providers' inputs are combined; Flatten when not set."""

    resources: list[dict[str, Any]] | None = None
    """Object templates (`<< >>` Go template actions in their strings)."""

    resources_template: str | None = None
    """A Go template rendering multi-document YAML, per input set."""

    steps: list[ResourceSetStep] | None = None
    """Stages applied in order, each healthy before the next; instead of
    resources and resourcesTemplate."""

    depends_on: list[Dependency] | None = None
    """Objects that must exist (and be ready) first."""

    service_account_name: str | None = None
    """ServiceAccount to impersonate when applying."""

    wait: bool = False
    """Wait for every applied object to be healthy."""


class HistoryEntry(KubeModel):
    """One reconcile outcome, by digest of what was applied."""

    digest: str
    """`sha256:<hex>` of the objects applied."""

    first_reconciled: Timestamp
    """When these objects were first applied."""

    last_reconciled: Timestamp
    """When they were last applied."""

    last_reconciled_duration: str
    """How long the last reconcile took."""

    last_reconciled_status: str
    """The reason of the last reconcile's outcome."""

    total_reconciliations: int
    """How many reconciles applied these objects."""

    metadata: dict[str, str] | None = None
    """How many input sets and objects there were."""


class ResourceSetStatus(ReconcileStatus):
    """What a ResourceSet applied last."""

    inventory: ResourceInventory | None = None
    """The objects applied, garbage-collected when they leave the set."""

    last_applied_revision: str | None = None
    """`sha256:<hex>` of the objects last applied."""

    history: list[HistoryEntry] | None = None
    """The last reconcile outcomes, newest first."""


class ResourceSet(Resource[ResourceSetSpec, ResourceSetStatus]):
    """Generates and applies objects from templates and input sets."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "ResourceSet"
    PLURAL: ClassVar[str] = "resourcesets"
    SINGULAR: ClassVar[str] = "resourceset"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("rset",)
    CATEGORIES: ClassVar[tuple[str, ...]] = CATEGORIES
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        AGE_COLUMN,
        READY_COLUMN,
        STATUS_COLUMN,
    )

    spec: ResourceSetSpec = Field(default_factory=ResourceSetSpec)
    status: ResourceSetStatus = Field(default_factory=ResourceSetStatus)
