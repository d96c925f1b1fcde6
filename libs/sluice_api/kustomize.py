"""The kustomize.toolkit.fluxcd.io Kustomization: applying a source to the cluster.

Flux's v1 schema field for field, plus Sluice's optional `spec.gates`. The
labels and annotations the kustomize-controller reads on applied objects are
part of that API too, so they are named here once.

v1beta2 and v1beta1 are served too, with conversion `None`: the API server
only rewrites `apiVersion`, so every version's schema is the same superset.
The fields only the old versions had (`validation`, `patchesStrategicMerge`,
`patchesJson6902`) are kept in it, which makes every round trip lossless, and
the controller honours them whatever version an object was written in.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, StringConstraints

from sluice_api.meta import (
    AGE_COLUMN,
    READY_COLUMN,
    STATUS_COLUMN,
    CELRule,
    Duration,
    KubeModel,
    LocalObjectReference,
    NamespacedObjectKindReference,
    ObjectId,
    PrinterColumn,
    ReconcileStatus,
    Resource,
    SecretKeyReference,
    cel_rules,
)

GROUP = "kustomize.toolkit.fluxcd.io"
VERSION = "v1"

NAME_LABEL = f"{GROUP}/name"
"""Label on every applied object: the name of the Kustomization that owns it."""
NAMESPACE_LABEL = f"{GROUP}/namespace"
"""Label on every applied object: the namespace of the Kustomization that owns it."""
SSA_ANNOTATION = f"{GROUP}/ssa"
"""Per-object apply policy: Override, Merge, IfNotPresent or Ignore."""
FORCE_ANNOTATION = f"{GROUP}/force"
"""`enabled`: re-create the object when an immutable field changed."""
PRUNE_ANNOTATION = f"{GROUP}/prune"
"""`disabled`: never garbage-collect the object."""
RECONCILE_ANNOTATION = f"{GROUP}/reconcile"
"""`disabled`: do not apply the object."""
SUBSTITUTE_ANNOTATION = f"{GROUP}/substitute"
"""`disabled`: skip `${var}` substitution in the object."""


_PRESERVE = Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
AnyJSON = Annotated[Any, _PRESERVE]
"""Any JSON value, kept by the API server as it is."""
AnyObject = Annotated[dict[str, Any], _PRESERVE]
"""A JSON object of any shape, kept by the API server as it is."""


class KustomizationCondition(StrEnum):
    """Condition types of a Kustomization."""

    READY = "Ready"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"
    HEALTHY = "Healthy"
    APPROVED = "Approved"
    """Sluice: False while a gate in spec.gates is closed."""


class KustomizationReason(StrEnum):
    """Reasons the kustomize-controller gives for its conditions."""

    RECONCILIATION_SUCCEEDED = "ReconciliationSucceeded"
    RECONCILIATION_FAILED = "ReconciliationFailed"
    PROGRESSING = "Progressing"
    PROGRESSING_WITH_RETRY = "ProgressingWithRetry"
    ARTIFACT_FAILED = "ArtifactFailed"
    BUILD_FAILED = "BuildFailed"
    HEALTH_CHECK_FAILED = "HealthCheckFailed"
    PRUNE_FAILED = "PruneFailed"
    DEPENDENCY_NOT_READY = "DependencyNotReady"
    ACCESS_DENIED = "AccessDenied"
    GATE_CLOSED = "GateClosed"
    SUCCEEDED = "Succeeded"


class CrossNamespaceSourceReference(KubeModel):
    """The source whose artifact a Kustomization applies."""

    api_version: str | None = None
    """API version of the referent."""

    kind: Literal["OCIRepository", "GitRepository", "Bucket", "ExternalArtifact"]
    """Kind of the referent."""

    name: str
    """Name of the referent."""

    namespace: str | None = None
    """Namespace of the referent; the Kustomization's namespace when not set."""


