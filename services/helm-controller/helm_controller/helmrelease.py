"""HelmRelease: a chart artifact and values, released with the real helm.

The reconcile, read top to bottom; each step lives in the module named after it:

1. unsupported (`validating`): fields accepted by the API but not built stall.
2. gates: a closed gate holds install and upgrade.
3. dependencies: `dependsOn` HelmReleases must be Ready.
4. chart (`charting`): the chart artifact, from an owned HelmChart or a `chartRef`.
5. values (`values`): `valuesFrom` then `values`, and their digest.
6. target (`targeting`): `kubeConfig`'s remote cluster, when set.
7. release (`releasing`): install, upgrade, test, remediate (`remediating`,
   `crds`), or check a steady release for drift (`correcting`).
8. inventory (`inventorying`): the objects of the deployed release.

What the steps share, and how helm reaches the release's cluster as the
tenant, is in `contexts`; what else makes a HelmRelease reconcile, in
`watching`.
"""

from __future__ import annotations

import contextlib
import functools

from helm_controller.charting import HELMCHART, desired_chart, reconcile_chart
from helm_controller.contexts import HelmReleaseContext, Services
from helm_controller.inventorying import reconcile_inventory
from helm_controller.releasing import reconcile_release
from helm_controller.remediating import uninstall
from helm_controller.targeting import reconcile_target, resolve_target
from helm_controller.validating import reconcile_unsupported
from helm_controller.values import reconcile_values
from sluice_api.helm import (
    FORCE_REQUESTED_AT_ANNOTATION,
    RESET_REQUESTED_AT_ANNOTATION,
    HelmRelease,
    HelmReleaseCondition,
    HelmReleaseReason,
)
from sluice_api.meta import parse_duration
from sluice_runtime import dependencies, gatekeeping
from sluice_runtime.helming import HelmError
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.impersonation import TargetClusterError
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import Result, step

Condition = HelmReleaseCondition
Reason = HelmReleaseReason


@step(Condition.APPROVED)
async def reconcile_gates(ctx: HelmReleaseContext) -> Result | None:
    """A closed gate holds install and upgrade (the release stays as it is)."""
    gatekeeping.hold_while_closed(
        ctx.obj.spec.gates,
        namespace=ctx.obj.namespace,
        store=ctx.services.gates,
        conditions=ctx.conditions,
        requeue_after=parse_duration(ctx.obj.spec.interval).total_seconds(),
    )
    return None


# -- 3. dependencies -------------------------------------------------------------------------


@step()
async def reconcile_dependencies(ctx: HelmReleaseContext) -> Result | None:
    if not ctx.obj.spec.depends_on:
        return None
    dependencies.require_ready(
        ctx.raw,
        ctx.services.releases.get,
        source_revision=None,
        requeue_after=ctx.services.requeue_dependency,
    )
    return None


STEPS = (
    reconcile_unsupported,
    reconcile_gates,
    reconcile_dependencies,
    reconcile_chart,
    reconcile_values,
    reconcile_target,
    reconcile_release,
    reconcile_inventory,
)


async def finalize(ctx: HelmReleaseContext) -> None:
    """Uninstall the release and delete the HelmChart it owns."""
    hr = ctx.obj
    if not hr.spec.suspend and hr.status.history:
        try:
            await resolve_target(ctx)
            await uninstall(ctx)
            ctx.events.normal(
                Reason.UNINSTALL_SUCCEEDED,
                f"Helm uninstall succeeded for release {ctx.release_namespace}/{ctx.release_name}",
            )
        except (HelmError, TargetClusterError) as error:
            ctx.log.warning("uninstall on deletion failed", error=str(error))
            ctx.events.warning(Reason.UNINSTALL_FAILED, f"Helm uninstall failed: {error}")
    ctx.services.attempts.pop(hr.metadata.uid or hr.key, None)
    # The HelmChart the spec makes, never the one status names: whoever may
    # write the HelmRelease's status would delete any namespace's HelmChart
    # with the controller's identity.
    if hr.spec.chart is not None:
        owned = desired_chart(hr)["metadata"]
        ctx.services.applied_charts.pop(f"{owned['namespace']}/{owned['name']}", None)
        with contextlib.suppress(NotFound):
            await ctx.client.delete(HELMCHART, owned["name"], namespace=owned["namespace"])


def reconciler(services: Services) -> Reconciler[HelmReleaseContext]:
    context = functools.partial(HelmReleaseContext, services=services)
    return Reconciler(
        model=HelmRelease,
        steps=STEPS,
        context=context,
        negative_conditions=(),
        finalize=finalize,
        trigger_annotations=(FORCE_REQUESTED_AT_ANNOTATION, RESET_REQUESTED_AT_ANNOTATION),
        success_reason=Reason.INSTALL_SUCCEEDED,
    )
