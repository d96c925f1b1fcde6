"""What every HelmRelease step shares: the context, the controller's services,
and the ways to reach the release's cluster (helm, its history, the tenant's client).

Helm runs as the controller, or as the tenant's ServiceAccount with
`--kube-as-user system:serviceaccount:<ns>:<sa>`, so a release can create
only what the tenant may; with `kubeConfig` the release's cluster is the
remote one (`targeting`), and helm gets that cluster's private kubeconfig.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from helm_controller import releases
from sluice_api.helm import HelmRelease, HelmReleaseReason, Snapshot
from sluice_api.meta import Artifact, parse_duration
from sluice_api.times import format_duration
from sluice_runtime.helming import KubeCache, run_helm
from sluice_runtime.helming.storage import StorageError, release_name
from sluice_runtime.informing.watching import Store
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.discovery import RestMapper
from sluice_runtime.kube.errors import KubeError
from sluice_runtime.kube.impersonation import TargetClusters, impersonated_user
from sluice_runtime.kube.resources import SECRET
from sluice_runtime.reconciling.errors import StepError
from sluice_runtime.reconciling.steps import ReconcileContext

Reason = HelmReleaseReason
FIELD_MANAGER = "helm-controller"
DEFAULT_TIMEOUT = 300.0
DEFAULT_MAX_HISTORY = 5


@dataclass
class Services:
    """What HelmRelease steps share across reconciles."""

    session: aiohttp.ClientSession
    releases: Store
    charts: Store
    gates: Store
    oci_repositories: Store
    external_artifacts: Store
    kubeconfig: str | None
    """The kubeconfig file the controller's client loaded (`connecting.kubeconfig_path`),
    given to helm; None in a pod (helm uses the in-cluster config)."""
    default_service_account: str | None = None
    requeue_dependency: float = 30.0
    no_cross_namespace_refs: bool = False
    attempts: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per HelmRelease uid: the release-deciding status fields this process last wrote."""
    mapper: RestMapper | None = None
    """Which resource serves a kind, for drift detection; made on first use."""
    targets: TargetClusters | None = None
    """Clients of remote clusters (`kubeConfig`), built once per Secret version."""
    kube_cache: KubeCache | None = None
    """The controller's cluster's discovery and OpenAPI answers, a copy handed to each
    helm run (`running.KubeCache`); never used for a remote (`kubeConfig`) cluster."""
    applied_charts: dict[str, tuple[dict[str, Any], int | None]] = field(default_factory=dict)
    """Per owned HelmChart (`namespace/name`): the body this process last applied and
    the generation the API server answered with (`charting.as_applied`)."""

    def rest_mapper(self, client: KubeClient) -> RestMapper:
        # Discovery with the controller's own identity: every identity may read it.
        if self.mapper is None:
            self.mapper = RestMapper(client)
        return self.mapper


@dataclass(kw_only=True)
class HelmReleaseContext(ReconcileContext[HelmRelease]):
    services: Services
    artifact: Artifact | None = None
    chart_dir: Path | None = None
    chart_meta: dict[str, Any] = field(default_factory=dict)
    """The chart's Chart.yaml, read once (bounded, off the loop) when the chart is fetched."""
    revision: str = ""
    """The chart revision released: the HelmChart's, or the OCI chart's digest-suffixed version."""
    values: dict[str, Any] = field(default_factory=dict)
    config_digest: str = ""
    target_client: KubeClient | None = None
    """The remote cluster's client (its own identity), when `kubeConfig` is set."""
    target_mapper: RestMapper | None = None
    target_kubeconfig: str | None = None
    """The private kubeconfig file helm uses for the remote cluster."""
    releases: list[tuple[dict[str, Any], Snapshot]] = field(default_factory=list)
    """The release history last read, newest first (what status.history shows)."""

    @property
    def release_namespace(self) -> str:
        return self.obj.spec.target_namespace or self.obj.namespace

    @property
    def release_name(self) -> str:
        spec = self.obj.spec
        return release_name(self.obj.metadata.name, spec.target_namespace, spec.release_name)

    @property
    def timeout(self) -> float:
        return duration(self.obj.spec.timeout, DEFAULT_TIMEOUT)

    @property
    def max_history(self) -> int:
        spec = self.obj.spec
        return spec.max_history if spec.max_history is not None else DEFAULT_MAX_HISTORY


