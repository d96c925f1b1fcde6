"""The target step: `kubeConfig.secretRef` releases to another cluster.

The Secret is read by the runtime's `TargetClusters` (inline credentials
only; files, `auth-provider`, and unless the operator allows them `exec` and
skipped TLS checks are refused, stalling the HelmRelease naming the field),
and helm gets a private kubeconfig holding exactly those checked credentials.
The chart, values and HelmRelease stay on the controller's cluster; the
release, its storage and drift detection are on the target.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from helm_controller.contexts import HelmReleaseContext
from sluice_api.helm import HelmReleaseReason
from sluice_runtime.kube import kubeconfigs
from sluice_runtime.kube.impersonation import (
    TargetClusterError,
    TargetClusterRefused,
    TargetClusters,
)
from sluice_runtime.reconciling.errors import Stalling, StepError
from sluice_runtime.reconciling.steps import Result, step

Reason = HelmReleaseReason


@step()
async def reconcile_target(ctx: HelmReleaseContext) -> Result | None:
    """Resolve `kubeConfig`: the remote cluster's client and helm's kubeconfig for it."""
    try:
        await resolve_target(ctx)
    except TargetClusterRefused as error:
        raise Stalling(Reason.INIT_FAILED, str(error)) from None
    except TargetClusterError as error:
        raise StepError(Reason.INIT_FAILED, str(error)) from None
    return None


async def resolve_target(ctx: HelmReleaseContext) -> None:
    ref = ctx.obj.spec.kube_config
    if ref is None or ref.secret_ref is None:
        return
    if ctx.services.targets is None:
        ctx.services.targets = TargetClusters(ctx.client)
    # The cluster's own identity: impersonation is added per call (contexts.cluster_client).
    target = await ctx.services.targets.resolve(
        namespace=ctx.obj.namespace, service_account_name=None, kubeconfig=ref.secret_ref
    )
    assert target.credentials is not None
    ctx.target_client, ctx.target_mapper = target.client, target.mapper
    work = Path(ctx.cleanup.enter_context(tempfile.TemporaryDirectory(prefix="hr-target-")))
    path = work / "kubeconfig"
    path.touch(mode=0o600)
    path.write_text(kubeconfigs.render(target.credentials))
    ctx.target_kubeconfig = str(path)
