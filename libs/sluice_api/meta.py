"""Building blocks shared by every Sluice kind.

Flux's kinds are assembled from the same pieces (object metadata, metav1
conditions, object references, artifacts, Go durations) and so are ours.
Keeping them here means a field such as `status.conditions` has one schema,
one set of validation rules and one docstring in every generated CRD. Go durations
and RFC 3339 times are read and written in `times`, re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Generic, Literal, Self, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel

from sluice_api.times import format_duration as format_duration
from sluice_api.times import format_time as format_time
from sluice_api.times import parse_duration as parse_duration
from sluice_api.times import parse_time as parse_time

JSON = dict[str, Any]
"""An object, or part of one, as the API server sends it: the one alias for raw JSON."""

FINALIZER = "finalizers.fluxcd.io"
"""Finalizer put on every object a controller owns resources for."""

RECONCILE_REQUESTED_AT_ANNOTATION = "reconcile.fluxcd.io/requestedAt"
"""Changing this annotation's value asks for an immediate reconcile."""

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
# Flux does not accept hours for the network timeouts of sources and providers.
TIMEOUT_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m))+$"


def _in_range(text: str) -> str:
    # The pattern admits any number of digits; Go's ParseDuration (so Flux)
    # refuses what overflows, and so does the model, making such a spec
    # Stalled as invalid rather than failing each reconcile.
    parse_duration(text)
    return text


Duration = Annotated[str, StringConstraints(pattern=DURATION_PATTERN), AfterValidator(_in_range)]
"""A Go duration as Flux accepts it in a spec, e.g. `30s`, `5m`, `1h30m`."""

TimeoutDuration = Annotated[
    str, StringConstraints(pattern=TIMEOUT_PATTERN), AfterValidator(_in_range)
]
"""A Go duration without hours, as Flux accepts it for network timeouts."""

Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time"})]
"""An RFC 3339 timestamp, kept as the string the API server sent."""

