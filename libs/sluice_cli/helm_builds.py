"""A HelmRelease rendered locally, as the helm-controller would release it.

`sluice build helmrelease` and `sluice diff helmrelease` answer "what would
the helm-controller install if this chart and these values were released?".
They take the HelmRelease (from the cluster, or from a file), compose its
values with the very function the controller uses
(`sluice_runtime.helming.values`: `valuesFrom` read from the cluster, then
`values`, then any `--values` file given here), and render the chart with
the same helm binary and the same post-renderers and `commonMetadata`
(`sluice_runtime.helming.postrendering`), as `helm template` with the
release's name and namespace. The chart is a local directory (`--chart`),
or the artifact of the HelmRelease's HelmChart (or `chartRef`) when the
source-controller's artifact server is reachable from here.

Offline (`--dry-run`), nothing is read from the cluster: the HelmRelease
comes from `--helmrelease-file` (or is NAME with no spec), and `valuesFrom`
is skipped, saying so on stderr.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import aiohttp

from sluice_api import HelmRelease
from sluice_cli.kinds import HELM_RELEASE
from sluice_cli.local_builds import load_resource
from sluice_cli.terminal import ERROR, Failure
from sluice_runtime import yamlloading
from sluice_runtime.artifacts.fetching import ArtifactError, fetch_artifact
from sluice_runtime.helming import HelmError, postrendering, run_helm
from sluice_runtime.helming import values as helm_values
from sluice_runtime.helming.storage import release_name
from sluice_runtime.helming.values import merge_values
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import KubeError
from sluice_runtime.kube.resources import ResourceType

RENDER_TIMEOUT = 120.0
MAX_CHART_SIZE = 64 << 20
HOOK_ANNOTATION = "helm.sh/hook"
OUTPUT_LIMITS = yamlloading.YamlLimits(max_bytes=64 << 20, max_nodes=4_000_000)

_SOURCES = {
    "HelmChart": ResourceType("source.toolkit.fluxcd.io", "v1", "helmcharts", "HelmChart"),
    "OCIRepository": ResourceType(
        "source.toolkit.fluxcd.io", "v1", "ocirepositories", "OCIRepository"
    ),
    "ExternalArtifact": ResourceType(
        "source.toolkit.fluxcd.io", "v1", "externalartifacts", "ExternalArtifact"
    ),
}


async def load_helmrelease(
    client: KubeClient | None, namespace: str, name: str, file: Path | None
) -> HelmRelease:
    """The HelmRelease from `file` when given, else from the cluster; offline
    without a file, a HelmRelease of that name with an empty spec."""
    if client is None and file is None:
        return HelmRelease.from_obj(
            {
                "apiVersion": "helm.toolkit.fluxcd.io/v2",
                "kind": "HelmRelease",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "interval": "10m",
                    "chart": {
                        "spec": {
                            "chart": name,
                            "sourceRef": {"kind": "HelmRepository", "name": name},
                        }
                    },
                },
            }
        )
    return await load_resource(
        HelmRelease, HELM_RELEASE, client, namespace, name, file, flag="--helmrelease-file"
    )


async def compose_values(
    client: KubeClient | None, hr: HelmRelease, files: list[Path]
) -> dict[str, Any]:
    """The controller's values for `hr` (valuesFrom read with `client`), then each file."""
    if client is not None:
        try:
            values = await helm_values.compose(client, hr.namespace, hr.spec)
        except helm_values.ValuesError as error:
            raise Failure(f"values: {error}", ERROR) from None
    else:
        if hr.spec.values_from:
            print(
                f"note: {len(hr.spec.values_from)} valuesFrom reference(s) not read (--dry-run)",
                file=sys.stderr,
            )
        values = dict(hr.spec.values or {})
    for file in files:
        try:
            loaded = yamlloading.load_file(file, limits=yamlloading.VALUES_LIMITS) or {}
        except yamlloading.YAMLError as error:
            raise Failure(f"--values {file}: {error}", ERROR) from None
        if not isinstance(loaded, dict):
            raise Failure(f"--values {file} is not a YAML map", ERROR)
        values = merge_values(values, loaded)
    return values


