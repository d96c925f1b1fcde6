"""The Kustomization's status: what it last applied, and the inventory of applied
objects that pruning and deletion work from (a ResourceSet keeps one too).
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import Field

from sluice_api.meta import KubeModel, ObjectId, ReconcileStatus


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
