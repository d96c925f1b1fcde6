"""What an apply, dry-run or prune did, object by object, in Flux's change-set words.

Every entry carries one `ObjectRef` (identity and the resource serving it,
resolved when the object was planned), so the inventory, prune and health
waits that follow need no further discovery.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from sluice_api.kustomize import ResourceInventory
from sluice_api.meta import ObjectId
from sluice_runtime.kube.client import JSON
from sluice_runtime.kube.health import Health
from sluice_runtime.kube.resources import ObjectRef


class Action(StrEnum):
    """What happened to one object."""

    CREATED = "created"
    CONFIGURED = "configured"
    UNCHANGED = "unchanged"
    DELETED = "deleted"
    SKIPPED = "skipped"


CHANGES = (Action.CREATED, Action.CONFIGURED, Action.DELETED)
"""The actions that changed the cluster: what events report."""


@dataclass(frozen=True, slots=True)
class ChangeSetEntry:
    ref: ObjectRef
    action: Action
    reason: str = ""
    """Why an object was skipped or recreated, for logs and events."""
    prunable: bool = True
    """False when the object is annotated so pruning must never delete it; it
    still belongs in the inventory."""
    observed: Health | None = field(default=None, compare=False)
    """Its health in the API's answer to the apply (or in the read, when it was
    unchanged): a health wait starts from it instead of reading it again."""
    resource_version: str = field(default="", compare=False)
    """The live object's, as that answer gave it: a later change is someone else's."""

    @property
    def id(self) -> ObjectId:
        return self.ref.id

    @property
    def subject(self) -> str:
        return self.ref.display

    def __str__(self) -> str:
        return f"{self.subject} {self.action}"


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


def sort_key(entry: ChangeSetEntry) -> tuple[int, str, str, str]:
    oid = entry.id
    return (_KIND_ORDER.get(oid.kind, len(_KIND_ORDER)), oid.kind, oid.namespace, oid.name)


@dataclass
class ChangeSet:
    entries: list[ChangeSetEntry] = field(default_factory=list)

    @classmethod
    def sorted(cls, entries: Iterable[ChangeSetEntry]) -> ChangeSet:
        return cls(sorted(entries, key=sort_key))

    @property
    def changed(self) -> bool:
        return any(e.action in CHANGES for e in self.entries)

    def extend(self, other: ChangeSet | Iterable[ChangeSetEntry]) -> None:
        self.entries.extend(other.entries if isinstance(other, ChangeSet) else other)

    def with_action(self, *actions: Action) -> list[ChangeSetEntry]:
        return [e for e in self.entries if e.action in actions]

    def ids(self) -> set[ObjectId]:
        return {e.id for e in self.entries}

    def observed(self, refs: Iterable[ObjectRef]) -> dict[ObjectRef, Health]:
        """The health the apply showed of those `refs` that are in this set."""
        seen = {e.id: e.observed for e in self.entries if e.observed is not None}
        return {ref: health for ref in refs if (health := seen.get(ref.id)) is not None}

    def versions(self) -> dict[ObjectId, str]:
        """The resourceVersion each object had in the apply's answer (where known)."""
        return {e.id: e.resource_version for e in self.entries if e.resource_version}

    def health_refs(self) -> list[ObjectRef]:
        """What a health wait reads: every object neither skipped nor deleted."""
        return [e.ref for e in self.entries if e.action not in (Action.SKIPPED, Action.DELETED)]

    def to_inventory(self) -> ResourceInventory:
        """The `status.inventory` of an applied set.

        Skipped objects are listed too: they belong to the set, and pruning
        checks their annotations before deleting anything.
        """
        return ResourceInventory.of((e.id, e.ref.version) for e in self.entries)

    def summary(self, *, only_changes: bool = False) -> str:
        """One `Kind/namespace/name action` line per object, like Flux's events."""
        entries = self.with_action(*CHANGES) if only_changes else self.entries
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
