"""The values step: the HelmRelease's `valuesFrom` and `values`, composed as Flux
composes them (`sluice_runtime.helming.values`, shared with `sluice build|diff
helmrelease`); their digest is the config digest."""

from __future__ import annotations

from helm_controller.contexts import HelmReleaseContext
from sluice_api.helm import HelmReleaseReason
from sluice_runtime.helming import values
from sluice_runtime.reconciling.errors import StepError
from sluice_runtime.reconciling.steps import Result, step


@step()
async def reconcile_values(ctx: HelmReleaseContext) -> Result | None:
    try:
        ctx.values = await values.compose(ctx.client, ctx.obj.namespace, ctx.obj.spec)
    except values.ValuesError as error:
        raise StepError(HelmReleaseReason.INIT_FAILED, str(error)) from None
    ctx.config_digest = values.config_digest(ctx.values)
    return None
