"""The first step: refuse what this version accepts in the API but does not build.

Every such field stalls the HelmRelease with a message naming it (never
silently ignored), as does a malformed `driftDetection.ignore` selector.
"""

from __future__ import annotations

from helm_controller.contexts import HelmReleaseContext
from sluice_api.helm import HelmRelease, HelmReleaseReason
from sluice_runtime.kube import ignoring
from sluice_runtime.reconciling.errors import Stalling
from sluice_runtime.reconciling.steps import Result, step

Reason = HelmReleaseReason


def unsupported_fields(hr: HelmRelease) -> list[str]:
    """Fields set on `hr` that this version does not build, by their API path."""
    spec = hr.spec
    found: list[str] = []
    if spec.kube_config is not None and spec.kube_config.config_map_ref is not None:
        found.append("spec.kubeConfig.configMapRef")
    if any(dep.ready_expr for dep in spec.depends_on or []):
        found.append("spec.dependsOn[].readyExpr")
    if spec.storage_namespace is not None and spec.storage_namespace != (
        spec.target_namespace or hr.metadata.namespace
    ):
        # The helm CLI stores a release in the namespace it deploys to.
        found.append("spec.storageNamespace (different from the release namespace)")
    return found


@step()
async def reconcile_unsupported(ctx: HelmReleaseContext) -> Result | None:
    spec = ctx.obj.spec
    if (spec.chart is None) == (spec.chart_ref is None):
        raise Stalling(
            Reason.INIT_FAILED, "exactly one of spec.chart and spec.chartRef must be set"
        )
    found = unsupported_fields(ctx.obj)
    if found:
        raise Stalling(
            Reason.UNSUPPORTED,
            f"not supported by this version of Sluice: {', '.join(found)}; "
            "remove them to release this HelmRelease",
        )
    try:
        ignoring.validate(ignore_rules(ctx.obj))
    except ignoring.InvalidSelector as error:
        raise Stalling(Reason.INIT_FAILED, f"spec.driftDetection.ignore: {error}") from None
    return None


def ignore_rules(hr: HelmRelease) -> list[ignoring.IgnoreRule]:
    detection = hr.spec.drift_detection
    return ignoring.rules_of(detection.ignore or [] if detection else [])
