"""HelmChart: a packaged chart (.tgz) from a HelmRepository, a GitRepository or a Bucket.

STEPS: storage → unsupported → gates → source → artifact.

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
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sluice_api.meta import Artifact, parse_duration
from sluice_api.source import HelmChart, HelmRepository, SourceCondition, SourceReason
from sluice_runtime import dependencies
from sluice_runtime.artifacts.fetching import ArtifactError, extract_tarball
from sluice_runtime.artifacts.storage import Storage
from sluice_runtime.helming import HelmError, run_helm
from sluice_runtime.informing.watching import Change, Store
from sluice_runtime.kube.secrets import SecretError, require, secret_data
from sluice_runtime.oci import registry as oci
from sluice_runtime.reconciling.errors import Stalling, StepError, Waiting
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import Result, step
from sluice_runtime.redacting import redact_url
from sluice_runtime.versions import InvalidRange, parse_range, parse_version
from source_controller.helmrepository import (
    DEFAULT_CHART_MAX_SIZE,
    INDEX_CACHE,
    FetchError,
    InvalidIndex,
    chart_url,
    credentials,
    fetch,
    same_host,
)
from source_controller.ocirepository import run_bounded
from source_controller.sources import (
    NEGATIVE_CONDITIONS,
    Limits,
    SourceContext,
    finalize,
    mark_outdated,
    mark_stored,
    reconcile_gates,
    reconcile_storage,
    reconcile_unsupported,
    record_artifact,
    write_file,
)

HELM_TIMEOUT = 120.0
_SOURCE_WAIT = 10.0
_HEX = re.compile(r"[0-9a-f]{12,}")
HELM_CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
OCI_HINTS = oci.Hints(
    tls="a plain-HTTP registry needs the HelmRepository's spec.insecure: true",
    credentials="the HelmRepository's spec.secretRef",
)


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


def merge_values(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's coalescing of values files: maps merge, everything else is replaced."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_values(merged[key], value)
        else:
            merged[key] = value
    return merged


def _pull_error(message: str) -> StepError:
    return StepError(SourceReason.CHART_PULL_ERROR, message, condition=SourceCondition.FETCH_FAILED)


def _package_error(message: str) -> StepError:
    return StepError(
        SourceReason.CHART_PACKAGE_ERROR, message, condition=SourceCondition.BUILD_FAILED
    )


def _values_files(ctx: HelmChartContext) -> list[str]:
    spec = ctx.obj.spec
    files = ([spec.values_file] if spec.values_file else []) + list(spec.values_files or [])
    return files


@step(SourceCondition.FETCH_FAILED)
async def reconcile_source(ctx: HelmChartContext) -> Result | None:
    ref = ctx.obj.spec.source_ref
    if ref.kind == "HelmRepository":
        await _from_repository(ctx)
    elif ref.kind == "GitRepository":
        await _from_artifact(ctx, ctx.stores.git_repositories)
    elif ref.kind == "Bucket":
        await _from_artifact(ctx, ctx.stores.buckets)
    else:
        raise Stalling(
            SourceReason.INVALID_CHART_REFERENCE,
            f"spec.sourceRef.kind {ref.kind} is not supported by this version of Sluice",
        )
    return None


def _source(ctx: HelmChartContext, store: Store) -> dict[str, Any]:
    ref = ctx.obj.spec.source_ref
    obj = store.get(f"{ctx.obj.namespace}/{ref.name}")
    if obj is None:
        raise Waiting(
            SourceReason.FAILED,
            f"{ref.kind} '{ctx.obj.namespace}/{ref.name}' not found",
            requeue_after=_SOURCE_WAIT,
        )
    return obj


async def _from_repository(ctx: HelmChartContext) -> None:
    spec = ctx.obj.spec
    raw = _source(ctx, ctx.stores.helm_repositories)
    repo = HelmRepository.from_obj(raw)
    if repo.spec.type == "oci":
        await _from_oci(ctx, repo)
        return
    artifact = repo.status.artifact
    if artifact is None or not await asyncio.to_thread(ctx.storage.exists, artifact.path):
        raise Waiting(
            SourceReason.FAILED,
            f"HelmRepository '{ctx.obj.namespace}/{repo.metadata.name}' has no index artifact yet",
            requeue_after=_SOURCE_WAIT,
        )
    path = ctx.storage.path(artifact.path)
    try:
        index = await asyncio.to_thread(
            INDEX_CACHE.get, artifact.digest or artifact.revision, path.read_bytes
        )
    except (InvalidIndex, OSError) as error:
        raise _pull_error(f"cannot read the index of '{repo.metadata.name}': {error}") from None
    entries = (index.get("entries") or {}).get(spec.chart)
    if not entries:
        raise _pull_error(f"chart '{spec.chart}' not found in {redact_url(repo.spec.url)}")
    try:
        entry = select_version(entries, spec.version)
    except InvalidRange as error:
        raise Stalling(SourceReason.INVALID_CHART_REFERENCE, str(error)) from None
    except LookupError as error:
        raise _pull_error(f"chart '{spec.chart}': {error}") from None
    version = str(entry["version"])
    ctx.version = version
    ctx.source_revision = artifact.revision
    ctx.event_metadata["revision"] = version
    if _up_to_date(ctx):
        ctx.noop = True
        return
    mark_outdated(ctx, version)
    urls = entry.get("urls") or []
    if not urls:
        raise _pull_error(f"chart '{spec.chart}' version {version} has no URL in the index")
    url = chart_url(repo.spec.url, str(urls[0]))
    work = Path(ctx.cleanup.enter_context(tempfile.TemporaryDirectory(prefix="helmchart-")))
    try:
        creds = await credentials(ctx.client, ctx.obj.namespace, repo.spec, tmp=work)
    except SecretError as error:
        raise StepError(
            SourceReason.AUTHENTICATION_FAILED, str(error), condition=SourceCondition.FETCH_FAILED
        ) from None
    timeout = _timeout(repo)
    try:
        fetched = await fetch(
            url,
            creds=creds,
            # Credentials go to another host only when the repository says so.
            send_auth=repo.spec.pass_credentials or same_host(url, repo.spec.url),
            max_size=ctx.chart_max_size,
            timeout=timeout,
        )
    except FetchError as error:
        raise _pull_error(str(error)) from None
    assert fetched.body is not None
    expected = entry.get("digest")
    actual = hashlib.sha256(fetched.body).hexdigest()
    if expected and not hmac.compare_digest(str(expected), actual):
        raise _pull_error(
            f"chart '{spec.chart}' version {version}: digest sha256:{actual} does not match "
            f"the index's {expected}"
        )
    package = work / f"{spec.chart}-{version}.tgz"
    package.write_bytes(fetched.body)
    if _values_files(ctx):
        unpacked = work / "unpacked"
        _unpack(package, unpacked, ctx)
        chart_dir = _single_chart_dir(unpacked)
        await _merge_values_files(ctx, chart_dir, chart_dir)
        package = await _package(ctx, chart_dir, work / "out", version=None)
    ctx.package = package


async def _from_oci(ctx: HelmChartContext, repo: HelmRepository) -> None:
    spec = ctx.obj.spec
    if repo.spec.provider != "generic":
        raise Stalling(
            SourceReason.INVALID_CHART_REFERENCE,
            f"HelmRepository provider {repo.spec.provider} is not supported by this version "
            "of Sluice",
        )
    try:
        url = oci.OCIURL.parse(f"{repo.spec.url.rstrip('/')}/{spec.chart}")
    except ValueError as error:
        raise Stalling(SourceReason.URL_INVALID, str(error)) from None
    work = Path(ctx.cleanup.enter_context(tempfile.TemporaryDirectory(prefix="helmchart-")))
    registry = await _oci_registry(ctx, repo, url, work)
    timeout = _timeout(repo)
    where = f"{url.host}/{url.repository}"
    try:
        exact = parse_version(spec.version)
        if exact is not None:
            version = spec.version
        else:
            tags = await run_bounded(registry.list_tags, timeout=timeout)
            # helm push writes `+` (build metadata) as `_`: tags cannot hold `+`.
            entries = [{"version": t.replace("_", "+")} for t in tags]
            version = str(select_version(entries, spec.version)["version"])
        ctx.version = version
        ctx.source_revision = version
        ctx.event_metadata["revision"] = version
        if _up_to_date(ctx):
            ctx.noop = True
            return
        manifest = await run_bounded(registry.manifest, version.replace("+", "_"), timeout=timeout)
        layers = [m for m in manifest.layers() if m.get("mediaType") == HELM_CHART_LAYER]
        if len(layers) != 1:
            raise _pull_error(
                f"'{where}:{version}' holds no Helm chart (no single {HELM_CHART_LAYER} layer)"
            )
        mark_outdated(ctx, version)
        package = work / f"{url.repository.rsplit('/', 1)[-1]}-{version}.tgz"
        digest = str(layers[0].get("digest"))
        await run_bounded(
            lambda: registry.download(digest, package, max_size=ctx.chart_max_size),
            timeout=timeout,
        )
    except InvalidRange as error:
        raise Stalling(SourceReason.INVALID_CHART_REFERENCE, str(error)) from None
    except LookupError as error:
        raise _pull_error(f"chart '{where}': {error}") from None
    except oci.RegistryError as error:
        if error.auth:
            raise StepError(
                SourceReason.AUTHENTICATION_FAILED,
                str(error),
                condition=SourceCondition.FETCH_FAILED,
            ) from None
        raise _pull_error(f"chart '{where}': {error}") from None
    if _values_files(ctx):
        unpacked = work / "unpacked"
        _unpack(package, unpacked, ctx)
        chart_dir = _single_chart_dir(unpacked)
        await _merge_values_files(ctx, chart_dir, chart_dir)
        package = await _package(ctx, chart_dir, work / "out", version=None)
    ctx.package = package


async def _oci_registry(
    ctx: HelmChartContext, repo: HelmRepository, url: oci.OCIURL, work: Path
) -> oci.Registry:
    """A registry client with the HelmRepository's credentials and CA."""
    namespace = ctx.obj.namespace
    username = password = None
    ca_file: str | None = None
    try:
        if repo.spec.secret_ref is not None:
            name = f"{namespace}/{repo.spec.secret_ref.name}"
            data = await secret_data(ctx.client, namespace, repo.spec.secret_ref.name)
            if ".dockerconfigjson" in data:
                try:
                    username, password = oci.credentials_for(data[".dockerconfigjson"], url.host)
                except ValueError as error:
                    raise SecretError(f"secret '{name}': {error}") from None
                if username is None:
                    raise SecretError(
                        f"secret '{name}' has no credentials for registry '{url.host}'"
                    )
            else:
                require(data, "username", "password", secret=name)
                username, password = data["username"], data["password"]
        if repo.spec.cert_secret_ref is not None:
            name = f"{namespace}/{repo.spec.cert_secret_ref.name}"
            data = await secret_data(ctx.client, namespace, repo.spec.cert_secret_ref.name)
            require(data, "ca.crt", secret=name)
            ca = work / "ca.crt"
            ca.write_text(data["ca.crt"])
            ca_file = str(ca)
    except SecretError as error:
        raise StepError(
            SourceReason.AUTHENTICATION_FAILED, str(error), condition=SourceCondition.FETCH_FAILED
        ) from None
    return oci.Registry(
        url,
        insecure=repo.spec.insecure,
        ca_file=ca_file,
        username=username,
        password=password,
        timeout=_timeout(repo),
        hints=OCI_HINTS,
    )


