"""The chart step: the chart artifact a HelmRelease releases, fetched and checked.

`spec.chart` makes the controller create and own a HelmChart
`<namespace>-<name>` in the source's namespace; `spec.chartRef` names an
existing HelmChart, an OCIRepository holding a chart (pushed with
`helm push`) or an ExternalArtifact (Flux 2.7) whose artifact is a chart.
Either way the release waits for its artifact, which is downloaded and
checked against its digest. A chart from an OCIRepository or an
ExternalArtifact gets the version `<version>+<first 12 hex of the artifact
digest>`, as in Flux, so content changed under the same version is a new
release.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml

from helm_controller.contexts import FIELD_MANAGER, HelmReleaseContext
from sluice_api.helm import NAME_LABEL, NAMESPACE_LABEL, HelmRelease, HelmReleaseReason
from sluice_api.meta import Artifact
from sluice_api.source import HelmChart, OCIRepository
from sluice_runtime import yamlloading
from sluice_runtime.artifacts.fetching import ArtifactError, fetch_artifact
from sluice_runtime.conditions import condition_of
from sluice_runtime.kube.errors import KubeError
from sluice_runtime.kube.resources import ResourceType
from sluice_runtime.reconciling.errors import Stalling, StepError, Waiting
from sluice_runtime.reconciling.steps import Result, step

Reason = HelmReleaseReason
HELMCHART = ResourceType.of_model(HelmChart)
OCIREPOSITORY = ResourceType.of_model(OCIRepository)
MAX_CHART_SIZE = 64 << 20


def chart_name(hr: HelmRelease) -> str:
    """The HelmChart a `spec.chart` HelmRelease owns: `<namespace>-<name>`."""
    return f"{hr.metadata.namespace or 'default'}-{hr.metadata.name}"


def desired_chart(hr: HelmRelease) -> dict[str, Any]:
    """The HelmChart a `spec.chart` HelmRelease owns, as it applies it."""
    assert hr.spec.chart is not None
    template = hr.spec.chart
    spec = template.spec
    source_ns = spec.source_ref.namespace or hr.metadata.namespace or "default"
    labels = {**((template.metadata.labels if template.metadata else None) or {})}
    labels.update({NAME_LABEL: hr.metadata.name, NAMESPACE_LABEL: hr.metadata.namespace or ""})
    chart_spec: dict[str, Any] = {
        "chart": spec.chart,
        "version": spec.version,
        "sourceRef": {"kind": spec.source_ref.kind, "name": spec.source_ref.name},
        "interval": spec.interval or hr.spec.interval,
        "reconcileStrategy": spec.reconcile_strategy,
    }
    # v2beta1's and v2beta2's valuesFile is merged before valuesFiles, as they did.
    values_files = [*([spec.values_file] if spec.values_file else []), *(spec.values_files or [])]
    if values_files:
        chart_spec["valuesFiles"] = values_files
    if spec.ignore_missing_values_files:
        chart_spec["ignoreMissingValuesFiles"] = True
    if spec.verify is not None:
        # Checked by the source-controller before the chart is stored (OCI charts), or
        # refused there, Stalled; the HelmRelease names the HelmChart's message.
        chart_spec["verify"] = spec.verify.model_dump(by_alias=True, exclude_none=True)
    metadata: dict[str, Any] = {"name": chart_name(hr), "namespace": source_ns, "labels": labels}
    annotations = template.metadata.annotations if template.metadata else None
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": HelmChart.api_version_str(),
        "kind": "HelmChart",
        "metadata": metadata,
        "spec": chart_spec,
    }


@step()
async def reconcile_chart(ctx: HelmReleaseContext) -> Result | None:
    hr = ctx.obj
    if hr.spec.chart is not None:
        wanted = desired_chart(hr)
        namespace = wanted["metadata"]["namespace"]
        if ctx.services.no_cross_namespace_refs and namespace != ctx.obj.namespace:
            raise Stalling(
                Reason.ARTIFACT_FAILED,
                f"cannot access HelmRepository/{namespace}: cross-namespace references are "
                "not allowed",
            )
        key = f"{namespace}/{wanted['metadata']['name']}"
        applied = ctx.services.applied_charts.get(key)
        if not as_applied(ctx.services.charts.get(key), wanted, applied):
            try:
                answer = await ctx.client.apply(
                    HELMCHART, wanted, field_manager=FIELD_MANAGER, force=True
                )
            except KubeError as error:
                raise StepError(
                    Reason.ARTIFACT_FAILED, f"cannot create HelmChart '{key}': {error}"
                ) from None
            ctx.services.applied_charts[key] = (wanted, answer["metadata"].get("generation"))
        hr.status.helm_chart = key
        kind = "HelmChart"
    else:
        assert hr.spec.chart_ref is not None
        ref = hr.spec.chart_ref
        kind = ref.kind
        key = f"{ref.namespace or ctx.obj.namespace}/{ref.name}"
        if (
            ctx.services.no_cross_namespace_refs
            and (ref.namespace or ctx.obj.namespace) != ctx.obj.namespace
        ):
            raise Stalling(
                Reason.ARTIFACT_FAILED,
                f"cannot access {kind}/{key}: cross-namespace references are not allowed",
            )
    stores = {
        "OCIRepository": ctx.services.oci_repositories,
        "ExternalArtifact": ctx.services.external_artifacts,
    }
    store = stores.get(kind, ctx.services.charts)
    chart = store.get(key)
    artifact = ((chart or {}).get("status") or {}).get("artifact")
    if chart is None or not artifact:
        raise Waiting(
            Reason.ARTIFACT_FAILED,
            f"{kind} '{key}' is not ready"
            + (f": {_ready_message(chart)}" if chart is not None and _ready_message(chart) else ""),
            requeue_after=ctx.services.requeue_dependency,
        )
    ctx.artifact = Artifact.model_validate(artifact)
    ctx.event_metadata["revision"] = ctx.artifact.revision
    work = Path(ctx.cleanup.enter_context(tempfile.TemporaryDirectory(prefix="hr-")))
    try:
        await fetch_artifact(
            ctx.services.session,
            url=ctx.artifact.url,
            digest=ctx.artifact.digest or "",
            dest=work / "chart",
            max_size=MAX_CHART_SIZE,
        )
    except (ArtifactError, ValueError) as error:
        raise StepError(
            Reason.ARTIFACT_FAILED,
            f"chart artifact '{ctx.artifact.revision}' of {kind} '{key}': {error}",
        ) from None
    dirs = [p for p in (work / "chart").iterdir() if (p / "Chart.yaml").is_file()]
    if len(dirs) != 1:
        raise StepError(Reason.ARTIFACT_FAILED, f"{kind} '{key}' artifact holds no chart")
    ctx.chart_dir = dirs[0]
    where = f"{kind} '{key}'"
    try:
        meta = await yamlloading.load_file_off_loop(
            ctx.chart_dir / "Chart.yaml", limits=yamlloading.VALUES_LIMITS
        )
    except yamlloading.YAMLError as error:
        raise StepError(
            Reason.ARTIFACT_FAILED, f"{where}: the chart's Chart.yaml is invalid: {error}"
        ) from None
    if not isinstance(meta, dict) or "name" not in meta or "version" not in meta:
        raise StepError(
            Reason.ARTIFACT_FAILED,
            f"{where}: the chart's Chart.yaml is invalid: it needs a name and a version",
        )
    ctx.chart_meta = meta
    ctx.revision = ctx.artifact.revision
    if kind in ("OCIRepository", "ExternalArtifact"):
        ctx.revision = version_with_digest(ctx.chart_dir, meta, ctx.artifact)
    return None


def version_with_digest(chart_dir: Path, meta: dict[str, Any], artifact: Artifact) -> str:
    """Write `<version>+<12 hex of the digest>` into Chart.yaml (and `meta`) and return it.

    An OCI tag can be pushed again with other content under the same chart
    version; the digest in the version makes that a new release, as in Flux.
    """
    digest = (artifact.digest or artifact.revision).rpartition(":")[2][:12]
    meta["version"] = f"{str(meta['version']).split('+', 1)[0]}+{digest}"
    (chart_dir / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return str(meta["version"])


def as_applied(
    cached: dict[str, Any] | None,
    wanted: dict[str, Any],
    applied: tuple[dict[str, Any], int | None] | None,
) -> bool:
    """Whether the HelmChart `cached` (the informer's copy) is still what this process
    last applied (`applied`: the body and the generation the answer had) and that is
    still `wanted`: then applying it again would change nothing, and a steady reconcile
    saves the request. Someone else's edit of its spec moves the generation; of the
    labels or annotations applied, shows in the cache."""
    if cached is None or applied is None:
        return False
    body, generation = applied
    if body != wanted or generation is None:
        return False
    meta = cached.get("metadata") or {}
    if meta.get("generation") != generation:
        return False
    for field in ("labels", "annotations"):
        have = meta.get(field) or {}
        if any(have.get(k) != v for k, v in (wanted["metadata"].get(field) or {}).items()):
            return False
    return True


def _ready_message(chart: dict[str, Any]) -> str:
    ready = condition_of(chart)
    if ready is None or ready.get("status") == "True":
        return ""
    return str(ready.get("message") or "")