class DependencyReference(KubeModel):
    """A Kustomization that must be ready before this one is applied."""

    name: str
    """Name of the referent."""

    namespace: str | None = None
    """Namespace of the referent; the Kustomization's namespace when not set."""

    ready_expr: str | None = None
    """CEL expression that decides the dependency's readiness instead of Ready."""


class Selector(KubeModel):
    """Selects objects; an object must match every field that is set."""

    group: str | None = None
    """API group of the objects."""

    version: str | None = None
    """API version of the objects."""

    kind: str | None = None
    """Kind of the objects."""

    namespace: str | None = None
    """Namespace of the objects."""

    name: str | None = None
    """Name of the objects."""

    annotation_selector: str | None = None
    """A label selector expression matched against the objects' annotations."""

    label_selector: str | None = None
    """A label selector expression matched against the objects' labels."""


class Patch(KubeModel):
    """A strategic merge or JSON 6902 patch and the objects it applies to."""

    patch: str
    """The patch document, inline YAML."""

    target: Selector | None = None
    """The objects to patch; a strategic merge patch names its target itself."""


class Image(KubeModel):
    """An image name, tag or digest to replace in the built manifests."""

    name: str
    """The image name to match, without tag."""

    new_name: str | None = None
    """Replaces the name."""

    new_tag: str | None = None
    """Replaces the tag."""

    digest: str | None = None
    """Replaces the tag with a digest; newTag is ignored when set."""


class JSON6902Operation(KubeModel):
    """One operation of a JSON 6902 patch."""

    op: Literal["test", "remove", "add", "replace", "move", "copy"]
    """The operation."""

    path: str
    """JSON pointer to the location the operation acts on."""

    from_: str | None = Field(default=None, alias="from")
    """JSON pointer to the source location of move and copy."""

    value: AnyJSON = None
    """The value of add, replace and test; any JSON."""


class JSON6902Patch(KubeModel):
    """(v1beta1, v1beta2) A JSON 6902 patch and the objects it applies to."""

    patch: list[JSON6902Operation]
    """The operations, in order."""

    target: Selector
    """The objects to patch."""


class CustomHealthCheck(KubeModel):
    """CEL expressions that assess the health of objects of one kind."""

    api_version: str
    """API version of the objects."""

    kind: str
    """Kind of the objects."""

    current: str
    """CEL expression true when the object is healthy."""

    in_progress: str | None = None
    """CEL expression true while the object is still progressing."""

    failed: str | None = None
    """CEL expression true when the object has failed."""


class DriftIgnoreRule(KubeModel):
    """Paths the controller neither corrects nor reports as drift."""

    paths: list[str]
    """JSON pointers (RFC 6901) to ignore."""

    target: Selector | None = None
    """The objects the rule applies to; every object when not set."""


class CommonMetadata(KubeModel):
    """Labels and annotations set on every applied object."""

    annotations: dict[str, str] | None = None
    """Annotations to set, overriding those with the same key."""

    labels: dict[str, str] | None = None
    """Labels to set, overriding those with the same key."""


class SubstituteReference(KubeModel):
    """A ConfigMap or Secret whose data provides substitution variables."""

    kind: Literal["Secret", "ConfigMap"]
    """Kind of the referent."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    """Name of the referent, in the Kustomization's namespace."""

    optional: bool = False
    """Proceed without its variables when the referent does not exist."""


class PostBuild(KubeModel):
    """What to do with the manifests after kustomize built them."""

    substitute: dict[str, str] | None = None
    """Variables to substitute for `${name}` in the manifests."""

    substitute_from: list[SubstituteReference] | None = None
    """ConfigMaps and Secrets whose data keys are variables, in order."""

    substitute_strategy: Literal["WithVariables", "Always"] | None = None
    """(Flux 2.9) `WithVariables` (the default) substitutes only when at least
    one variable is defined; `Always` substitutes even without any, so
    `${var:=default}` takes its default."""


class Decryption(KubeModel):
    """How to decrypt encrypted Secrets before applying them."""

    provider: Literal["sops"]
    """The decryption engine."""

    service_account_name: str | None = None
    """ServiceAccount to authenticate to cloud KMS services with."""

    secret_ref: LocalObjectReference | None = None
    """Secret with the private keys (age, OpenPGP) or KMS credentials."""