def _timeout(repo: HelmRepository) -> float:
    return parse_duration(repo.spec.timeout).total_seconds() if repo.spec.timeout else 60.0


def _unpack(package: Path, dest: Path, ctx: HelmChartContext) -> None:
    try:
        extract_tarball(
            package,
            dest,
            max_size=ctx.limits.artifact_max_size,
            max_members=ctx.limits.artifact_max_files,
        )
    except (ArtifactError, OSError, EOFError) as error:
        raise _package_error(f"chart archive cannot be unpacked: {error}") from None


def _single_chart_dir(root: Path) -> Path:
    dirs = [p for p in root.iterdir() if p.is_dir()]
    if len(dirs) != 1 or not (dirs[0] / "Chart.yaml").is_file():
        raise _package_error("chart archive does not hold exactly one chart directory")
    return dirs[0]


def _up_to_date(ctx: HelmChartContext) -> bool:
    status = ctx.obj.status
    artifact = status.artifact
    return (
        artifact is not None
        and artifact.revision == ctx.version
        and status.observed_chart_name == ctx.obj.spec.chart
        and (status.observed_values_files or []) == _values_files(ctx)
        and ctx.storage.exists(artifact.path)
    )


async def _from_artifact(ctx: HelmChartContext, store: Store) -> None:
    """A chart directory in a GitRepository's or Bucket's artifact, packaged here."""
    spec = ctx.obj.spec
    kind = spec.source_ref.kind
    raw = _source(ctx, store)
    status = raw.get("status") or {}
    if not status.get("artifact"):
        raise Waiting(
            SourceReason.FAILED,
            f"{kind} '{ctx.obj.namespace}/{spec.source_ref.name}' has no artifact yet",
            requeue_after=_SOURCE_WAIT,
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
        raise _pull_error(f"cannot read the {kind}'s artifact: {error}") from None
    chart_dir = (source / spec.chart).resolve()
    if chart_dir != source.resolve() and source.resolve() not in chart_dir.parents:
        raise Stalling(
            SourceReason.INVALID_CHART_REFERENCE,
            f"chart path '{spec.chart}' points outside the artifact",
        )
    meta_file = chart_dir / "Chart.yaml"
    if not meta_file.is_file():
        raise _pull_error(f"no Chart.yaml in '{spec.chart}' of revision {artifact.revision}")
    try:
        meta = yaml.safe_load(meta_file.read_text())
        version = str(meta["version"])
    except (yaml.YAMLError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise _package_error(f"{spec.chart}/Chart.yaml is invalid: {error}") from None
    if spec.reconcile_strategy == "Revision":
        hexes = _HEX.findall(artifact.revision)
        suffix = hexes[-1] if hexes else hashlib.sha256(artifact.revision.encode()).hexdigest()
        version = f"{version}+{suffix[:12]}"
    ctx.version = version
    ctx.source_revision = artifact.revision
    ctx.event_metadata["revision"] = version
    if _up_to_date(ctx):
        ctx.noop = True
        return
    mark_outdated(ctx, version)
    await _merge_values_files(ctx, source, chart_dir)
    if meta.get("dependencies") or (chart_dir / "requirements.yaml").is_file():
        try:
            await run_helm(
                ["dependency", "build", str(chart_dir)], timeout=HELM_TIMEOUT, confine_to=work
            )
        except HelmError as error:
            raise _package_error(f"dependency build of '{spec.chart}' failed: {error}") from None
    ctx.package = await _package(ctx, chart_dir, work / "out", version=version)


async def _merge_values_files(ctx: HelmChartContext, root: Path, chart_dir: Path) -> None:
    """Merge `valuesFiles` (paths relative to `root`) in order into chart_dir/values.yaml."""
    files = _values_files(ctx)
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
            raise _package_error(f"values file '{name}' not found")
        try:
            values = yaml.safe_load(path.read_text()) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as error:
            raise _package_error(f"values file '{name}' is invalid YAML: {error}") from None
        if not isinstance(values, dict):
            raise _package_error(f"values file '{name}' is not a map")
        merged = merge_values(merged, values)
    (chart_dir / "values.yaml").write_text(yaml.safe_dump(merged, sort_keys=True))


async def _package(
    ctx: HelmChartContext, chart_dir: Path, out: Path, *, version: str | None
) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    args = ["package", str(chart_dir), "--destination", str(out)]
    if version is not None:
        args += ["--version", version]
    try:
        await run_helm(args, timeout=HELM_TIMEOUT, confine_to=out.parent)
    except HelmError as error:
        raise _package_error(f"helm package of '{ctx.obj.spec.chart}' failed: {error}") from None
    packages = list(out.glob("*.tgz"))
    if len(packages) != 1:
        raise _package_error("helm package produced no archive")
    return packages[0]


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
    status.observed_values_files = _values_files(ctx) or None
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
) -> Reconciler[HelmChartContext]:
    context = functools.partial(
        HelmChartContext,
        storage=storage,
        stores=stores,
        gates=gates,
        limits=limits or Limits(),
        chart_max_size=chart_max_size,
    )
    return Reconciler(
        model=HelmChart,
        steps=STEPS,
        context=context,
        negative_conditions=NEGATIVE_CONDITIONS,
        finalize=finalize,
    )
