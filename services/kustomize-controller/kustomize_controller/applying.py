"""Steps 7 to 9 of a Kustomization, and its garbage collection: the target
cluster, the staged server-side apply, the inventory and prune.

These talk to the cluster through the *target* manager: the tenant's
impersonated identity (`serviceAccountName`) and/or a remote cluster
(`kubeConfig`), resolved once per reconcile by `reconcile_target`; deletion
resolves it the same way.
"""

from __future__ import annotations

from kustomize_controller.context import FIELD_MANAGER, KustomizationContext, Reason
from kustomize_controller.specs import dry_run_first_of, ignore_rules
from sluice_api.kustomize import ResourceInventory
from sluice_api.meta import ObjectId
from sluice_runtime.describing import describe
from sluice_runtime.kube.discovery import UnknownKind
from sluice_runtime.kube.errors import KubeError, is_transient
from sluice_runtime.kube.impersonation import TargetClusterError, TargetClusterRefused
from sluice_runtime.reconciling.errors import Stalling
from sluice_runtime.reconciling.steps import Result, step
from sluice_runtime.ssa.changeset import ChangeSet
from sluice_runtime.ssa.errors import ApplyFailed, ValidationFailed
from sluice_runtime.ssa.manager import ResourceManager

# -- 7. target ---------------------------------------------------------------------


async def target_manager(ctx: KustomizationContext) -> ResourceManager:
    """The manager for `kubeConfig`'s cluster as `serviceAccountName`; raises
    TargetClusterError."""
    kube_config = ctx.obj.spec.kube_config
    if kube_config is not None and kube_config.secret_ref is None:
        # configMapRef (workload identity) is refused by reconcile_spec; deletion
        # must not fall back to the local cluster for it either.
        raise TargetClusterError("spec.kubeConfig names no secretRef")
    cluster = await ctx.services.targets.resolve(
        namespace=ctx.obj.namespace,
        service_account_name=ctx.obj.spec.service_account_name,
        kubeconfig=kube_config.secret_ref if kube_config is not None else None,
        reader=ctx.client,
    )
    return ResourceManager(
        cluster.client,
        cluster.mapper,
        field_manager=FIELD_MANAGER,
        owner_labels=ctx.owner_labels,
        ignore_rules=ignore_rules(ctx.obj),
        memory=ctx.services.applied,
        # The watches see the local cluster with the controller's own identity.
        live=ctx.services.live if cluster.credentials is None else None,
    )


@step()
async def reconcile_target(ctx: KustomizationContext) -> Result | None:
    """Pick the cluster and identity every later step uses."""
    try:
        ctx.manager = await target_manager(ctx)
    except TargetClusterRefused as error:
        # Flux retries a kubeconfig it cannot use, with ReconciliationFailed; retrying
        # cannot help here (docs/reasons.md), but the reason stays Flux's.
        raise Stalling(Reason.RECONCILIATION_FAILED, str(error)) from None
    except TargetClusterError as error:
        raise ctx.failed(Reason.RECONCILIATION_FAILED, str(error)) from None
    return None


# -- 8. apply ----------------------------------------------------------------------