Digest = Annotated[
    str, StringConstraints(pattern=r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$")
]
"""A content digest, `<algorithm>:<checksum>`, e.g. `sha256:<hex>`."""


@dataclass(frozen=True)
class CELRule:
    """One of Flux's CEL validation rules (`x-kubernetes-validations`).

    The CRD carries it for API servers that evaluate CEL (1.25 and later); the
    installer strips it for older ones, and the controller owning the kind
    checks the same condition itself, stalling with the same message, so the
    rule holds on every server.
    """

    rule: str
    message: str


def cel_rules(*rules: CELRule) -> dict[str, Any]:
    """The `json_schema_extra` that puts `rules` on a model's schema node."""
    return {"x-kubernetes-validations": [{"rule": r.rule, "message": r.message} for r in rules]}


class KubeModel(BaseModel):
    """Base of every API model: snake_case in Python, Flux's camelCase on the wire."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        # Attribute docstrings become the CRD descriptions `kubectl explain` shows.
        use_attribute_docstrings=True,
        defer_build=True,
    )


class ObjectMeta(KubeModel):
    """The subset of Kubernetes object metadata the controllers read and write.

    Collections default to None rather than empty: serialized into a merge
    patch, an empty `finalizers` list would remove every finalizer.
    """

    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None
    deletion_timestamp: Timestamp | None = None
    creation_timestamp: Timestamp | None = None
    owner_references: list[dict[str, Any]] | None = None


class Condition(KubeModel):
    """Condition contains details for one aspect of the current state of this
    API resource (the schema of Kubernetes' metav1.Condition)."""

    type: Annotated[
        str,
        StringConstraints(
            max_length=316,
            pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        ),
    ]
    """Type of condition in CamelCase or in foo.example.com/CamelCase."""

    status: Literal["True", "False", "Unknown"]
    """Status of the condition, one of True, False, Unknown."""

    observed_generation: Annotated[int, Field(ge=0)] | None = None
    """The .metadata.generation that the condition was set based upon."""

    last_transition_time: Timestamp
    """The last time the condition transitioned from one status to another."""

    reason: Annotated[
        str,
        StringConstraints(
            min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
        ),
    ]
    """A programmatic identifier in CamelCase for the condition's last transition."""

    message: Annotated[str, StringConstraints(max_length=32768)]
    """A human readable message about the transition; may be empty."""


class ConditionType(StrEnum):
    """The kstatus condition types every Sluice kind reports."""

    READY = "Ready"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"


class Reason(StrEnum):
    """Reasons shared by every controller (Flux's `meta` package)."""

    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PROGRESSING = "Progressing"
    PROGRESSING_WITH_RETRY = "ProgressingWithRetry"
    SUSPENDED = "Suspended"
    DEPENDENCY_NOT_READY = "DependencyNotReady"
    RECONCILIATION_SUCCEEDED = "ReconciliationSucceeded"
    RECONCILIATION_FAILED = "ReconciliationFailed"
    GATE_CLOSED = "GateClosed"


class LocalObjectReference(KubeModel):
    """A reference to an object in the same namespace as the referrer."""

    name: str
    """Name of the referent."""


class NamespacedObjectReference(KubeModel):
    """A reference to an object in any namespace."""

    name: str
    """Name of the referent."""

    namespace: str | None = None
    """Namespace of the referent; defaults to the namespace of the referrer."""


class NamespacedObjectKindReference(KubeModel):
    """A typed reference to an object in any namespace."""

    api_version: str | None = None
    """API version of the referent; the preferred version when not set."""

    kind: str
    """Kind of the referent."""

    name: str
    """Name of the referent."""

    namespace: str | None = None
    """Namespace of the referent; defaults to the namespace of the referrer."""


class SecretKeyReference(KubeModel):
    """A reference to one key of a Secret in the referrer's namespace."""

    name: str
    """Name of the Secret."""

    key: str | None = None
    """Key in the Secret's data; a well-known default applies when not set."""


class Artifact(KubeModel):
    """The output of a source reconciliation: a file served over HTTP."""

    path: str
    """Path of the file relative to the root of the artifact storage."""

    url: str
    """HTTP address the source-controller serves the file at."""

    revision: str
    """Human-readable identifier in the origin, e.g. `main@sha1:<hex>`."""

    digest: Digest | None = None
    """Digest of the file, `<algorithm>:<checksum>`; consumers verify it."""

    last_update_time: Timestamp
    """When the artifact was last updated."""

    size: int | None = None
    """Size of the file in bytes."""

    metadata: dict[str, str] | None = None
    """Upstream information such as OCI annotations."""


class ReconcileStatus(KubeModel):
    """Status fields every reconciled kind has."""

    observed_generation: int = -1
    """The last generation the controller reconciled; -1 before the first."""

    conditions: list[Condition] = Field(default_factory=list)
    """Conditions of the object, in kstatus form."""

    last_handled_reconcile_at: str | None = None
    """The value of the reconcile.fluxcd.io/requestedAt annotation last handled."""


@dataclass(frozen=True, kw_only=True)
class PrinterColumn:
    """A column `kubectl get` prints for a kind."""

    name: str
    type: Literal["string", "date", "integer", "number", "boolean"]
    json_path: str
    description: str = ""
    priority: int = 0


AGE_COLUMN = PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp")
READY_COLUMN = PrinterColumn(
    name="Ready", type="string", json_path='.status.conditions[?(@.type=="Ready")].status'
)
STATUS_COLUMN = PrinterColumn(
    name="Status", type="string", json_path='.status.conditions[?(@.type=="Ready")].message'
)

ARTIFACT_REVISION_COLUMN = PrinterColumn(
    name="Revision", type="string", json_path=".status.artifact.revision"
)
"""Sluice shows the revision a source serves, which Flux only shows in `flux get`."""

SpecT = TypeVar("SpecT", bound=KubeModel)
StatusT = TypeVar("StatusT", bound=ReconcileStatus)


class Resource(KubeModel, Generic[SpecT, StatusT]):
    """A custom resource: Kubernetes metadata, a spec and a status.

    Subclasses bind the spec and status models and declare, in class
    variables, what the CRD needs to serve them.
    """

    GROUP: ClassVar[str]
    VERSION: ClassVar[str]
    """The storage version, served first."""
    KIND: ClassVar[str]
    PLURAL: ClassVar[str]
    SINGULAR: ClassVar[str]
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ()
    CATEGORIES: ClassVar[tuple[str, ...]] = ()
    EXTRA_VERSIONS: ClassVar[tuple[str, ...]] = ()
    """Older versions also served, with the same schema as the storage version."""
    NAMESPACED: ClassVar[bool] = True
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = ()

    api_version: str = ""
    """The versioned schema of this representation of the object."""

    kind: str = ""
    """The REST resource this object represents."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: SpecT
    status: StatusT

    def model_post_init(self, context: Any, /) -> None:
        # Objects built in Python carry their type, like those read from the API.
        if not self.api_version:
            self.api_version = self.api_version_str()
        if not self.kind:
            self.kind = self.KIND

    @classmethod
    def api_version_str(cls) -> str:
        """The `apiVersion` of the storage version, `group/version`."""
        return f"{cls.GROUP}/{cls.VERSION}"

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> Self:
        """Parse an object as the API server returns it."""
        return cls.model_validate(obj)

    def to_obj(self) -> dict[str, Any]:
        """The object as the API server expects it: JSON types, camelCase, no nulls."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    @property
    def namespace(self) -> str:
        """The object's namespace; "default" where it names none, as the API
        server would put it."""
        return self.metadata.namespace or "default"

    @property
    def key(self) -> str:
        """`namespace/name`, the key objects are queued and cached by."""
        return f"{self.metadata.namespace or ''}/{self.metadata.name}"


@dataclass(frozen=True, slots=True, order=True)
class ObjectId:
    """An object's identity across API versions: what inventories record.

    The core group and a cluster-scoped object's namespace are empty strings,
    as in the inventory id `<namespace>_<name>_<group>_<kind>`.
    """

    group: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectId:
        api_version = str(obj.get("apiVersion") or "")
        group = api_version.rpartition("/")[0]
        meta = obj.get("metadata") or {}
        return cls(
            group=group,
            kind=str(obj.get("kind") or ""),
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
        )

    @classmethod
    def from_inventory_id(cls, inventory_id: str) -> ObjectId:
        """Parse `<namespace>_<name>_<group>_<kind>` (no Kubernetes name contains `_`)."""
        parts = inventory_id.split("_")
        if len(parts) != 4 or not parts[1] or not parts[3]:
            raise ValueError(f"malformed inventory id {inventory_id!r}")
        namespace, name, group, kind = parts
        return cls(group=group, kind=kind, namespace=namespace, name=name)

    @property
    def inventory_id(self) -> str:
        return f"{self.namespace}_{self.name}_{self.group}_{self.kind}"

    @property
    def display(self) -> str:
        """Flux's change-set subject: `Kind/namespace/name`, `Kind/name` when cluster-scoped."""
        if self.namespace:
            return f"{self.kind}/{self.namespace}/{self.name}"
        return f"{self.kind}/{self.name}"

    def __str__(self) -> str:
        return self.display