async def announce(
    ctx: HelmReleaseContext,
    action: str,
    doing: str,
    *,
    timeout: float,
    failed: tuple[str, str] | None = None,
) -> None:
    """Reconciling=True with what helm is about to do, in one status patch before
    it runs: Flux's "Running '<action>' action with timeout of <t>", then `doing`
    (installing chart X, upgrading from A to B, rolling back...). A new attempt
    clears the last one's Stalled; `failed` keeps Ready False with the failure
    a remediation undoes."""
    took = format_duration(timedelta(seconds=timeout))
    message = f"Running '{action}' action with timeout of {took}: {doing}"
    await ctx.progress(message, failed=failed)


def duration(text: str | None, default: float) -> float:
    """A Go duration in seconds, or `default` when unset."""
    return parse_duration(text).total_seconds() if text else default


class Waits(Protocol):
    """The wait switches of an action's options (install, upgrade, rollback)."""

    @property
    def disable_wait(self) -> bool: ...

    @property
    def disable_wait_for_jobs(self) -> bool: ...


def wait_args(options: Waits | None) -> list[str]:
    """`--wait --wait-for-jobs`, as Flux waits by default, less what `options` disable."""
    if options is not None and options.disable_wait:
        return []
    if options is not None and options.disable_wait_for_jobs:
        return ["--wait"]
    return ["--wait", "--wait-for-jobs"]


def account(ctx: HelmReleaseContext) -> str | None:
    return impersonated_user(
        ctx.obj.namespace, ctx.obj.spec.service_account_name, ctx.services.default_service_account
    )


def base_client(ctx: HelmReleaseContext) -> KubeClient:
    """The release's cluster with the controller's (or the kubeconfig's) own identity."""
    return ctx.target_client or ctx.client


def cluster_client(ctx: HelmReleaseContext) -> KubeClient:
    """The client that acts on the release's objects: as the tenant, when there is one."""
    user = account(ctx)
    base = base_client(ctx)
    return base.impersonate(user) if user else base


async def helm(ctx: HelmReleaseContext, args: list[str], *, timeout: float) -> str:
    """Run helm on the release's namespace and cluster, as the tenant when there is one."""
    user = account(ctx)
    # The local cluster's cache only; filled by runs as the controller itself, so
    # nothing a tenant's run wrote reaches another run.
    local = ctx.target_kubeconfig is None
    result = await run_helm(
        [*args, "--namespace", ctx.release_namespace, *(["--kube-as-user", user] if user else [])],
        # helm's own --timeout bounds its waits; give the process a margin over it.
        timeout=timeout + 60,
        kubeconfig=ctx.target_kubeconfig or ctx.services.kubeconfig,
        kube_cache=ctx.services.kube_cache if local else None,
        fill_kube_cache=user is None,
    )
    return result.stdout


async def history(ctx: HelmReleaseContext) -> list[tuple[dict[str, Any], Snapshot]]:
    """The release's newest revisions from Helm's storage Secrets, newest first.

    Read as the tenant, like helm itself: with the controller's identity a
    HelmRelease whose `targetNamespace` the tenant may not read would show
    that namespace's release in its status, and helm would then upgrade it.
    """
    where = f"{ctx.release_namespace}/{ctx.release_name}"
    try:
        secrets = await cluster_client(ctx).list(
            SECRET,
            namespace=ctx.release_namespace,
            label_selector=f"owner=helm,name={ctx.release_name}",
        )
    except KubeError as error:
        raise StepError(
            Reason.GET_LAST_RELEASE_FAILED,
            f"cannot read the history of release {where}: {error}",
        ) from None
    try:
        return releases.history(secrets.items, keep=kept_history(ctx))
    except StorageError as error:
        raise StepError(
            Reason.GET_LAST_RELEASE_FAILED, f"cannot read the history of release {where}: {error}"
        ) from None


def kept_history(ctx: HelmReleaseContext) -> int:
    """How many snapshots status.history keeps (and so how many releases are decoded)."""
    spec = ctx.obj.spec
    return spec.max_history if spec.max_history else DEFAULT_MAX_HISTORY


def record_action_duration(ctx: HelmReleaseContext, started: float) -> None:
    """status.lastAttemptedReleaseActionDuration: the install or upgrade since
    `started` (time.monotonic()), as a Go duration."""
    elapsed = timedelta(seconds=time.monotonic() - started)
    ctx.obj.status.last_attempted_release_action_duration = format_duration(elapsed)


def record_history(ctx: HelmReleaseContext, found: list[tuple[dict[str, Any], Snapshot]]) -> None:
    ctx.obj.status.history = [snap for _, snap in found[: kept_history(ctx)]] or None
    ctx.releases = found
