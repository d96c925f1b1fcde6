"""What the HelmChart steps share: the context, version selection, and the
chart handling common to every source (values files merged, unpacked, packaged)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sluice_api.source import HelmChart, SourceCondition, SourceReason
from sluice_runtime import yamlloading
from sluice_runtime.artifacts.fetching import ArtifactError, extract_tarball
from sluice_runtime.helming import HelmError, merge_values, run_helm
from sluice_runtime.informing.watching import Store
from sluice_runtime.reconciling.errors import Stalling, StepError, Waiting
from sluice_runtime.versions import parse_range, parse_version
from source_controller.helmrepository import DEFAULT_CHART_MAX_SIZE, DEFAULT_INDEX_MAX_SIZE
from source_controller.sources import SourceContext

HELM_TIMEOUT = 120.0
SOURCE_WAIT = 10.0
HEX = re.compile(r"[0-9a-f]{12,}")


@dataclass(frozen=True, kw_only=True)
class ChartStores:
    """The source caches a HelmChart resolves its sourceRef in."""

    helm_repositories: Store
    git_repositories: Store
    buckets: Store


@dataclass(kw_only=True)
class HelmChartContext(SourceContext[HelmChart]):
    stores: ChartStores
    chart_max_size: int = DEFAULT_CHART_MAX_SIZE
    index_max_size: int = DEFAULT_INDEX_MAX_SIZE
    """`--helm-index-max-size`: what a stored index was fetched under, and is parsed under."""
    version: str = ""
    source_revision: str = ""
    noop: bool = False
    package: Path | None = None


def select_version(entries: list[dict[str, Any]], constraint: str) -> dict[str, Any]:
    """The index entry with the highest version matching `constraint`."""
    spec = parse_range(constraint)
    best: tuple[Any, dict[str, Any]] | None = None
    for entry in entries:
        version = parse_version(str(entry.get("version", "")))
        if version is not None and spec.match(version) and (best is None or version > best[0]):
            best = (version, entry)
    if best is None:
        raise LookupError(f"no chart version matches '{constraint}'")
    return best[1]


def pull_error(message: str) -> StepError:
    return StepError(SourceReason.CHART_PULL_ERROR, message, condition=SourceCondition.FETCH_FAILED)


def package_error(message: str) -> StepError:
    return StepError(
        SourceReason.CHART_PACKAGE_ERROR, message, condition=SourceCondition.BUILD_FAILED
    )


def values_files(ctx: HelmChartContext) -> list[str]:
    spec = ctx.obj.spec
    files = ([spec.values_file] if spec.values_file else []) + list(spec.values_files or [])
    return files


def source_of(ctx: HelmChartContext, store: Store) -> dict[str, Any]:
    ref = ctx.obj.spec.source_ref
    obj = store.get(f"{ctx.obj.namespace}/{ref.name}")
    if obj is None:
        raise Waiting(
            SourceReason.FAILED,
            f"{ref.kind} '{ctx.obj.namespace}/{ref.name}' not found",
            requeue_after=SOURCE_WAIT,
        )
    return obj


async def repackage_with_values(ctx: HelmChartContext, package: Path, work: Path) -> Path:
    """A pulled chart with `valuesFiles` merged in: unpacked and packaged again."""
    if not values_files(ctx):
        return package
    unpacked = work / "unpacked"
    unpack(package, unpacked, ctx)
    chart_dir = single_chart_dir(unpacked)
    await merge_values_files(ctx, chart_dir, chart_dir)
    return await package_chart(ctx, chart_dir, work / "out", version=None)


def unpack(package: Path, dest: Path, ctx: HelmChartContext) -> None:
    try:
        extract_tarball(
            package,
            dest,
            max_size=ctx.limits.artifact_max_size,
            max_members=ctx.limits.artifact_max_files,
        )
    except (ArtifactError, OSError, EOFError) as error:
        raise package_error(f"chart archive cannot be unpacked: {error}") from None


def single_chart_dir(root: Path) -> Path:
    dirs = [p for p in root.iterdir() if p.is_dir()]
    if len(dirs) != 1 or not (dirs[0] / "Chart.yaml").is_file():
        raise package_error("chart archive does not hold exactly one chart directory")
    return dirs[0]


def already_stored(ctx: HelmChartContext, version: str, *, source_revision: str) -> bool:
    """Record the chart version this reconcile resolved; True (a no-op) when the
    artifact stored is that version, of the same chart and values files."""
    ctx.version = version
    ctx.source_revision = source_revision
    ctx.event_metadata["revision"] = version
    ctx.noop = up_to_date(ctx)
    return ctx.noop


def up_to_date(ctx: HelmChartContext) -> bool:
    status = ctx.obj.status
    artifact = status.artifact
    return (
        artifact is not None
        and artifact.revision == ctx.version
        and status.observed_chart_name == ctx.obj.spec.chart
        and (status.observed_values_files or []) == values_files(ctx)
        and ctx.storage.exists(artifact.path)
    )


async def merge_values_files(ctx: HelmChartContext, root: Path, chart_dir: Path) -> None:
    """Merge `valuesFiles` (paths relative to `root`) in order into chart_dir/values.yaml."""
    files = values_files(ctx)
    if not files:
        return
    merged: dict[str, Any] = {}
    for name in files:
        path = (root / name).resolve()
        if path != root.resolve() and root.resolve() not in path.parents:
            raise Stalling(
                SourceReason.INVALID_CHART_REFERENCE,
                f"values file '{name}' points outside the source",
            )
        if not path.is_file():
            if ctx.obj.spec.ignore_missing_values_files:
                continue
            raise package_error(f"values file '{name}' not found")
        try:
            values = (
                await yamlloading.load_file_off_loop(path, limits=yamlloading.VALUES_LIMITS) or {}
            )
        except yamlloading.YAMLError as error:
            raise package_error(f"values file '{name}' is invalid YAML: {error}") from None
        if not isinstance(values, dict):
            raise package_error(f"values file '{name}' is not a map")
        merged = merge_values(merged, values)
    # Off the loop too: a values tree near its limits takes PyYAML's dumper seconds.
    text = await yamlloading.off_loop(yaml.safe_dump, merged, sort_keys=True)
    await yamlloading.off_loop((chart_dir / "values.yaml").write_text, text)


async def package_chart(
    ctx: HelmChartContext, chart_dir: Path, out: Path, *, version: str | None
) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    args = ["package", str(chart_dir), "--destination", str(out)]
    if version is not None:
        args += ["--version", version]
    try:
        await run_helm(args, timeout=HELM_TIMEOUT, confine_to=out.parent)
    except HelmError as error:
        raise package_error(f"helm package of '{ctx.obj.spec.chart}' failed: {error}") from None
    packages = list(out.glob("*.tgz"))
    if len(packages) != 1:
        raise package_error("helm package produced no archive")
    return packages[0]
