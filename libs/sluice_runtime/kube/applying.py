"""Server-side apply of a set of manifests, the way Flux's ssa.ResourceManager does it.

The kustomize-controller (and later others) hands over a built set of
objects and needs to know, per object, whether it was created, configured,
left unchanged or skipped, so it can record an inventory, emit one event
listing real changes and prune what left the set. Decisions follow Flux:

- Drift is decided by a server-side dry-run apply compared with the live
  object (labels, annotations, and everything but metadata and status).
  Unchanged objects are not sent again, so idle reconciles do not bump
  resourceVersions or wake other controllers' watches.
- Stages: cluster definitions (CustomResourceDefinitions, Namespaces,
  ClusterRoles) are applied and waited for first, then class definitions
  (kinds named `*Class`), then everything else, so custom resources and
  namespaced objects find their kind and namespace served.
- The whole set is dry-run before anything is written, so one invalid
  object leaves the cluster untouched. Objects that cannot be dry-run yet
  (their CRD or Namespace is in the same set) are deferred, not failed.
- Per-object annotations (`kustomize.toolkit.fluxcd.io/...`):
  `ssa: Ignore` skips; `ssa: IfNotPresent` creates but never updates;
  `ssa: Override` (also the default) first takes over fields that
  kubectl-style managers own and drops kubectl's last-applied annotation,
  so a later apply can remove fields edited in by hand; `ssa: Merge` leaves
  other managers' fields alone. `reconcile: disabled` skips an object that
  exists and keeps it out of pruning. `force: enabled` (or `force=True`)
  deletes and re-creates an object whose change the API calls immutable.
- Every request goes through the client given, which may impersonate a
  tenant: RBAC decides, and a 403 is reported against the object.
"""

from __future__ import annotations

import asyncio
import copy
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sluice_runtime.describing import explain
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.discovery import RestMapper, UnknownKind, split_api_version
from sluice_runtime.kube.errors import (
    ApiError,
    ApiUnavailable,
    Conflict,
    Invalid,
    KubeError,
    NotFound,
    is_transient,
)
from sluice_runtime.kube.health import (
    Health,
    HealthReport,
    Target,
    compute_status,
    wait_for_health,
)
from sluice_runtime.kube.ignoring import IgnoreRule, without_ignored
from sluice_runtime.kube.resources import ResourceType

ANNOTATION_PREFIX = "kustomize.toolkit.fluxcd.io"
SSA_ANNOTATION = f"{ANNOTATION_PREFIX}/ssa"
FORCE_ANNOTATION = f"{ANNOTATION_PREFIX}/force"
PRUNE_ANNOTATION = f"{ANNOTATION_PREFIX}/prune"
RECONCILE_ANNOTATION = f"{ANNOTATION_PREFIX}/reconcile"
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"
DISABLED = "disabled"
ENABLED = "enabled"

# What pruning never deletes unless told otherwise (label or annotation key: value).
DEFAULT_PRUNE_EXCLUSIONS: Mapping[str, str] = {
    PRUNE_ANNOTATION: DISABLED,
    RECONCILE_ANNOTATION: DISABLED,
}

# Managers whose fields `ssa: Override` takes over, as (name prefix, operation):
# `kubectl apply` (client-side, and server-side with --force-conflicts),
# `kubectl edit/patch/scale/label/...`, and kubectl's pre-SSA migration entry.
TAKEOVER_MANAGERS: tuple[tuple[str, str], ...] = (
    ("kubectl", "Apply"),
    ("kubectl", "Update"),
    ("before-first-apply", "Update"),
)

# Metadata the API server owns: never part of what we apply.
_SERVER_METADATA = (
    "managedFields",
    "resourceVersion",
    "generation",
    "uid",
    "creationTimestamp",
    "selfLink",
)


class SSAPolicy(StrEnum):
    """Values of the `kustomize.toolkit.fluxcd.io/ssa` annotation."""

    OVERRIDE = "Override"
    MERGE = "Merge"
    IF_NOT_PRESENT = "IfNotPresent"
    IGNORE = "Ignore"


class Action(StrEnum):
    """What happened to one object, in Flux's change-set words."""

    CREATED = "created"
    CONFIGURED = "configured"
    UNCHANGED = "unchanged"
    DELETED = "deleted"
    SKIPPED = "skipped"


# -- identity -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class ObjectId:
    """An object's identity across versions: what inventories record."""

    group: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectId:
        group, _ = split_api_version(str(obj.get("apiVersion") or ""))
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
        if self.namespace:
            return f"{self.kind}/{self.namespace}/{self.name}"
        return f"{self.kind}/{self.name}"

    def __str__(self) -> str:
        return self.display


# -- results ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChangeSetEntry:
    id: ObjectId
    version: str
    action: Action
    # Why an object was skipped or recreated, for logs and events.
    reason: str = ""
    # False when the object is annotated so pruning must never delete it; it
    # still belongs in the inventory.
    prunable: bool = True
    # Its health in the API's answer to the apply (or in the read, when it was
    # unchanged): a health wait starts from it instead of reading it again.
    observed: Health | None = field(default=None, compare=False)

    @property
    def subject(self) -> str:
        return self.id.display

    def __str__(self) -> str:
        return f"{self.subject} {self.action}"


