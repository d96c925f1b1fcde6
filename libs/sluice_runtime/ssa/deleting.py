"""Prune: deleting what left the set, if it is still ours, Namespaces and CRDs last."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sluice_api.meta import ObjectId
from sluice_runtime import failpoints
from sluice_runtime.kube.discovery import UnknownKind
from sluice_runtime.kube.errors import ApiError, ApiUnavailable, Conflict, NotFound
from sluice_runtime.kube.resources import ObjectRef
from sluice_runtime.ssa import normalizing, policy
from sluice_runtime.ssa.changeset import Action, ChangeSet, ChangeSetEntry
from sluice_runtime.ssa.checking import Checker
from sluice_runtime.ssa.errors import ApplyFailed, gather


class Deleter(Checker):
    async def delete_all(
        self,
        ids: Iterable[ObjectId],
        *,
        owner_labels: Mapping[str, str] | None = None,
        skip_annotations: Mapping[str, str] = policy.DEFAULT_PRUNE_EXCLUSIONS,
    ) -> ChangeSet:
        """Delete what left the set, if it is still ours; Namespaces and CRDs last.

        Each object is read first: it is deleted only if it carries every
        owner label (someone may have adopted it since) and none of the
        `skip_annotations` (key: value, as label or annotation). Objects
        already gone are skipped; those whose kind is no longer served are left
        out. Deletion is background: owned objects are left to the garbage
        collector.
        """
        owners = dict(self.owner_labels if owner_labels is None else owner_labels)
        ordered: list[list[ObjectId]] = [[], [], []]
        for oid in sorted(set(ids)):
            ordered[normalizing.prune_stage_of(oid)].append(oid)
        limit = self._limit()

        async def one(oid: ObjectId) -> ChangeSetEntry | None:
            ref = await self._ref_of(oid)
            if ref is None:
                return None
            entry = await self._delete_one(ref, owners, skip_annotations)
            if entry.action is Action.DELETED:
                failpoints.hit("ssa.prune.mid-prune")
            return entry

        changeset = ChangeSet()
        failures: list[ApplyFailed] = []
        for stage in ordered:
            done, failed = await gather(stage, one, limit=limit)
            changeset.extend(ChangeSet.sorted(entry for _, entry in done if entry is not None))
            failures += failed
        if failures:
            raise ApplyFailed.combine(failures, changeset)
        return changeset

    async def _ref_of(self, oid: ObjectId) -> ObjectRef | None:
        """The served resource of an inventory id, None when its kind is not served any
        more (its CRD was deleted): then neither are its objects, and nothing is left
        to delete."""
        try:
            rt = await self.mapper.resource_for_kind(oid.group, oid.kind)
        except UnknownKind:
            return None
        except (ApiError, ApiUnavailable) as error:
            raise ApplyFailed.of(oid.display, "discovery failed", error) from None
        return ObjectRef(oid, rt)

    async def _delete_one(
        self, ref: ObjectRef, owners: Mapping[str, str], skip_annotations: Mapping[str, str]
    ) -> ChangeSetEntry:
        def entry(action: Action, reason: str = "") -> ChangeSetEntry:
            return ChangeSetEntry(ref, action, reason)

        if await self._delete_as_remembered(ref, owners, skip_annotations):
            return entry(Action.DELETED)
        try:
            live = await self.client.get(ref.rt, ref.name, ref.namespace)
        except NotFound:
            return entry(Action.SKIPPED, "not found")
        except (ApiError, ApiUnavailable) as error:
            raise ApplyFailed.of(ref.display, "read before delete failed", error) from None
        labels = policy.metadata(live).get("labels") or {}
        if any(labels.get(k) != v for k, v in owners.items()):
            return entry(Action.SKIPPED, "not owned: owner labels do not match")
        if policy.any_in_metadata(live, skip_annotations):
            return entry(Action.SKIPPED, "pruning disabled by annotation")
        uid = policy.metadata(live).get("uid")
        try:
            await self.client.delete(
                ref.rt,
                ref.name,
                namespace=ref.namespace,
                propagation="Background",
                precondition_uid=str(uid) if uid else None,
            )
        except NotFound:
            return entry(Action.SKIPPED, "not found")
        except Conflict:
            # The uid precondition failed: a new object took the name; not ours to judge.
            return entry(Action.SKIPPED, "replaced by another object before deletion")
        except (ApiError, ApiUnavailable) as error:
            raise ApplyFailed.of(ref.display, None, error) from None
        if self.memory is not None:
            self.memory.forget(self.target, ref.id)
        return entry(Action.DELETED)

    async def _delete_as_remembered(
        self, ref: ObjectRef, owners: Mapping[str, str], skip_annotations: Mapping[str, str]
    ) -> bool:
        """Delete without reading first, when the object is as our last apply left it.

        The read before a delete checks the owner labels and the prune
        annotations; an object whose resourceVersion is the one our apply
        answered with still carries what we sent, and the server enforces
        that with the uid and resourceVersion preconditions. Anything else
        (a 409: it changed since; no memory of it) takes the read.
        """
        if (
            self.memory is None
            or dict(owners) != self.owner_labels
            or skip_annotations != policy.DEFAULT_PRUNE_EXCLUSIONS
        ):
            return False
        remembered = self.memory.get(self.target, ref.id)
        if remembered is None or not remembered.uid or not remembered.prunable:
            return False
        try:
            await self.client.delete(
                ref.rt,
                ref.name,
                namespace=ref.namespace,
                propagation="Background",
                precondition_uid=remembered.uid,
                precondition_resource_version=remembered.resource_version,
            )
        except (NotFound, Conflict):
            return False  # gone or changed: the long way reports it as it is
        except (ApiError, ApiUnavailable) as error:
            raise ApplyFailed.of(ref.display, None, error) from None
        self.memory.forget(self.target, ref.id)
        return True