@step()
async def reconcile_apply(ctx: KustomizationContext) -> Result | None:
    assert ctx.manager is not None and ctx.artifact is not None
    try:
        # The set is validated here, once, before anything is sent. The whole
        # set is then dry-run first: one rejected object and nothing of
        # the revision is applied. The dry-run's answers also tell which
        # objects are unchanged, so those cost no further request.
        ctx.changeset = await ctx.manager.apply_all_staged(
            ctx.objects,
            force=ctx.obj.spec.force,
            dry_run_first=dry_run_first_of(ctx.obj),
            wait_timeout=ctx.timeout,
        )
    except ValidationFailed as error:
        # The build produced what no cluster accepts: the revision's fault, as in Flux.
        raise ctx.failed(Reason.BUILD_FAILED, str(error)) from None
    except ApplyFailed as error:
        # What did get applied (a Namespace whose objects the dry-run then
        # refused, say) stays in the inventory, so a later prune can find it.
        _merge_inventory(ctx, error.changeset)
        what = "dry-run failed" if error.dry_run else "apply failed"
        # Flux's reason for any refusal of the apply, RBAC's included: alerts match on it.
        raise ctx.failed(
            Reason.RECONCILIATION_FAILED, f"{what}: {error}", transient=error.transient
        ) from None
    except (UnknownKind, KubeError) as error:
        raise ctx.failed(
            Reason.RECONCILIATION_FAILED,
            f"apply failed: {describe(error)}",
            transient=is_transient(error),
        ) from None
    # Every object's outcome, unchanged ones too, is logged; events carry only changes.
    ctx.log.info(
        "server-side apply completed",
        revision=ctx.artifact.revision,
        output={e.subject: str(e.action) for e in ctx.changeset.entries},
    )
    if ctx.changeset.changed:
        ctx.events.normal(
            Reason.PROGRESSING,
            ctx.changeset.summary(only_changes=True),
            metadata=ctx.event_metadata,
        )
    return None


def _merge_inventory(ctx: KustomizationContext, applied: ChangeSet) -> None:
    merged = ResourceInventory.of([*_inventory(ctx).items(), *applied.to_inventory().items()])
    if merged.entries:
        ctx.obj.status.inventory = merged


def _inventory(ctx: KustomizationContext) -> ResourceInventory:
    return ctx.obj.status.inventory or ResourceInventory(entries=[])


# -- 9. prune ------------------------------------------------------------------------------


@step()
async def reconcile_prune(ctx: KustomizationContext) -> Result | None:
    assert ctx.manager is not None
    new = ctx.changeset.to_inventory()
    stale = _inventory(ctx).ids() - new.ids()
    if ctx.obj.spec.prune and stale:
        try:
            pruned = await ctx.manager.delete_all(stale)
        except ApplyFailed as error:
            _keep_unpruned(ctx, new, stale, error.changeset)
            raise ctx.failed(
                Reason.PRUNE_FAILED, f"prune failed: {error}", transient=error.transient
            ) from None
        except KubeError as error:
            _keep_unpruned(ctx, new, stale, ChangeSet())
            raise ctx.failed(
                Reason.PRUNE_FAILED,
                f"prune failed: {describe(error)}",
                transient=is_transient(error),
            ) from None
        if pruned.changed:
            ctx.events.normal(
                Reason.PROGRESSING, pruned.summary(only_changes=True), metadata=ctx.event_metadata
            )
    ctx.obj.status.inventory = new
    return None


def _keep_unpruned(
    ctx: KustomizationContext, new: ResourceInventory, stale: set[ObjectId], pruned: ChangeSet
) -> None:
    """After a failed prune the inventory holds what this revision applied and what is
    still to be pruned, so that neither escapes a later prune or garbage collection."""
    left = stale - pruned.ids()
    kept = [(oid, version) for oid, version in _inventory(ctx).items() if oid in left]
    ctx.obj.status.inventory = ResourceInventory.of([*kept, *new.items()])


# -- deletion ------------------------------------------------------------------------


async def finalize(ctx: KustomizationContext) -> None:
    """Garbage-collect what this Kustomization applied, per its deletion policy."""
    wait = ctx.services.health_waits.pop(ctx.key, None)
    if wait is not None:
        # A wait not shown in status yet holds what its apply left.
        ctx.obj.status.inventory = wait.inventory
    spec = ctx.obj.spec
    policy = spec.deletion_policy or "MirrorPrune"
    delete = policy in ("Delete", "WaitForTermination") or (policy == "MirrorPrune" and spec.prune)
    inventory = _inventory(ctx)
    if not delete or not inventory.entries:
        return
    try:
        manager = await target_manager(ctx)
    except TargetClusterError as error:
        # The target cluster's credentials are gone; nothing can be cleaned.
        ctx.log.warning("cannot garbage-collect on deletion", error=str(error))
        return
    await manager.delete_all(inventory.ids())
