"""Applying a ResourceSet's objects, pruning what it no longer renders, waiting for health.

The apply, garbage-collection and health steps and the finalizer, over the
shared engine (`applying.py`) and the inventory kept in status.
"""

from __future__ import annotations

from resourceset_controller import applying, timing
from resourceset_controller.contexts import Reason, ResourceSetContext, owner_labels
from sluice_api.kustomize import ResourceInventory
from sluice_api.meta import ObjectId
from sluice_runtime.describing import describe
from sluice_runtime.kube.discovery import UnknownKind
from sluice_runtime.kube.errors import KubeError, is_transient
from sluice_runtime.reconciling.errors import Stalling
from sluice_runtime.reconciling.steps import Result, step
from sluice_runtime.ssa.changeset import ChangeSet

# -- 5. apply ------------------------------------------------------------------------------


@step()
async def reconcile_apply(ctx: ResourceSetContext) -> Result | None:
    client, mapper = ctx.services.target(ctx.obj.namespace, ctx.obj.spec.service_account_name)
    ctx.manager = applying.manager(client, mapper, owner_labels=owner_labels(ctx.obj))
    try:
        for index, (name, objects) in enumerate(ctx.stages):
            applied = await ctx.manager.apply_all_staged(objects, wait_timeout=ctx.timeout)
            ctx.changeset.extend(applied)
            if name and index < len(ctx.stages) - 1:
                # A step is healthy before the next starts (a migration Job before
                # the Deployment that needs it).
                await ctx.progress(f"Waiting for step '{name}' to be healthy")
                report = await applying.wait(ctx.manager, applied, timeout=ctx.timeout)
                if not report.healthy:
                    _merge_inventory(ctx, ctx.changeset)
                    raise ctx.failed(
                        Reason.HEALTH_CHECK_FAILED,
                        f"step '{name}': health check "
                        + ("timed out: " if report.timed_out else "failed: ")
                        + report.summary(),
                    )
    except applying.ValidationFailed as error:
        raise Stalling(Reason.BUILD_FAILED, str(error)) from None
    except applying.ApplyFailed as error:
        _merge_inventory(ctx, ctx.changeset)
        _merge_inventory(ctx, error.changeset)
        raise ctx.failed(
            Reason.RECONCILIATION_FAILED, f"apply failed: {error}", transient=error.transient
        ) from None
    except (UnknownKind, KubeError) as error:
        raise ctx.failed(
            Reason.RECONCILIATION_FAILED,
            f"apply failed: {describe(error)}",
            transient=is_transient(error),
        ) from None
    if ctx.changeset.changed:
        ctx.events.normal(Reason.PROGRESSING, ctx.changeset.summary(only_changes=True))
    return None


def _entries(ctx: ResourceSetContext) -> dict[str, str]:
    inventory = ctx.obj.status.inventory
    return {e.id: e.version for e in inventory.entries} if inventory is not None else {}


def _set_inventory(ctx: ResourceSetContext, entries: dict[str, str]) -> None:
    ctx.obj.status.inventory = ResourceInventory.of(
        (ObjectId.from_inventory_id(i), v) for i, v in entries.items()
    )


def _applied(changeset: ChangeSet) -> dict[str, str]:
    return {e.id: e.version for e in changeset.to_inventory().entries}


def _merge_inventory(ctx: ResourceSetContext, applied: ChangeSet) -> None:
    entries = {**_entries(ctx), **_applied(applied)}
    if entries:
        _set_inventory(ctx, entries)


# -- 6. garbage collection -----------------------------------------------------------------


@step()
async def reconcile_prune(ctx: ResourceSetContext) -> Result | None:
    assert ctx.manager is not None
    new = _applied(ctx.changeset)
    old = _entries(ctx)
    stale = sorted(set(old) - set(new))
    if stale:
        try:
            pruned = await applying.garbage_collect(
                ctx.manager, [ObjectId.from_inventory_id(i) for i in stale], timeout=ctx.timeout
            )
        except applying.ApplyFailed as error:
            handled = {e.id.inventory_id for e in error.changeset.entries}
            left = {i: old[i] for i in stale if i not in handled}
            _set_inventory(ctx, {**left, **new})
            raise ctx.failed(
                Reason.RECONCILIATION_FAILED,
                f"garbage collection failed: {error}",
                transient=error.transient,
            ) from None
        if pruned.changed:
            ctx.events.normal(Reason.PROGRESSING, pruned.summary(only_changes=True))
    _set_inventory(ctx, new)
    return None


# -- 7. health -----------------------------------------------------------------------------


@step()
async def reconcile_health(ctx: ResourceSetContext) -> Result | None:
    if not ctx.obj.spec.wait or ctx.manager is None:
        return None
    await ctx.progress(f"Waiting for {len(ctx.changeset.entries)} objects to be healthy")
    report = await applying.wait(ctx.manager, ctx.changeset, timeout=ctx.timeout)
    if not report.healthy:
        raise ctx.failed(
            Reason.HEALTH_CHECK_FAILED,
            ("health check timed out: " if report.timed_out else "health check failed: ")
            + report.summary(),
        )
    return None


# -- deletion ----------------------------------------------------------------------------------


async def finalize(ctx: ResourceSetContext) -> None:
    """Garbage-collect everything the ResourceSet applied, Flux kinds first."""
    entries = _entries(ctx)
    if not entries or timing.disabled(ctx.obj.metadata.annotations):
        return
    client, mapper = ctx.services.target(ctx.obj.namespace, ctx.obj.spec.service_account_name)
    rm = applying.manager(client, mapper, owner_labels=owner_labels(ctx.obj))
    try:
        await applying.garbage_collect(
            rm, [ObjectId.from_inventory_id(i) for i in entries], timeout=ctx.timeout
        )
    except applying.ApplyFailed as error:
        ctx.log.warning("garbage collection on deletion failed", error=str(error))
