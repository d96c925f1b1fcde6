"""Drift detection of a steady release: report it (`warn`) or correct it (`enabled`).

The pure rules (which objects, which have drifted, how to describe them)
are in `drifting`; this is the I/O around them, run by the release step
when there is nothing to install or upgrade.
"""

from __future__ import annotations

from typing import Any

from helm_controller import drifting
from helm_controller.contexts import FIELD_MANAGER, HelmReleaseContext, cluster_client
from helm_controller.validating import ignore_rules
from sluice_api.helm import HelmReleaseReason, Snapshot
from sluice_runtime.reconciling.errors import StepError
from sluice_runtime.ssa.errors import ApplyError
from sluice_runtime.ssa.manager import ResourceManager

Reason = HelmReleaseReason


async def check_drift(ctx: HelmReleaseContext, release: dict[str, Any], snap: Snapshot) -> None:
    """Compare the cluster with the release manifest; report (warn) or correct (enabled).

    Only a steady release is checked: an install or upgrade has just written
    the manifest itself. Correction applies the drifted objects, never
    `helm upgrade`, so it adds no release revision.
    """
    detection = ctx.obj.spec.drift_detection
    mode = detection.mode if detection is not None else None
    if mode not in ("enabled", "warn"):
        return
    target = f"{snap.namespace}/{snap.name}.v{snap.version}"
    try:
        objects = drifting.manifest_objects(
            str(release.get("manifest") or ""), namespace=ctx.release_namespace
        )
    except drifting.ManifestError as error:
        raise StepError(
            Reason.RECONCILIATION_FAILED, f"drift detection of release {target}: {error}"
        ) from None
    manager = ResourceManager(
        cluster_client(ctx),
        ctx.target_mapper or ctx.services.rest_mapper(ctx.client),
        field_manager=FIELD_MANAGER,
        owner_labels={},
        ignore_rules=ignore_rules(ctx.obj),
    )
    try:
        found = drifting.drifted(await manager.preview_all(objects))
    except ApplyError as error:
        raise StepError(
            Reason.RECONCILIATION_FAILED, f"drift detection of release {target} failed: {error}"
        ) from None
    if not found:
        return
    ctx.log.info("drift detected", release=target, objects=[d.subject for d in found])
    if mode == "warn":
        ctx.events.warning(
            Reason.DRIFT_DETECTED,
            f"Cluster state of release {target} has drifted from the desired state:\n"
            + drifting.describe(found),
            metadata=ctx.event_metadata,
        )
        return
    try:
        changes = await manager.apply_all_staged(
            drifting.select(objects, found), wait_timeout=ctx.timeout
        )
    except ApplyError as error:
        message = f"Failed to correct cluster state of release {target}: {error}"
        ctx.events.warning(Reason.DRIFT_CORRECTION_FAILED, message, metadata=ctx.event_metadata)
        raise StepError(Reason.DRIFT_CORRECTION_FAILED, message) from None
    ctx.events.normal(
        Reason.DRIFT_CORRECTED,
        f"Cluster state of release {target} has been corrected:\n"
        + changes.summary(only_changes=True),
        metadata=ctx.event_metadata,
    )
