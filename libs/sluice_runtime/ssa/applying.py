"""The staged apply, the way Flux's ssa.ResourceManager.ApplyAllStaged does it.

Stages: cluster definitions (CustomResourceDefinitions, Namespaces,
ClusterRoles) are applied and waited for first, then class definitions
(kinds named `*Class`), then everything else, so custom resources and
namespaced objects find their kind and namespace served. The up-front
dry-run of the whole set is each stage's dry-run too, unless an earlier
stage changed something since.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sluice_api.meta import ObjectId
from sluice_runtime import failpoints
from sluice_runtime.kube.client import JSON
from sluice_runtime.kube.errors import ApiError, ApiUnavailable, NotFound
from sluice_runtime.kube.health import compute_status, wait_for_health
from sluice_runtime.kube.resources import ResourceType
from sluice_runtime.ssa import normalizing, policy
from sluice_runtime.ssa.changeset import Action, ChangeSet, ChangeSetEntry
from sluice_runtime.ssa.checking import Checked, Checker, Plan
from sluice_runtime.ssa.errors import ApplyFailed, gather
from sluice_runtime.ssa.managed_fields import take_over_patch
from sluice_runtime.ssa.remembering import Remembered


def _writes(check: Checked) -> bool:
    """Whether `_apply_checked` will send this object (as it decides, but for a take-over)."""
    if check.skip:
        return False
    if check.existing is None or check.dry_run is None or check.recreate:
        return True
    return normalizing.has_drifted(check.existing, check.dry_run)


_PLAIN_LIVE: JSON = {"metadata": {}}
"""An existing object with no annotation of its own, as `Remembered.plain` says it is."""


class Applier(Checker):
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
        normalizing.validate(objects)
        defined = normalizing.crd_kinds(objects)
        unchanged, known = await self._unchanged_since_applied(
            objects, force=force, defined=defined
        )
        if unchanged:
            objects = [o for o in objects if ObjectId.of(o) not in unchanged]
        alone = known.get(ObjectId.of(objects[0])) if len(objects) == 1 else None
        if dry_run_first and alone is not None:
            applied = await self._apply_alone(*alone, force=force)
            if applied is not None:
                changeset = ChangeSet([applied])
                if normalizing.stage_of(objects[0]) == 0:
                    await self._wait_for_definitions(
                        changeset, timeout=wait_timeout, so_far=changeset
                    )
                changeset.extend(ChangeSet.sorted(unchanged.values()))
                return changeset
        checked: dict[ObjectId, Checked] = {}
        if dry_run_first:
            checked, _ = await self._check_all(objects, force=force)
            # Only a dry-run that found work: idle reconciles after a restart hit nothing.
            if failpoints.armed("ssa.apply.after-dry-run") and any(map(_writes, checked.values())):
                failpoints.hit("ssa.apply.after-dry-run")
        stages: list[list[Mapping[str, Any]]] = [[], [], []]
        for obj in objects:
            stages[normalizing.stage_of(obj)].append(obj)
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
        changeset.extend(ChangeSet.sorted(unchanged.values()))
        return changeset

    async def _unchanged_since_applied(
        self,
        objects: Sequence[Mapping[str, Any]],
        *,
        force: bool,
        defined: Mapping[tuple[str, str], str],
    ) -> tuple[dict[ObjectId, ChangeSetEntry], dict[ObjectId, tuple[Plan, Remembered]]]:
        """The objects exactly as the last apply left them, found without a dry-run;
        and, by manifest id, the changed ones whose live form is still the last
        apply's answer.

        One metadata-only LIST per kind and namespace (of the objects that
        carry our owner labels) gives every live resourceVersion; an object
        whose desired form and resourceVersion are the ones remembered would
        not change if applied (see `remembering`). Anything the LIST cannot
        tell (refused, an unknown kind) is left to the dry-run.
        """
        if self.memory is None and self.live is None:
            return {}, {}
        same: list[tuple[ObjectId, Plan, Remembered]] = []
        changed: list[tuple[ObjectId, Plan, Remembered]] = []
        for obj in objects:
            try:
                plan = await self._plan(obj, defined=defined, wait=0)
            except ApplyFailed:
                continue
            if self.live is not None:
                # Asked for every kind applied, so that its watch is up by the next reconcile.
                self.live.versions(plan.ref.rt, plan.ref.namespace or "")
            remembered = self.memory.get(self.target, plan.ref.id) if self.memory else None
            if remembered is not None:
                matches = remembered.digest == self._digest(plan, force=force)
                (same if matches else changed).append((ObjectId.of(obj), plan, remembered))
        # A changed object is worth a look only when it may be the one left to
        # write (`_apply_alone`): no LIST is sent for a revision that changes many.
        lone = changed[0] if len(changed) == 1 and len(objects) - len(same) == 1 else None
        if lone is not None and not lone[2].plain:
            lone = None
        candidates: dict[tuple[ResourceType, str], list[tuple[ObjectId, Plan, Remembered]]] = {}
        for candidate in (*same, *([lone] if lone else [])):
            rt, namespace = candidate[1].ref.rt, candidate[1].ref.namespace or ""
            candidates.setdefault((rt, namespace), []).append(candidate)
        if not candidates:
            return {}, {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(self.owner_labels.items()))

        async def versions(group: tuple[ResourceType, str]) -> Mapping[str, str]:
            rt, namespace = group
            watched = self.live.versions(rt, namespace) if self.live is not None else None
            if watched is not None:
                return watched
            try:
                listed = await self.client.list(
                    rt,
                    namespace=namespace or None,
                    label_selector=selector or None,
                    page_size=5000,
                    metadata_only=True,
                )
            except (ApiError, ApiUnavailable):
                return {}  # e.g. a tenant allowed to patch but not to list: dry-run them
            return {
                str(policy.metadata(item).get("name")): str(
                    policy.metadata(item).get("resourceVersion") or ""
                )
                for item in listed.items
            }

        found, _ = await gather(list(candidates), versions, limit=self._limit())
        unchanged: dict[ObjectId, ChangeSetEntry] = {}
        known: dict[ObjectId, tuple[Plan, Remembered]] = {}
        for group, live in found:
            for oid, plan, remembered in candidates[group]:
                if live.get(plan.ref.name) != remembered.resource_version:
                    continue
                if lone is not None and plan is lone[1]:
                    known[oid] = (plan, remembered)
                else:
                    unchanged[plan.ref.id] = ChangeSetEntry(
                        plan.ref,
                        Action.UNCHANGED,
                        "",
                        remembered.prunable,
                        remembered.health,
                        remembered.resource_version,
                    )
        return unchanged, known

    async def _apply_stage(
        self,
        objects: Sequence[Mapping[str, Any]],
        *,
        force: bool,
        defined: Mapping[tuple[str, str], str],
        checked: Mapping[ObjectId, Checked],
        wait_timeout: float,
        so_far: ChangeSet,
    ) -> ChangeSet:
        limit = self._limit()

        async def check(obj: Mapping[str, Any]) -> Checked:
            return await self._check(obj, force=force, defined=defined, wait=wait_timeout)

        # Objects the up-front dry-run could not judge (their Namespace or CRD
        # came with the set) are all dry-run before any of them is applied.
        unchecked = [o for o in objects if ObjectId.of(o) not in checked]
        found, rejected = await gather(unchecked, check, limit=limit)
        if rejected:
            raise ApplyFailed.combine(rejected, ChangeSet(list(so_far.entries)), dry_run=True)
        checks = {**checked, **{ObjectId.of(o): r for o, r in found}}

        async def apply(obj: Mapping[str, Any]) -> ChangeSetEntry:
            return await self._apply_checked(
                checks[ObjectId.of(obj)], wait_timeout=wait_timeout, force=force
            )

        results, failures = await gather(objects, apply, limit=limit)
        done = ChangeSet.sorted(entry for _, entry in results)
        if failures:
            raise ApplyFailed.combine(failures, ChangeSet([*so_far.entries, *done.entries]))
        return done

    async def _wait_for_definitions(
        self, done: ChangeSet, *, timeout: float, so_far: ChangeSet
    ) -> None:
        # CRDs must be Established before their kinds are served, Namespaces
        # Active before objects can be created in them.
        refs = done.health_refs()
        if not refs:
            return
        report = await wait_for_health(
            self.client,
            refs,
            timeout=timeout,
            interval=min(self.wait_interval, 0.5),
            known=done.observed(refs),
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

    async def _apply_checked(
        self, check: Checked, *, wait_timeout: float, force: bool
    ) -> ChangeSetEntry:
        plan, existing = check.plan, check.existing
        subject = plan.ref.display
        prunable = policy.prunable(plan.obj, existing)

        def entry(action: Action, reason: str = "", live: JSON | None = None) -> ChangeSetEntry:
            observed = compute_status(live) if live is not None else None
            version = ""
            if live is not None:
                self._remember(plan, live, force=force, health=observed, prunable=prunable)
                version = str(policy.metadata(live).get("resourceVersion") or "")
            return ChangeSetEntry(plan.ref, action, reason, prunable, observed, version)

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
        if (
            existing is not None
            and policy.ssa_policy(plan.obj, existing) == policy.SSAPolicy.OVERRIDE
        ):
            took_over = await self._take_over(plan, existing)
        if (
            existing is not None
            and dry_run is not None
            and not took_over
            and not normalizing.has_drifted(existing, dry_run)
        ):
            return entry(Action.UNCHANGED, live=existing)
        try:
            applied = await self.client.apply(
                plan.ref.rt, plan.obj, field_manager=self.field_manager, force=True
            )
        except (ApiError, ApiUnavailable) as error:
            raise ApplyFailed.of(subject, None, error) from None
        failpoints.hit("ssa.apply.mid-apply")
        if existing is None:
            reason = "recreated: immutable field changed" if check.recreate else ""
            return entry(Action.CREATED, reason, live=applied)
        # Taking over kubectl's fields rewrites managedFields only: whether the
        # object was configured is what the apply changed of its content.
        if not normalizing.has_drifted(existing, applied):
            return entry(Action.UNCHANGED, live=applied)
        return entry(Action.CONFIGURED, live=applied)

    async def _apply_alone(
        self, plan: Plan, remembered: Remembered, *, force: bool
    ) -> ChangeSetEntry | None:
        """The one object of the set to write, applied without a dry-run; None
        sends the caller the long way round, with nothing written.

        The dry-run of the set is there so that nothing of a revision is
        applied unless all of it can be: with one object to write, its apply
        is all or nothing by itself, and its live form is known (the last
        apply's answer, `Remembered.plain`, its resourceVersion unchanged), so
        neither a read nor a dry-run would tell anything the apply does not.
        What the API refuses was not written: the long way dry-runs it again
        and names the refusal as before, or re-creates an immutable change.
        """
        # The live object exists and asks for nothing (`plain`): what may still
        # skip it is in the manifest, judged as for any existing object.
        if self.ignore_rules or policy.skip_reason(plan.obj, _PLAIN_LIVE):
            return None
        try:
            applied = await self.client.apply(
                plan.ref.rt, plan.obj, field_manager=self.field_manager, force=True
            )
        except ApiError:
            return None
        except ApiUnavailable as error:
            # Perhaps written, perhaps not: as any apply whose answer was lost.
            raise ApplyFailed.of(plan.ref.display, None, error) from None
        failpoints.hit("ssa.apply.mid-apply")
        prunable = policy.prunable(plan.obj, applied)
        observed = compute_status(applied)
        self._remember(plan, applied, force=force, health=observed, prunable=prunable)
        version = str(policy.metadata(applied).get("resourceVersion") or "")
        # Same resourceVersion: the apply wrote nothing (the change was only in form).
        action = Action.UNCHANGED if version == remembered.resource_version else Action.CONFIGURED
        return ChangeSetEntry(plan.ref, action, "", prunable, observed, version)

    async def _delete_and_wait(self, plan: Plan, existing: JSON, *, timeout: float) -> None:
        ref = plan.ref
        uid = policy.metadata(existing).get("uid")
        try:
            await self.client.delete(
                ref.rt,
                ref.name,
                namespace=ref.namespace,
                propagation="Background",
                precondition_uid=str(uid) if uid else None,
            )
        except NotFound:
            return
        except (ApiError, ApiUnavailable) as error:
            raise ApplyFailed.of(
                ref.display, "immutable field changed, delete for re-creation failed", error
            ) from None
        deadline = time.monotonic() + timeout
        while True:
            current = await self._get(ref)
            if current is None or policy.metadata(current).get("uid") != uid:
                return
            if time.monotonic() >= deadline:
                finalizers = policy.metadata(current).get("finalizers") or []
                raise ApplyFailed(
                    ref.display,
                    f"immutable field changed; deleted for re-creation but still present "
                    f"after {timeout:.0f}s (finalizers: {', '.join(finalizers) or 'none'})",
                )
            await asyncio.sleep(min(self.wait_interval, 0.5))

    async def _take_over(self, plan: Plan, existing: JSON) -> bool:
        """`ssa: Override`: make kubectl-owned fields ours, drop kubectl's annotation.

        After this, our next apply owns (and can remove) fields that were
        added with `kubectl apply/edit`; returns whether anything changed.
        """
        ops = take_over_patch(existing, self.field_manager)
        if not ops:
            return False
        ref = plan.ref
        try:
            await self.client.request(
                "PATCH",
                ref.rt.path(namespace=ref.namespace, name=ref.name),
                query=[("fieldManager", self.field_manager)],
                body=ops,
                content_type="application/json-patch+json",
            )
        except (ApiError, ApiUnavailable) as error:
            raise ApplyFailed.of(
                ref.display, "taking over fields from kubectl failed", error
            ) from None
        return True
