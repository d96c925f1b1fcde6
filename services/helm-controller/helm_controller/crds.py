"""Chart CRDs beyond what helm does: Flux's `install.crds` / `upgrade.crds` policies.

helm installs a chart's `crds/` only on install and never replaces them;
`helm upgrade` ignores them. `CreateReplace` (and `Create` on upgrade) is
the controller's work, done as the tenant; a failure is the action's failure.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from helm_controller import releases
from helm_controller.contexts import HelmReleaseContext, cluster_client
from sluice_runtime.helming import HelmError
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import KubeError, NotFound
from sluice_runtime.kube.resources import CRD


def crds_policy(ctx: HelmReleaseContext, action: str) -> str:
    """`install.crds` (Create unless skipCRDs) or `upgrade.crds` (Skip), as in Flux."""
    spec = ctx.obj.spec
    if action == "install":
        opts = spec.install
        if opts is not None and opts.crds:
            return opts.crds
        return "Skip" if opts is not None and opts.skip_crds else "Create"
    return (spec.upgrade.crds if spec.upgrade is not None else None) or "Skip"


async def apply_crds(ctx: HelmReleaseContext, action: str, *, timeout: float) -> None:
    """Create (and with CreateReplace, replace) the chart's CRDs before the action.

    helm installs a chart's `crds/` only on install and never replaces them;
    `helm upgrade` ignores them. Flux's policies beyond that are the
    controller's work, done as the tenant; a failure is the action's failure.
    """
    policy = crds_policy(ctx, action)
    if policy == "Skip" or (action == "install" and policy == "Create"):
        return
    assert ctx.chart_dir is not None
    work = Path(ctx.cleanup.enter_context(tempfile.TemporaryDirectory(prefix="hr-crds-")))
    try:
        crds = await asyncio.to_thread(releases.chart_crds, ctx.chart_dir, work)
    except releases.ChartCRDsError as error:
        raise HelmError(str(error)) from None
    for crd in crds:
        if crd.get("kind") != "CustomResourceDefinition" or not isinstance(
            crd.get("metadata"), dict
        ):
            raise HelmError(f"the chart's crds/ holds a {crd.get('kind')}, not a CRD")
    client = cluster_client(ctx)
    names = []
    try:
        for crd in crds:
            name = str(crd["metadata"].get("name"))
            names.append(name)
            try:
                existing = await client.get(CRD, name)
            except NotFound:
                await client.create(CRD, crd)
                continue
            if policy == "CreateReplace":
                crd["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
                await client.replace(CRD, crd)
        await wait_established(client, names, timeout=min(timeout, 60.0))
    except KubeError as error:
        raise HelmError(f"CustomResourceDefinitions ({policy}): {error}") from None


async def wait_established(client: KubeClient, names: list[str], *, timeout: float) -> None:
    """Wait until every CRD named is served, so the chart's custom resources apply."""
    deadline = asyncio.get_running_loop().time() + timeout
    pending = list(names)
    while pending:
        crd = await client.get(CRD, pending[0])
        conditions = (crd.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            pending.pop(0)
            continue
        if asyncio.get_running_loop().time() > deadline:
            raise HelmError(f"CustomResourceDefinition {pending[0]} not established in time")
        await asyncio.sleep(0.2)