@dataclass
class ChangeSet:
    entries: list[ChangeSetEntry] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(
            e.action in (Action.CREATED, Action.CONFIGURED, Action.DELETED) for e in self.entries
        )

    def extend(self, other: ChangeSet | Iterable[ChangeSetEntry]) -> None:
        self.entries.extend(other.entries if isinstance(other, ChangeSet) else other)

    def with_action(self, *actions: Action) -> list[ChangeSetEntry]:
        return [e for e in self.entries if e.action in actions]

    def observed(self, targets: Iterable[Target]) -> dict[Target, Health]:
        """The health the apply showed of those `targets` that are in this set."""
        seen = {e.id: e.observed for e in self.entries if e.observed is not None}
        known: dict[Target, Health] = {}
        for target in targets:
            rt, namespace, name = target
            health = seen.get(ObjectId(rt.group, rt.kind, namespace or "", name))
            if health is not None:
                known[target] = health
        return known

    def inventory(self) -> list[dict[str, str]]:
        """The Kustomization `status.inventory.entries` of an applied set: `{id, v}`.

        Skipped objects are listed too: they belong to the set, and pruning
        checks their annotations before deleting anything.
        """
        return [{"id": e.id.inventory_id, "v": e.version} for e in self.entries]

    def summary(self, *, only_changes: bool = False) -> str:
        """One `Kind/namespace/name action` line per object, like Flux's events."""
        entries = self.entries
        if only_changes:
            entries = self.with_action(Action.CREATED, Action.CONFIGURED, Action.DELETED)
        return "\n".join(str(e) for e in entries)

    def __str__(self) -> str:
        return self.summary()


@dataclass(frozen=True, slots=True)
class Deferred:
    """An object the dry-run could not judge yet, and why."""

    id: ObjectId
    reason: str


@dataclass(frozen=True, slots=True)
class Preview:
    """What applying one object would do, as the server-side dry-run tells it."""

    id: ObjectId
    existing: JSON | None
    """The live object, None when it would be created."""
    dry_run: JSON | None
    """The object as the apply would leave it; None when it is not applied (`note`)."""
    note: str = ""
    """Why it was not dry-run: skipped, deferred, or to be re-created."""


# -- errors -----------------------------------------------------------------------


class ApplyError(KubeError):
    """The set could not be applied (or pruned); the message names the objects."""


