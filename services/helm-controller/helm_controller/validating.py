"""The first step: refuse what this version accepts in the API but does not build.

Every such field stalls the HelmRelease with a message naming it (never
silently ignored), as does a malformed `driftDetection.ignore` selector.

Flux 2.8 moved helm-controller to the Helm 4 SDK; this version runs the helm
3 binary, which applies client-side, waits the legacy way and post-renders
without hooks. What Flux calls its Helm 3 defaults (`serverSideApply: false`
or `disabled`, `waitStrategy: legacy`, `postRenderStrategy: nohooks`) is
therefore what helm does here, and is accepted; asking for the Helm 4
behaviour (server-side apply, the kstatus `poller` wait and the CEL
`healthCheckExprs` it evaluates, hooks through the post-renderers) stalls.
"""

from __future__ import annotations

from helm_controller.contexts import HelmReleaseContext
from sluice_api.helm import HelmRelease, HelmReleaseReason
from sluice_runtime.kube import ignoring
from sluice_runtime.reconciling.errors import Stalling
from sluice_runtime.reconciling.steps import Result, step

Reason = HelmReleaseReason


HELM3 = "this version's helm 3 applies client-side only"


def unsupported_fields(hr: HelmRelease) -> list[str]:
    """Fields set on `hr` that this version does not build, by their API path."""
    spec = hr.spec
    found: list[str] = []
    if spec.install is not None and spec.install.server_side_apply:
        found.append(f"spec.install.serverSideApply: true ({HELM3})")
    for action, options in (("upgrade", spec.upgrade), ("rollback", spec.rollback)):
        if options is not None and options.server_side_apply == "enabled":
            found.append(f"spec.{action}.serverSideApply: enabled ({HELM3})")
    if spec.wait_strategy is not None and spec.wait_strategy.name == "poller":
        found.append("spec.waitStrategy.name: poller (this version's helm waits the legacy way)")
    if spec.health_check_exprs:
        found.append("spec.healthCheckExprs (evaluated by the poller wait, not built)")
    if spec.post_render_strategy in ("combined", "separate"):
        found.append(
            f"spec.postRenderStrategy: {spec.post_render_strategy} "
            "(this version's helm post-renders without hooks: nohooks)"
        )
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
    invalid = invalid_fields(ctx.obj)
    if invalid:
        raise Stalling(Reason.INIT_FAILED, "; ".join(invalid))
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


def invalid_fields(hr: HelmRelease) -> list[str]:
    """What Flux's CRD validation refuses and the CRDs under crds/ (no CEL) let through."""
    found = []
    for action, options in (("install", hr.spec.install), ("upgrade", hr.spec.upgrade)):
        strategy = options.strategy if options is not None else None
        if strategy is not None and strategy.name != "RetryOnFailure" and strategy.retry_interval:
            found.append(
                f"spec.{action}.strategy.retryInterval can only be set "
                "when spec.{action}.strategy.name is RetryOnFailure".replace("{action}", action)
            )
    return found


def ignore_rules(hr: HelmRelease) -> list[ignoring.IgnoreRule]:
    detection = hr.spec.drift_detection
    return ignoring.rules_of(detection.ignore or [] if detection else [])
