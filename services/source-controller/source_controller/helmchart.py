"""HelmChart: a packaged chart (.tgz) from a HelmRepository, a GitRepository or a Bucket.

STEPS: storage → unsupported → verify → gates → source → artifact.

- From a HelmRepository (`type: default`): the newest chart version in its
  index matching `spec.version` (a semver range) is downloaded, digest-checked
  against the index when the index gives one, and stored as is; revision =
  chart version. The index is parsed through the shared `INDEX_CACHE`.
- From a GitRepository or a Bucket: the chart directory `spec.chart` in the source's
  artifact (read from this process's storage, no download) is packaged with
  the real `helm package`, after `helm dependency build` when Chart.yaml
  declares dependencies. `reconcileStrategy: Revision` makes every source
  revision a new chart version, `<version>+<first 12 hex of the revision>`,
  as Flux does.
- `valuesFiles` are merged, in order, into the chart's values.yaml before
  packaging (a chart from a repository is unpacked and packaged again).

- From an OCI HelmRepository (`type: oci`): the chart is the repository
  `<url>/<chart>`; an exact `spec.version` is its tag (`+` written `_`, as
  `helm push` does), a range picks the newest matching tag. The chart layer
  (`application/vnd.cncf.helm.chart.content.v1.tar+gzip`) is pulled with the
  runtime's bounded registry client, digest-checked, and stored as is;
  revision = chart version. Credentials: `secretRef` with
  `username`/`password` or `.dockerconfigjson`, `certSecretRef` `ca.crt`.
  `spec.verify` checks the chart manifest's cosign signature with the public
  keys of its `secretRef` before the chart is stored, as an OCIRepository's;
  a chart from any other source cannot be verified and stalls.

What every source shares is in `charts`; pulling from a HelmRepository (HTTP
index or OCI) in `chartpulling`; packaging a chart directory of a source
artifact is here.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from sluice_api.meta import Artifact
from sluice_api.source import HelmChart, SourceCondition, SourceReason
from sluice_runtime import dependencies, yamlloading
from sluice_runtime.artifacts.fetching import ArtifactError, extract_tarball
from sluice_runtime.artifacts.storage import Storage
from sluice_runtime.helming import HelmError, run_helm
from sluice_runtime.informing.watching import Change, Store
from sluice_runtime.reconciling.errors import Stalling, Waiting
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import Result, step
from source_controller.chartpulling import from_repository, unverifiable
from source_controller.charts import (
    HELM_TIMEOUT,
    HEX,
    SOURCE_WAIT,
    ChartStores,
    HelmChartContext,
    already_stored,
    merge_values_files,
    package_chart,
    package_error,
    pull_error,
    source_of,
    values_files,
)
from source_controller.helmrepository import DEFAULT_CHART_MAX_SIZE, DEFAULT_INDEX_MAX_SIZE
from source_controller.ocirepository import refuse_unsupported_verification
from source_controller.sources import (
    Limits,
    finalize,
    mark_outdated,
    mark_stored,
    reconcile_gates,
    reconcile_storage,
    reconcile_unsupported,
    record_artifact,
    source_reconciler,
    write_file,
)


@step()
async def reconcile_verify(ctx: HelmChartContext) -> Result | None:
    """Refuse a `spec.verify` this version cannot check, before anything is fetched.

    Charts of an OCI HelmRepository are checked with cosign public keys as
    they are pulled (`chartpulling`); elsewhere there is no signature to
    check, and ignoring the field would serve an unsigned chart as verified.
    """
    verify = ctx.obj.spec.verify
    if verify is None:
        ctx.conditions.delete(SourceCondition.SOURCE_VERIFIED)
        return None
    if ctx.obj.spec.source_ref.kind != "HelmRepository":
        raise unverifiable(f"a chart from a {ctx.obj.spec.source_ref.kind}")
    refuse_unsupported_verification(verify)
    return None


@step(SourceCondition.FETCH_FAILED)
async def reconcile_source(ctx: HelmChartContext) -> Result | None:
    ref = ctx.obj.spec.source_ref
    if ref.kind == "HelmRepository":
        await from_repository(ctx)
    elif ref.kind == "GitRepository":
        await from_artifact(ctx, ctx.stores.git_repositories)
    elif ref.kind == "Bucket":
        await from_artifact(ctx, ctx.stores.buckets)
    else:
        raise Stalling(
            SourceReason.INVALID_CHART_REFERENCE,
            f"spec.sourceRef.kind {ref.kind} is not supported by this version of Sluice",
        )
    return None


async def from_artifact(ctx: HelmChartContext, store: Store) -> None:
    """A chart directory in a GitRepository's or Bucket's artifact, packaged here."""
    spec = ctx.obj.spec
    kind = spec.source_ref.kind
    raw = source_of(ctx, store)
    status = raw.get("status") or {}
    if not status.get("artifact"):
        raise Waiting(
            SourceReason.FAILED,
            f"{kind} '{ctx.obj.namespace}/{spec.source_ref.name}' has no artifact yet",
            requeue_after=SOURCE_WAIT,
        )
    artifact = Artifact.model_validate(status["artifact"])
    work = Path(ctx.cleanup.enter_context(tempfile.TemporaryDirectory(prefix="helmchart-")))
    source = work / "source"
    try:
        await asyncio.to_thread(
            extract_tarball,
            ctx.storage.path(artifact.path),
            source,
            max_size=ctx.limits.artifact_max_size,
            max_members=ctx.limits.artifact_max_files,
        )
    except (ArtifactError, OSError) as error:
        raise pull_error(f"cannot read the {kind}'s artifact: {error}") from None
    chart_dir = (source / spec.chart).resolve()
    if chart_dir != source.resolve() and source.resolve() not in chart_dir.parents:
        raise Stalling(
            SourceReason.INVALID_CHART_REFERENCE,
            f"chart path '{spec.chart}' points outside the artifact",
        )
    meta_file = chart_dir / "Chart.yaml"
    if not meta_file.is_file():
        raise pull_error(f"no Chart.yaml in '{spec.chart}' of revision {artifact.revision}")
    try:
        meta = await yamlloading.load_file_off_loop(meta_file, limits=yamlloading.VALUES_LIMITS)
        version = str(meta["version"])
    except (yamlloading.YAMLError, KeyError, TypeError) as error:
        raise package_error(f"{spec.chart}/Chart.yaml is invalid: {error}") from None
    if spec.reconcile_strategy == "Revision":
        hexes = HEX.findall(artifact.revision)
        suffix = hexes[-1] if hexes else hashlib.sha256(artifact.revision.encode()).hexdigest()
        version = f"{version}+{suffix[:12]}"
    if already_stored(ctx, version, source_revision=artifact.revision):
        return
    mark_outdated(ctx, version)
    await merge_values_files(ctx, source, chart_dir)
    if meta.get("dependencies") or (chart_dir / "requirements.yaml").is_file():
        try:
            await run_helm(
                ["dependency", "build", str(chart_dir)], timeout=HELM_TIMEOUT, confine_to=work
            )
        except HelmError as error:
            raise package_error(f"dependency build of '{spec.chart}' failed: {error}") from None
    ctx.package = await package_chart(ctx, chart_dir, work / "out", version=version)


@step(SourceCondition.STORAGE_OPERATION_FAILED)
async def reconcile_artifact(ctx: HelmChartContext) -> Result | None:
    chart = ctx.obj
    status = chart.status
    if ctx.noop and status.artifact is not None:
        status.observed_source_artifact_revision = ctx.source_revision
        mark_stored(ctx, ctx.version)
        return None
    assert ctx.package is not None
    name = _safe(chart.spec.chart.rstrip("/").rsplit("/", 1)[-1])
    written = await write_file(ctx, f"{name}-{_safe(ctx.version)}.tgz", ctx.package)
    status.observed_chart_name = chart.spec.chart
    status.observed_source_artifact_revision = ctx.source_revision
    status.observed_values_files = values_files(ctx) or None
    kind = chart.spec.source_ref.kind
    verb = "pulled" if kind == "HelmRepository" else "packaged"
    await record_artifact(
        ctx,
        written,
        revision=ctx.version,
        new_artifact_message=f"{verb} '{name}' chart with version '{ctx.version}'",
    )
    return None


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "_", text)


STEPS = (
    reconcile_storage,
    reconcile_unsupported,
    reconcile_verify,
    reconcile_gates,
    reconcile_source,
    reconcile_artifact,
)


def charts_of(store: Store, kind: str) -> Callable[[Change], list[str]]:
    """Which HelmCharts to rebuild when a source of `kind` got a new artifact."""

    def mapper(change: Change) -> list[str]:
        old = ((change.old or {}).get("status") or {}).get("artifact") or {}
        new = ((change.new or {}).get("status") or {}).get("artifact") or {}
        if change.kind == "updated" and old.get("digest") == new.get("digest"):
            return []
        meta = change.obj["metadata"]
        source = dependencies.source_ref(kind, meta.get("namespace", ""), meta["name"])
        return store.referencing(dependencies.SOURCE_REF, source)

    return mapper


def reconciler(
    storage: Storage,
    *,
    stores: ChartStores,
    gates: Store | None = None,
    limits: Limits | None = None,
    chart_max_size: int = DEFAULT_CHART_MAX_SIZE,
    index_max_size: int = DEFAULT_INDEX_MAX_SIZE,
) -> Reconciler[HelmChartContext]:
    context = functools.partial(
        HelmChartContext,
        storage=storage,
        stores=stores,
        gates=gates,
        limits=limits or Limits(),
        chart_max_size=chart_max_size,
        index_max_size=index_max_size,
    )
    return source_reconciler(HelmChart, context, STEPS, finalize=finalize)