KUBECONFIG_ONE_OF = (
    "exactly one of spec.kubeConfig.configMapRef or spec.kubeConfig.secretRef must be specified"
)
KUBECONFIG_RULES = (
    CELRule("has(self.configMapRef) || has(self.secretRef)", KUBECONFIG_ONE_OF),
    CELRule("!has(self.configMapRef) || !has(self.secretRef)", KUBECONFIG_ONE_OF),
)


class KubeConfigReference(KubeModel):
    """Where to find a kubeconfig for a remote cluster: a Secret, or (Flux 2.7) a
    ConfigMap describing a cloud cluster reached with workload identity."""

    model_config = ConfigDict(json_schema_extra=cel_rules(*KUBECONFIG_RULES))

    secret_ref: SecretKeyReference | None = None
    """Secret holding the kubeconfig; key `value` or `value.yaml` when not set."""

    config_map_ref: LocalObjectReference | None = None
    """(Flux 2.7) ConfigMap with `provider`, `cluster` and `address` of a cloud
    cluster reached with workload identity. Sluice refuses it (Stalled): it has
    no cloud identity providers yet."""


class KustomizationSpec(KubeModel):
    """How to build manifests from a source and apply them."""

    source_ref: CrossNamespaceSourceReference
    """The source whose artifact is built and applied."""

    path: str | None = None
    """Directory in the artifact with a kustomization.yaml or plain manifests;
    the root of the artifact when not set."""

    interval: Duration
    """How often to reconcile, even without a new revision."""

    retry_interval: Duration | None = None
    """How soon to retry after a failure; the interval when not set."""

    timeout: Duration | None = None
    """Timeout for the apply and the health checks; the interval when not set."""

    prune: bool = False
    """Delete objects that are no longer in the built manifests. Flux v1 requires
    it; v1beta1 manifests (the kustomize-controller design's own) leave it out."""

    deletion_policy: Literal["MirrorPrune", "Delete", "WaitForTermination", "Orphan"] | None = None
    """What happens to applied objects when the Kustomization is deleted;
    MirrorPrune (the default) deletes them when prune is true."""

    force: bool = False
    """Re-create objects whose immutable fields changed."""

    wait: bool = False
    """Wait for every applied object to be ready; healthChecks are ignored."""

    suspend: bool = False
    """Stop reconciling this object; a reconcile under way finishes."""

    depends_on: list[DependencyReference] | None = None
    """Kustomizations that must be ready before this one is applied."""

    health_checks: list[NamespacedObjectKindReference] | None = None
    """Objects whose health decides the Healthy condition."""

    health_check_exprs: list[CustomHealthCheck] | None = None
    """CEL health checks for custom resources, used with wait or healthChecks."""

    target_namespace: Annotated[str, StringConstraints(min_length=1, max_length=63)] | None = None
    """Namespace to set on every namespaced object."""

    name_prefix: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    """Prefix for the names of all objects."""

    name_suffix: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    """Suffix for the names of all objects."""

    patches: list[Patch] | None = None
    """Strategic merge and JSON 6902 patches to apply to the built objects."""

    images: list[Image] | None = None
    """Image names, tags or digests to replace."""

    components: list[str] | None = None
    """Paths to kustomize components, relative to path."""

    ignore_missing_components: bool = False
    """Leave out components that do not exist instead of failing."""

    common_metadata: CommonMetadata | None = None
    """Labels and annotations to set on every object."""

    post_build: PostBuild | None = None
    """Variable substitution after the build."""

    decryption: Decryption | None = None
    """Decrypt SOPS-encrypted Secrets before applying them."""

    service_account_name: str | None = None
    """ServiceAccount to impersonate for every apply, prune and health read."""

    kube_config: KubeConfigReference | None = None
    """Apply to a remote cluster with this kubeconfig."""

    drift_ignore_rules: list[DriftIgnoreRule] | None = None
    """Fields to leave alone when correcting drift."""

    ignore: list[DriftIgnoreRule] | None = None
    """(Flux 2.9) JSON pointers the server-side apply neither sets nor corrects,
    e.g. replicas an autoscaler owns: the same rules as driftIgnoreRules, and
    applied with them."""

    build_metadata: list[Literal["originAnnotations", "transformerAnnotations"]] | None = None
    """(Flux 2.8) kustomize `buildMetadata` options for the build, as if the
    kustomization.yaml listed them: annotations naming each object's origin
    and transformers."""

    gates: list[LocalObjectReference] | None = None
    """Sluice: Gates that must all be open before anything is applied."""

    validation: Literal["none", "client", "server"] | None = None
    """(v1beta1, v1beta2) When the built objects are validated: `server` (the
    default) dry-runs the whole set on the API server before anything is applied;
    `client` and `none` check each object locally, then dry-run and apply stage
    by stage (CRDs and Namespaces first), so an earlier stage can be applied
    before a later one is refused. The API server validates every object before
    it is applied either way."""

    patches_strategic_merge: list[AnyObject] | None = None
    """(v1beta1, v1beta2) Strategic merge patches, each naming its target object;
    applied like `patches` entries without a target."""

    patches_json6902: list[JSON6902Patch] | None = None
    """(v1beta1, v1beta2) JSON 6902 patches; applied like `patches` entries."""