class ValidationFailed(ApplyError):
    """The set itself is malformed: missing identity fields, duplicates."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("invalid objects: " + "; ".join(errors))


class ApplyFailed(ApplyError):
    """The API refused an object (or it never became ready).

    `subject` and `message` describe the first failure; `failures` holds all
    of them (the first included) and `changeset` what was done before the
    error, so the caller can still record it.
    """

    def __init__(
        self,
        subject: str,
        message: str,
        *,
        status: int | None = None,
        failures: Sequence[ApplyFailed] = (),
        changeset: ChangeSet | None = None,
    ) -> None:
        self.subject = subject
        self.message = message
        self.hint = ""
        """What to do about it (from the kind of refusal), said once for the set."""
        self.status = status
        self.transient = False
        """The API failed, not the object (unreachable, overloaded): retry soon."""
        self.failures: list[ApplyFailed] = list(failures) or [self]
        self.changeset = changeset or ChangeSet()
        self.dry_run = False
        """True when a dry-run refused the set: nothing of it was applied, except
        the earlier stages in `changeset` (Namespaces and CRDs of the set, which
        must exist before the objects in them can be dry-run)."""
        super().__init__()

    def __str__(self) -> str:
        lines = [f"{f.subject}: {f.message}" for f in self.failures]
        hints = {f.hint for f in self.failures}
        if len(hints) == 1 and "" not in hints:
            # Every object was refused alike: say what to do once, at the end.
            return "\n".join(lines) + f"; {hints.pop()}"
        return "\n".join(
            f"{line}; {f.hint}" if f.hint else line
            for line, f in zip(lines, self.failures, strict=True)
        )

    @property
    def forbidden(self) -> bool:
        return any(f.status == 403 for f in self.failures)

    @classmethod
    def of(cls, subject: str, what: str | None, error: BaseException) -> ApplyFailed:
        """`error` against `subject`; `what` names the operation when the caller's
        own message (dry-run failed, apply failed, prune failed) does not."""
        status = error.status if isinstance(error, ApiError) else None
        message, hint = explain(error)
        failed = cls(subject, f"{what}: {message}" if what else message, status=status)
        failed.hint = hint
        failed.transient = is_transient(error)
        return failed

    @classmethod
    def combine(cls, failures: Sequence[ApplyFailed], changeset: ChangeSet) -> ApplyFailed:
        first = failures[0]
        combined = cls(
            first.subject,
            first.message,
            status=first.status,
            failures=failures,
            changeset=changeset,
        )
        # One object the API refused is enough to wait for the retry interval.
        combined.transient = all(f.transient for f in failures)
        return combined


# -- immutability -------------------------------------------------------------------

# How the API (built-in validation, CEL rules, admission webhooks) says a
# change can only be made by re-creating the object.
_IMMUTABLE = re.compile(
    r"\bimmutable\b"  # "field is immutable", "spec is immutable after creation", CEL
    r"|may not change fields other than"  # Pod spec
    r"|updates to \S+ spec for fields other than",  # StatefulSet spec
    re.IGNORECASE,
)
_QUOTED = re.compile(r'"[^"]*"')


def is_immutable_error(error: BaseException) -> bool:
    """True when re-creating the object is the only way to make the change.

    Flux (like `kubectl replace --force`) treats every 409 and 422 as
    immutable; a plain schema error would then delete a live object and
    fail to create it again. We need the API's own words for it: a 422/409
    whose message says immutable, or any refusal (a webhook's 400/403) that
    says so.
    """
    if not isinstance(error, ApiError):
        return False
    if isinstance(error, Invalid | Conflict) or error.status in (400, 403):
        # Quoted parts are names and values ('ConfigMap "immutable-settings"'),
        # never the API's verdict.
        return bool(_IMMUTABLE.search(_QUOTED.sub('""', str(error))))
    return False


# -- helpers ----------------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _annotation(obj: Mapping[str, Any] | None, key: str) -> str:
    if obj is None:
        return ""
    return str((_meta(obj).get("annotations") or {}).get(key) or "")


def _any_in_metadata(obj: Mapping[str, Any] | None, selector: Mapping[str, str]) -> bool:
    """Flux's rule: any key: value of `selector` among the labels or annotations."""
    if obj is None:
        return False
    labels = _meta(obj).get("labels") or {}
    annotations = _meta(obj).get("annotations") or {}
    return any(labels.get(k) == v or annotations.get(k) == v for k, v in selector.items())


def _ssa_policy(desired: Mapping[str, Any], existing: Mapping[str, Any] | None) -> SSAPolicy:
    for obj in (desired, existing):
        value = _annotation(obj, SSA_ANNOTATION).lower()
        for policy in SSAPolicy:
            if value == policy.value.lower():
                return policy
    return SSAPolicy.OVERRIDE


def _wants_force(desired: Mapping[str, Any], existing: Mapping[str, Any] | None) -> bool:
    return any(_annotation(o, FORCE_ANNOTATION).lower() == ENABLED for o in (desired, existing))


def _reconcile_disabled(obj: Mapping[str, Any] | None) -> bool:
    return _annotation(obj, RECONCILE_ANNOTATION).lower() == DISABLED


def _prunable(desired: Mapping[str, Any], existing: Mapping[str, Any] | None) -> bool:
    return not any(_any_in_metadata(o, DEFAULT_PRUNE_EXCLUSIONS) for o in (desired, existing))


def _comparable(obj: Mapping[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    meta = _meta(obj)
    rest = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    return (meta.get("labels") or {}, meta.get("annotations") or {}, rest)


def has_drifted(existing: Mapping[str, Any], dry_run: Mapping[str, Any]) -> bool:
    """Would applying change the live object?

    Only what an apply owns counts: labels, annotations and everything outside
    metadata and status. Status, managedFields, resourceVersion, generation,
    uid and timestamps are the server's and other controllers'; what servers
    put there differs between versions, so comparing them would make the
    answer depend on the server.
    """
    return _comparable(existing) != _comparable(dry_run)


def is_cluster_definition(obj: Mapping[str, Any]) -> bool:
    """Flux's first stage: what other objects need to exist before they can be applied."""
    api_version = str(obj.get("apiVersion") or "")
    kind = obj.get("kind")
    return (
        (kind == "CustomResourceDefinition" and api_version.startswith("apiextensions.k8s.io/"))
        or (kind == "Namespace" and api_version == "v1")
        or (kind == "ClusterRole" and api_version.startswith("rbac.authorization.k8s.io/"))
    )


def is_class_definition(obj: Mapping[str, Any]) -> bool:
    """StorageClass, IngressClass, PriorityClass...: referenced by name from other objects."""
    return str(obj.get("kind") or "").endswith("Class")


def stage_of(obj: Mapping[str, Any]) -> int:
    if is_cluster_definition(obj):
        return 0
    if is_class_definition(obj):
        return 1
    return 2


# The order in which kinds are listed in change sets (kustomize's and Flux's).
_KIND_ORDER = {
    kind: index
    for index, kind in enumerate(
        (
            "Namespace",
            "ResourceQuota",
            "StorageClass",
            "CustomResourceDefinition",
            "ServiceAccount",
            "PodSecurityPolicy",
            "Role",
            "ClusterRole",
            "RoleBinding",
            "ClusterRoleBinding",
            "ConfigMap",
            "Secret",
            "Endpoints",
            "Service",
            "LimitRange",
            "PriorityClass",
            "PersistentVolume",
            "PersistentVolumeClaim",
            "Deployment",
            "StatefulSet",
            "CronJob",
            "PodDisruptionBudget",
        )
    )
}


def _sort_key(entry: ChangeSetEntry) -> tuple[int, str, str, str]:
    return (
        _KIND_ORDER.get(entry.id.kind, len(_KIND_ORDER)),
        entry.id.kind,
        entry.id.namespace,
        entry.id.name,
    )


def _pod_specs(obj: Mapping[str, Any]) -> list[Any]:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return []
    if obj.get("kind") == "Pod":
        return [spec]
    if obj.get("kind") == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    return [((spec.get("template") or {}).get("spec")) or {}]


def set_protocol_defaults(obj: JSON) -> None:
    """Write the default `protocol: TCP` into Service and container ports.

    Kubernetes before 1.22 rejects a server-side apply whose port list omits
    `protocol`, a key of that list (structured-merge-diff issue 130); TCP is
    what the API would default it to anyway.
    """
    ports: list[Any] = []
    if obj.get("kind") == "Service" and obj.get("apiVersion") == "v1":
        ports += (obj.get("spec") or {}).get("ports") or []
    for pod in _pod_specs(obj):
        if not isinstance(pod, Mapping):
            continue
        for container in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
            if isinstance(container, Mapping):
                ports += container.get("ports") or []
    for port in ports:
        if isinstance(port, dict) and not port.get("protocol"):
            port["protocol"] = "TCP"


def _crd_kinds(objects: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """(apiVersion, kind) -> CRD name, for every custom kind the set defines."""
    defined: dict[tuple[str, str], str] = {}
    for obj in objects:
        if obj.get("kind") != "CustomResourceDefinition":
            continue
        spec = obj.get("spec") or {}
        group = spec.get("group") or ""
        kind = (spec.get("names") or {}).get("kind") or ""
        versions = [v.get("name") for v in spec.get("versions") or [] if isinstance(v, dict)]
        if spec.get("version"):  # apiextensions v1beta1
            versions.append(spec["version"])
        for version in versions:
            defined[(f"{group}/{version}", kind)] = _meta(obj).get("name") or ""
    return defined


def _namespaces(objects: Iterable[Mapping[str, Any]]) -> set[str]:
    return {
        str(_meta(o).get("name"))
        for o in objects
        if o.get("kind") == "Namespace" and o.get("apiVersion") == "v1"
    }


# -- the manager ----------------------------------------------------------------------


@dataclass
class _Plan:
    """One object after discovery: where it lives and what we will send."""

    id: ObjectId
    version: str
    rt: ResourceType
    obj: JSON
    # The whole object when drift ignore rules took paths out of `obj`: a
    # re-creation applies it all, as rules have no effect on creation.
    whole: JSON | None = None


@dataclass
class _Checked:
    """An object read and dry-run: everything needed to decide its Action."""

    plan: _Plan
    existing: JSON | None
    dry_run: JSON | None = None
    # Why it is not applied ("" when it is).
    skip: str = ""
    # The API refused the change as immutable and re-creation is allowed.
    recreate: bool = False


class ResourceManager:
    """Applies, dry-runs and prunes sets of objects with one field manager."""

    def __init__(
        self,
        client: KubeClient,
        mapper: RestMapper,
        *,
        field_manager: str,
        owner_labels: Mapping[str, str],
        concurrency: int = 8,
        wait_interval: float = 2.0,
        ignore_rules: Sequence[IgnoreRule] = (),
    ) -> None:
        self.client = client
        self.ignore_rules = tuple(ignore_rules)
        self.mapper = mapper
        self.field_manager = field_manager
        self.owner_labels = dict(owner_labels)
        self.concurrency = max(concurrency, 1)
        self.wait_interval = wait_interval

    # -- validation ---------------------------------------------------------

    def validate(self, objects: Sequence[Mapping[str, Any]]) -> None:
        """Every object has apiVersion, kind and metadata.name, and appears once."""
        errors: list[str] = []
        seen: set[ObjectId] = set()
        for index, obj in enumerate(objects, start=1):
            if not isinstance(obj, Mapping):
                errors.append(f"object #{index} is not a mapping")
                continue
            oid = ObjectId.of(obj)
            where = f"{oid.kind or '<no kind>'}/{oid.name or '<no name>'} (object #{index})"
            missing = [
                what
                for what, value in (
                    ("apiVersion", obj.get("apiVersion")),
                    ("kind", obj.get("kind")),
                    ("metadata.name", _meta(obj).get("name")),
                )
                if not isinstance(value, str) or not value
            ]
            if missing:
                errors.append(f"{where}: {', '.join(missing)} not set")
                continue
            if oid in seen:
                errors.append(f"{oid.display} is defined more than once")
            seen.add(oid)
        if errors:
            raise ValidationFailed(errors)

    # -- apply ---------------------------------------------------------------

    async def apply_all_staged(
        self,
        objects: Sequence[Mapping[str, Any]],
        *,
        force: bool = False,
        dry_run_first: bool = True,
        wait_timeout: float = 60.0,
    ) -> ChangeSet:
        """Apply the set in stages; raise ValidationFailed or ApplyFailed.

        On ApplyFailed, `error.changeset` lists what was applied before it.
        """
        self.validate(objects)
        checked: dict[ObjectId, _Checked] = {}
        if dry_run_first:
            checked, _ = await self._check_all(objects, force=force)
        defined = _crd_kinds(objects)
        stages: list[list[Mapping[str, Any]]] = [[], [], []]
        for obj in objects:
            stages[stage_of(obj)].append(obj)
        changeset = ChangeSet()
        for index, stage in enumerate(stages):
            if not stage:
                continue
            # The dry-run of the whole set is this stage's dry-run too, unless an
            # earlier stage changed something (a CRD's schema, say) since.
            reuse = {} if changeset.changed else checked
            done = await self._apply_stage(
                stage,
                force=force,
                defined=defined,
                checked=reuse,
                wait_timeout=wait_timeout,
                so_far=changeset,
            )
            changeset.extend(done)
            if index == 0:
                await self._wait_for_definitions(done, timeout=wait_timeout, so_far=changeset)
        return changeset

    async def _apply_stage(
        self,
        objects: Sequence[Mapping[str, Any]],
        *,
        force: bool,
        defined: Mapping[tuple[str, str], str],
        checked: Mapping[ObjectId, _Checked],
        wait_timeout: float,
        so_far: ChangeSet,
    ) -> ChangeSet:
        limit = asyncio.Semaphore(self.concurrency)

        async def check(obj: Mapping[str, Any]) -> _Checked | ApplyFailed:
            async with limit:
                try:
                    found = await self._check(obj, force=force, defined=defined, wait=wait_timeout)
                except ApplyFailed as error:
                    return error
                assert isinstance(found, _Checked)  # nothing is deferred now
                return found

        # Objects the up-front dry-run could not judge (their Namespace or CRD
        # came with the set) are all dry-run before any of them is applied.
        unchecked = [o for o in objects if ObjectId.of(o) not in checked]
        found = await asyncio.gather(*(check(o) for o in unchecked))
        rejected = [r for r in found if isinstance(r, ApplyFailed)]
        if rejected:
            error = ApplyFailed.combine(rejected, ChangeSet(list(so_far.entries)))
            error.dry_run = True
            raise error
        checks = {**checked}
        checks.update(
            (ObjectId.of(o), r)
            for o, r in zip(unchecked, found, strict=True)
            if isinstance(r, _Checked)
        )

        async def one(obj: Mapping[str, Any]) -> ChangeSetEntry | ApplyFailed:
            async with limit:
                try:
                    return await self._apply_checked(
                        checks[ObjectId.of(obj)], wait_timeout=wait_timeout
                    )
                except ApplyFailed as error:
                    return error

        results = await asyncio.gather(*(one(o) for o in objects))
        done = ChangeSet(
            sorted((r for r in results if isinstance(r, ChangeSetEntry)), key=_sort_key)
        )
        failures = [r for r in results if isinstance(r, ApplyFailed)]
        if failures:
            partial = ChangeSet([*so_far.entries, *done.entries])
            raise ApplyFailed.combine(failures, partial)
        return done

    async def _wait_for_definitions(
        self, done: ChangeSet, *, timeout: float, so_far: ChangeSet
    ) -> None:
        # CRDs must be Established before their kinds are served, Namespaces
        # Active before objects can be created in them.
        targets, known = await self.health_targets(done)
        if not targets:
            return
        report = await wait_for_health(
            self.client,
            targets,
            timeout=timeout,
            interval=min(self.wait_interval, 0.5),
            known=known,
        )
        if not report.healthy:
            failures = [
                ApplyFailed(
                    o.subject,
                    f"not ready after apply ({'timed out' if report.timed_out else 'failed'}): "
                    f"{o.health.status}: {o.health.message}",
                )
                for o in report.unhealthy
            ]
            raise ApplyFailed.combine(failures, ChangeSet(list(so_far.entries)))

    async def _resource_for_entry(self, entry: ChangeSetEntry) -> ResourceType:
        api_version = f"{entry.id.group}/{entry.version}" if entry.id.group else entry.version
        try:
            return await self.mapper.resource_for(api_version, entry.id.kind)
        except UnknownKind as error:
            raise ApplyFailed(entry.subject, str(error)) from None

    async def _plan(
        self, obj: Mapping[str, Any], *, defined: Mapping[tuple[str, str], str], wait: float
    ) -> _Plan:
        """Resolve the kind, fix the namespace and add our labels to a copy."""
        oid = ObjectId.of(obj)
        api_version = str(obj["apiVersion"])
        rt = await self._resolve(api_version, oid, defined=defined, wait=wait)
        desired: JSON = copy.deepcopy(dict(obj))
        meta = desired.setdefault("metadata", {})
        if rt.namespaced and not oid.namespace:
            raise ApplyFailed(
                oid.display, f"{oid.kind} is namespaced but metadata.namespace is not set"
            )
        if not rt.namespaced and oid.namespace:
            # Cluster-scoped: the API ignores a namespace; the inventory must too.
            meta.pop("namespace", None)
            oid = ObjectId(oid.group, oid.kind, "", oid.name)
        labels = meta.get("labels") or {}
        meta["labels"] = {**labels, **self.owner_labels}
        # The API rejects or overwrites these on apply; they are not intent.
        for key in _SERVER_METADATA:
            meta.pop(key, None)
        # Status is written by controllers through its own endpoint, never applied.
        desired.pop("status", None)
        set_protocol_defaults(desired)
        return _Plan(oid, split_api_version(api_version)[1], rt, desired)

    async def _resolve(
        self,
        api_version: str,
        oid: ObjectId,
        *,
        defined: Mapping[tuple[str, str], str],
        wait: float,
    ) -> ResourceType:
        # A kind whose CRD was just established can take a moment to appear in
        # discovery; other unknown kinds fail at once.
        deadline = time.monotonic() + (min(wait, 10.0) if (api_version, oid.kind) in defined else 0)
        while True:
            try:
                return await self.mapper.resource_for(api_version, oid.kind)
            except UnknownKind as error:
                if time.monotonic() >= deadline:
                    raise ApplyFailed(oid.display, str(error)) from None
            except (ApiError, ApiUnavailable) as error:
                raise ApplyFailed.of(oid.display, "discovery failed", error) from None
            await asyncio.sleep(0.25)

    async def _get(self, plan: _Plan) -> JSON | None:
        try:
            return await self.client.get(plan.rt, plan.id.name, plan.id.namespace or None)
        except NotFound:
            return None
        except (ApiError, ApiUnavailable) as error:
            raise ApplyFailed.of(plan.id.display, "cannot read it", error) from None

    def _skip(self, plan: _Plan, existing: JSON | None) -> str:
        """Why this object is not applied, or "" when it is."""
        policy = _ssa_policy(plan.obj, existing)
        if policy == SSAPolicy.IGNORE:
            return f"{SSA_ANNOTATION}: {SSAPolicy.IGNORE}"
        if existing is not None and policy == SSAPolicy.IF_NOT_PRESENT:
            return f"{SSA_ANNOTATION}: {SSAPolicy.IF_NOT_PRESENT} and it exists"
        if existing is not None and (
            _reconcile_disabled(plan.obj) or _reconcile_disabled(existing)
        ):
            return f"{RECONCILE_ANNOTATION}: {DISABLED}"
        return ""

    async def _dry_run(self, plan: _Plan) -> JSON:
        return await self.client.apply(
            plan.rt, plan.obj, field_manager=self.field_manager, force=True, dry_run=True
        )

    async def _check(
        self,
        obj: Mapping[str, Any],
        *,
        force: bool,
        defined: Mapping[tuple[str, str], str],
        wait: float = 0,
        namespaces: Iterable[str] | None = None,
    ) -> _Checked | Deferred:
        """Read the live object and dry-run ours against it.

        With `namespaces` (the ones the set creates), what cannot be judged
        before earlier stages ran is returned as Deferred instead of failing.
        """
        deferrable = namespaces is not None
        oid = ObjectId.of(obj)
        try:
            plan = await self._plan(obj, defined=defined, wait=wait)
        except ApplyFailed:
            crd = defined.get((str(obj["apiVersion"]), oid.kind))
            if deferrable and crd:
                return Deferred(oid, f"its CustomResourceDefinition {crd} is in the set")
            raise
        existing = await self._get(plan)
        skip = self._skip(plan, existing)
        if skip:
            return _Checked(plan, existing, skip=skip)
        if existing is not None and self.ignore_rules:
            # Updates only, as in Flux: the ignored paths are neither compared
            # nor applied, so the values other managers set there stay.
            plan.whole, plan.obj = plan.obj, without_ignored(plan.obj, self.ignore_rules)
        try:
            dry_run = await self._dry_run(plan)
        except NotFound as error:
            if deferrable and plan.id.namespace in (namespaces or ()):
                return Deferred(oid, f"its Namespace {plan.id.namespace} is in the set")
            raise ApplyFailed.of(plan.id.display, None, error) from None
        except (ApiError, ApiUnavailable) as error:
            if (
                existing is not None
                and (force or _wants_force(plan.obj, existing))
                and is_immutable_error(error)
            ):
                return _Checked(plan, existing, recreate=True)
            raise ApplyFailed.of(plan.id.display, None, error) from None
        return _Checked(plan, existing, dry_run=dry_run)

    async def _apply_checked(self, check: _Checked, *, wait_timeout: float) -> ChangeSetEntry:
        plan, existing = check.plan, check.existing
        subject = plan.id.display
        prunable = _prunable(plan.obj, existing)

        def entry(action: Action, reason: str = "", live: JSON | None = None) -> ChangeSetEntry:
            observed = compute_status(live) if live is not None else None
            return ChangeSetEntry(plan.id, plan.version, action, reason, prunable, observed)

        if check.skip:
            return entry(Action.SKIPPED, check.skip)
        dry_run = check.dry_run
        if check.recreate and existing is not None:
            await self._delete_and_wait(plan, existing, timeout=wait_timeout)
            existing = None
            if plan.whole is not None:
                plan.obj = plan.whole
            try:
                dry_run = await self._dry_run(plan)
            except (ApiError, ApiUnavailable) as error:
                raise ApplyFailed.of(subject, "dry-run after re-creation failed", error) from None

        took_over = False
        if existing is not None and _ssa_policy(plan.obj, existing) == SSAPolicy.OVERRIDE:
            took_over = await self._take_over(plan, existing)
        if (
            existing is not None
            and dry_run is not None
            and not took_over
            and not has_drifted(existing, dry_run)
        ):
            return entry(Action.UNCHANGED, live=existing)
        try:
            applied = await self.client.apply(
                plan.rt, plan.obj, field_manager=self.field_manager, force=True
            )
        except (ApiError, ApiUnavailable) as error:
            raise ApplyFailed.of(subject, None, error) from None
        if existing is None:
            reason = "recreated: immutable field changed" if check.recreate else ""
            return entry(Action.CREATED, reason, live=applied)
        # Taking over kubectl's fields rewrites managedFields only: whether the
        # object was configured is what the apply changed of its content.
        if not has_drifted(existing, applied):
            return entry(Action.UNCHANGED, live=applied)
        return entry(Action.CONFIGURED, live=applied)

    async def _delete_and_wait(self, plan: _Plan, existing: JSON, *, timeout: float) -> None:
        subject = plan.id.display
        uid = _meta(existing).get("uid")
        try:
            await self.client.delete(
                plan.rt,
                plan.id.name,
                namespace=plan.id.namespace or None,
                propagation="Background",
                precondition_uid=str(uid) if uid else None,
            )
        except NotFound:
            return
        except (ApiError, ApiUnavailable) as error:
            raise ApplyFailed.of(
                subject, "immutable field changed, delete for re-creation failed", error
            ) from None
        deadline = time.monotonic() + timeout
        while True:
            current = await self._get(plan)
            if current is None or _meta(current).get("uid") != uid:
                return
            if time.monotonic() >= deadline:
                finalizers = _meta(current).get("finalizers") or []
                raise ApplyFailed(
                    subject,
                    f"immutable field changed; deleted for re-creation but still present "
                    f"after {timeout:.0f}s (finalizers: {', '.join(finalizers) or 'none'})",
                )
            await asyncio.sleep(min(self.wait_interval, 0.5))

    async def _take_over(self, plan: _Plan, existing: JSON) -> bool:
        """`ssa: Override`: make kubectl-owned fields ours, drop kubectl's annotation.

        After this, our next apply owns (and can remove) fields that were
        added with `kubectl apply/edit`; returns whether anything changed.
        """
        ops: list[JSON] = []
        if LAST_APPLIED_ANNOTATION in (_meta(existing).get("annotations") or {}):
            key = LAST_APPLIED_ANNOTATION.replace("~", "~0").replace("/", "~1")
            ops.append({"op": "remove", "path": f"/metadata/annotations/{key}"})
        entries = _meta(existing).get("managedFields") or []
        merged = take_over_managed_fields(entries, self.field_manager)
        if merged is not None:
            ops.append({"op": "replace", "path": "/metadata/managedFields", "value": merged})
        if not ops:
            return False
        # The resourceVersion test makes a concurrent writer win instead of us
        # overwriting its managedFields with a stale list.
        version = _meta(existing).get("resourceVersion")
        if version:
            ops.insert(0, {"op": "test", "path": "/metadata/resourceVersion", "value": version})
        try:
            await self.client.request(
                "PATCH",
                plan.rt.path(namespace=plan.id.namespace or None, name=plan.id.name),
                query=[("fieldManager", self.field_manager)],
                body=ops,
                content_type="application/json-patch+json",
            )
        except (ApiError, ApiUnavailable) as error:
            raise ApplyFailed.of(
                plan.id.display, "taking over fields from kubectl failed", error
            ) from None
        return True

    # -- dry-run ---------------------------------------------------------------

    async def dry_run_all(
        self, objects: Sequence[Mapping[str, Any]], *, force: bool = False
    ) -> list[Deferred]:
        """Dry-run every object; raise ApplyFailed listing every object the API rejects.

        Objects whose kind comes from a CRD in the set, or whose Namespace is
        created by the set, cannot be judged before those exist: they are
        returned as deferred. Skipped objects (Ignore, IfNotPresent on an
        existing object, reconcile disabled) are not dry-run, as they will
        not be applied. A change that will be forced through by re-creation
        does not fail the dry-run.
        """
        self.validate(objects)
        _, deferred = await self._check_all(objects, force=force)
        return deferred

    async def preview_all(
        self, objects: Sequence[Mapping[str, Any]], *, force: bool = False
    ) -> list[Preview]:
        """Dry-run every object and return, in order, the live object beside the result.

        The same checks as `apply_all_staged` makes before it writes, so that a
        person can see what the controller would change (`sluice diff`).
        Raises ValidationFailed, or ApplyFailed naming every refused object.
        """
        self.validate(objects)
        checked, deferred = await self._check_all(objects, force=force)
        waiting = {item.id: item for item in deferred}
        previews = []
        for obj in objects:
            oid = ObjectId.of(obj)
            check = checked.get(oid)
            if check is None:
                reason = waiting[oid].reason if oid in waiting else "not dry-run"
                previews.append(Preview(oid, None, None, f"deferred: {reason}"))
                continue
            note = check.skip or (
                "to be re-created: immutable fields changed" if check.recreate else ""
            )
            previews.append(Preview(check.plan.id, check.existing, check.dry_run, note))
        return previews

    async def _check_all(
        self, objects: Sequence[Mapping[str, Any]], *, force: bool
    ) -> tuple[dict[ObjectId, _Checked], list[Deferred]]:
        defined = _crd_kinds(objects)
        namespaces = _namespaces(objects)
        limit = asyncio.Semaphore(self.concurrency)

        async def one(obj: Mapping[str, Any]) -> _Checked | Deferred | ApplyFailed:
            async with limit:
                try:
                    return await self._check(
                        obj, force=force, defined=defined, namespaces=namespaces
                    )
                except ApplyFailed as error:
                    return error

        results = await asyncio.gather(*(one(o) for o in objects))
        failures = [r for r in results if isinstance(r, ApplyFailed)]
        if failures:
            error = ApplyFailed.combine(failures, ChangeSet())
            error.dry_run = True
            raise error
        checked = {
            ObjectId.of(o): r
            for o, r in zip(objects, results, strict=True)
            if isinstance(r, _Checked)
        }
        return checked, [r for r in results if isinstance(r, Deferred)]

    # -- prune -----------------------------------------------------------------

    async def delete_all(
        self,
        ids: Sequence[ObjectId],
        *,
        owner_labels: Mapping[str, str] | None = None,
        skip_annotations: Mapping[str, str] = DEFAULT_PRUNE_EXCLUSIONS,
    ) -> ChangeSet:
        """Delete what left the set, if it is still ours; Namespaces and CRDs last.

        Each object is read first: it is deleted only if it carries every
        owner label (someone may have adopted it since) and none of the
        `skip_annotations` (key: value, as label or annotation). Objects
        already gone are reported as skipped. Deletion is background: owned
        objects are left to the garbage collector.
        """
        owners = dict(self.owner_labels if owner_labels is None else owner_labels)
        ordered: list[list[ObjectId]] = [[], [], []]
        for oid in ids:
            if oid.kind == "Namespace" and oid.group == "":
                ordered[2].append(oid)
            elif oid.kind == "CustomResourceDefinition" and oid.group == "apiextensions.k8s.io":
                ordered[1].append(oid)
            else:
                ordered[0].append(oid)
        limit = asyncio.Semaphore(self.concurrency)

        async def one(oid: ObjectId) -> ChangeSetEntry | ApplyFailed:
            async with limit:
                try:
                    return await self._delete_one(oid, owners, skip_annotations)
                except ApplyFailed as error:
                    return error

        changeset = ChangeSet()
        failures: list[ApplyFailed] = []
        for group in ordered:
            results = await asyncio.gather(*(one(oid) for oid in group))
            changeset.extend(
                sorted((r for r in results if isinstance(r, ChangeSetEntry)), key=_sort_key)
            )
            failures += [r for r in results if isinstance(r, ApplyFailed)]
        if failures:
            raise ApplyFailed.combine(failures, changeset)
        return changeset

    async def _delete_one(
        self, oid: ObjectId, owners: Mapping[str, str], skip_annotations: Mapping[str, str]
    ) -> ChangeSetEntry:
        subject = oid.display
        try:
            rt = await self.mapper.resource_for_kind(oid.group, oid.kind)
        except UnknownKind:
            # The kind is not served any more (its CRD was deleted): so are its objects.
            return ChangeSetEntry(oid, "", Action.SKIPPED, "not found: kind no longer served")
        except (ApiError, ApiUnavailable) as error:
            raise ApplyFailed.of(subject, "discovery failed", error) from None

        def entry(action: Action, reason: str = "") -> ChangeSetEntry:
            return ChangeSetEntry(oid, rt.version, action, reason)

        namespace = oid.namespace or None
        try:
            live = await self.client.get(rt, oid.name, namespace)
        except NotFound:
            return entry(Action.SKIPPED, "not found")
        except (ApiError, ApiUnavailable) as error:
            raise ApplyFailed.of(subject, "read before delete failed", error) from None
        labels = _meta(live).get("labels") or {}
        if any(labels.get(k) != v for k, v in owners.items()):
            return entry(Action.SKIPPED, "not owned: owner labels do not match")
        if _any_in_metadata(live, skip_annotations):
            return entry(Action.SKIPPED, "pruning disabled by annotation")
        uid = _meta(live).get("uid")
        try:
            await self.client.delete(
                rt,
                oid.name,
                namespace=namespace,
                propagation="Background",
                precondition_uid=str(uid) if uid else None,
            )
        except NotFound:
            return entry(Action.SKIPPED, "not found")
        except Conflict:
            # The uid precondition failed: a new object took the name; not ours to judge.
            return entry(Action.SKIPPED, "replaced by another object before deletion")
        except (ApiError, ApiUnavailable) as error:
            raise ApplyFailed.of(subject, None, error) from None
        return entry(Action.DELETED)

    # -- health ------------------------------------------------------------------

    async def wait_for_set(
        self,
        changeset: ChangeSet,
        *,
        timeout: float,
        interval: float | None = None,
        cancel: asyncio.Event | None = None,
    ) -> HealthReport:
        """Wait for every applied (not skipped) object of `changeset` to be healthy."""
        targets, known = await self.health_targets(changeset)
        return await wait_for_health(
            self.client,
            targets,
            timeout=timeout,
            interval=self.wait_interval if interval is None else interval,
            cancel=cancel,
            concurrency=self.concurrency,
            known=known,
        )

    async def health_targets(
        self, changeset: ChangeSet
    ) -> tuple[list[Target], dict[Target, Health]]:
        """The objects of `changeset` a health wait reads (neither skipped nor
        deleted), and the health their apply already showed."""
        targets: list[Target] = []
        for e in changeset.entries:
            if e.action in (Action.SKIPPED, Action.DELETED):
                continue
            rt = await self._resource_for_entry(e)
            targets.append((rt, e.id.namespace or None, e.id.name))
        return targets, changeset.observed(targets)


def take_over_managed_fields(
    entries: Sequence[Mapping[str, Any]], manager: str
) -> list[JSON] | None:
    """managedFields with kubectl-style managers' fields merged into `manager`'s Apply entry.

    Returns None when no entry matches. The API server keys entries by
    manager and operation, so two Apply entries for one manager would
    shadow each other: matching field sets are merged into one entry.
    """

    def matches(entry: Mapping[str, Any]) -> bool:
        name = str(entry.get("manager") or "")
        return (
            not entry.get("subresource")
            and bool(_owned_fields(entry))
            and any(
                name.startswith(prefix) and entry.get("operation") == operation
                for prefix, operation in TAKEOVER_MANAGERS
            )
        )

    if not any(matches(e) for e in entries):
        return None
    ours: JSON | None = None
    kept: list[JSON] = []
    for entry in entries:
        if (
            entry.get("manager") == manager
            and entry.get("operation") == "Apply"
            and not entry.get("subresource")
        ):
            ours = copy.deepcopy(dict(entry))
        elif not matches(entry):
            kept.append(copy.deepcopy(dict(entry)))
    for entry in entries:
        if not matches(entry):
            continue
        if ours is None:
            ours = {
                **copy.deepcopy(dict(entry)),
                "manager": manager,
                "operation": "Apply",
                "fieldsV1": _owned_fields(entry),
            }
        else:
            ours["fieldsV1"] = _merge_fields(ours.get("fieldsV1") or {}, _owned_fields(entry))
    assert ours is not None
    return [ours, *kept]


def _owned_fields(entry: Mapping[str, Any]) -> JSON:
    """An entry's fields an apply can own: all but status.

    Servers before 1.22 record a write to the status subresource as an
    Update of the object itself (no `subresource` in the entry); status is
    never applied, so such fields are neither ours to take nor drift.
    """
    fields = entry.get("fieldsV1")
    if not isinstance(fields, Mapping):
        return {}
    return {k: copy.deepcopy(v) for k, v in fields.items() if k != "f:status"}


def _merge_fields(a: Mapping[str, Any], b: Mapping[str, Any]) -> JSON:
    """Union of two FieldsV1 tries (nested maps whose leaves are `{}`)."""
    merged: JSON = copy.deepcopy(dict(a))
    for key, value in b.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge_fields(merged[key], value)
        else:
            merged.setdefault(key, copy.deepcopy(value))
    return merged