@asynccontextmanager
async def chart_directory(client: KubeClient | None, hr: HelmRelease, chart: Path | None) -> Any:
    """The chart to render: `chart`, or the artifact of the HelmRelease's chart source."""
    if chart is not None:
        if not (chart / "Chart.yaml").is_file():
            raise Failure(f"--chart {chart} is not a chart directory (no Chart.yaml)", ERROR)
        yield chart
        return
    if client is None:
        raise Failure("--dry-run needs --chart: the chart's artifact is not read", ERROR)
    kind, namespace, name = _chart_source(hr)
    try:
        source = await client.get(_SOURCES[kind], name, namespace)
    except KubeError as error:
        raise Failure(f"{kind} {namespace}/{name}: {error}; pass --chart", ERROR) from None
    artifact = (source.get("status") or {}).get("artifact") or {}
    if not artifact.get("url"):
        raise Failure(f"{kind} {namespace}/{name} has no artifact yet; pass --chart", ERROR)
    with tempfile.TemporaryDirectory(prefix="sluice-chart-") as scratch:
        dest = Path(scratch) / "chart"
        try:
            async with aiohttp.ClientSession() as session:
                await fetch_artifact(
                    session,
                    url=str(artifact["url"]),
                    digest=str(artifact.get("digest") or ""),
                    dest=dest,
                    max_size=MAX_CHART_SIZE,
                )
        except (ArtifactError, ValueError, aiohttp.ClientError, OSError) as error:
            raise Failure(
                f"the chart artifact of {kind} {namespace}/{name} could not be fetched from "
                f"{artifact['url']} ({error}); pass --chart",
                ERROR,
            ) from None
        found = [p for p in dest.iterdir() if (p / "Chart.yaml").is_file()]
        if len(found) != 1:
            raise Failure(f"the artifact of {kind} {namespace}/{name} holds no chart", ERROR)
        yield found[0]


def _chart_source(hr: HelmRelease) -> tuple[str, str, str]:
    if hr.spec.chart_ref is not None:
        ref = hr.spec.chart_ref
        return ref.kind, ref.namespace or hr.namespace, ref.name
    # The HelmChart the controller makes for spec.chart: `<namespace>-<name>`, in
    # the source's namespace (named from the spec, as the controller names it).
    chart = hr.spec.chart
    source_namespace = (chart.spec.source_ref.namespace if chart else None) or hr.namespace
    return "HelmChart", source_namespace, f"{hr.namespace}-{hr.metadata.name}"


def release_of(hr: HelmRelease) -> tuple[str, str]:
    """The release's name and namespace, as the helm-controller names them."""
    spec = hr.spec
    return (
        release_name(hr.metadata.name, spec.target_namespace, spec.release_name),
        spec.target_namespace or hr.namespace,
    )


async def render(hr: HelmRelease, chart: Path, values: dict[str, Any]) -> list[JSON]:
    """`helm template` of `chart` with `values`, as the release `hr` would install it:
    CRDs unless the install skips them, hooks unless disabled, no test hooks, and the
    spec's post-renderers and commonMetadata."""
    name, namespace = release_of(hr)
    install = hr.spec.install
    with _private_directory() as work:
        values_file = work / "values.json"
        values_file.write_text(json.dumps(values))
        values_file.chmod(0o600)
        args = ["template", name, str(chart), "--namespace", namespace]
        args += ["--values", str(values_file), "--skip-tests"]
        if not (install is not None and (install.skip_crds or install.crds == "Skip")):
            args.append("--include-crds")
        if install is not None and install.disable_hooks:
            args.append("--no-hooks")
        args += postrendering.helm_args(
            hr.spec.post_renderers or [], hr.spec.common_metadata, work / "post-render"
        )
        try:
            result = await run_helm(args, timeout=RENDER_TIMEOUT, confine_to=None)
        except HelmError as error:
            raise Failure(f"helm template failed: {error}", ERROR) from None
    try:
        documents = yamlloading.load_all(result.stdout, limits=OUTPUT_LIMITS)
    except yamlloading.YAMLError as error:
        raise Failure(f"helm's output is not YAML: {error}", ERROR) from None
    return [d for d in documents if isinstance(d, dict) and d.get("kind")]


def is_hook(obj: JSON) -> bool:
    """A Helm hook: run around an action, never part of the release's manifest."""
    return HOOK_ANNOTATION in ((obj.get("metadata") or {}).get("annotations") or {})


@contextmanager
def _private_directory() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="sluice-helm-") as scratch:
        yield Path(scratch)