class ResourceRef(KubeModel):
    """An applied object."""

    id: str
    """`<namespace>_<name>_<group>_<kind>`, empty segments for cluster-scoped
    objects and the core group."""

    version: str = Field(alias="v")
    """API version of the object."""

    @property
    def object_id(self) -> ObjectId:
        return ObjectId.from_inventory_id(self.id)


class ResourceInventory(KubeModel):
    """The objects a Kustomization applied."""

    entries: list[ResourceRef]
    """The applied objects."""

    @classmethod
    def of(cls, entries: Iterable[tuple[ObjectId, str]]) -> ResourceInventory:
        """An inventory of `(id, version)` pairs, one entry per id (the last wins),
        sorted by inventory id so that status does not change with apply order."""
        versions = {oid.inventory_id: version for oid, version in entries}
        return cls.model_validate(
            {"entries": [{"id": k, "v": v} for k, v in sorted(versions.items())]}
        )

    def ids(self) -> set[ObjectId]:
        return {entry.object_id for entry in self.entries}

    def items(self) -> list[tuple[ObjectId, str]]:
        """`(id, version)` of every entry, the shape `of` takes."""
        return [(entry.object_id, entry.version) for entry in self.entries]


class KustomizationStatus(ReconcileStatus):
    """Observed state of a Kustomization."""

    last_applied_revision: str | None = None
    """The source revision last applied successfully."""

    last_applied_origin_revision: str | None = None
    """The origin revision (e.g. org.opencontainers.image.revision) last applied."""

    last_attempted_revision: str | None = None
    """The source revision of the last attempt, successful or not."""

    inventory: ResourceInventory | None = None
    """The objects applied successfully, pruned when they leave the manifests."""


class Kustomization(Resource[KustomizationSpec, KustomizationStatus]):
    """Builds manifests from a source artifact and applies them to the cluster."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "Kustomization"
    PLURAL: ClassVar[str] = "kustomizations"
    SINGULAR: ClassVar[str] = "kustomization"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("ks",)
    EXTRA_VERSIONS: ClassVar[tuple[str, ...]] = ("v1beta2", "v1beta1")
    CATEGORIES: ClassVar[tuple[str, ...]] = ("all", "fluxcd", "fluxcd-appliers")
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        AGE_COLUMN,
        READY_COLUMN,
        STATUS_COLUMN,
        PrinterColumn(name="Revision", type="string", json_path=".status.lastAppliedRevision"),
    )

    spec: KustomizationSpec
    status: KustomizationStatus = Field(default_factory=KustomizationStatus)
