"""`sluice build helmrelease` and `sluice diff helmrelease`: preview a release before merging.

`build` prints the manifests the helm-controller would install (`helm_builds`);
`diff` dry-runs them on the server with helm's field manager and compares the
result with the live objects, as `diff kustomization` does (Secret values
masked; exit 0 no differences, 1 differences, 2 the diff could not be made),
and lists as deleted what the release's current manifest (read from Helm's
storage, within the controller's limits) holds that the new one does not.
Hooks are not compared: helm runs them around an action and keeps none.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from sluice_api.meta import ObjectId
from sluice_cli.diffing import report
from sluice_cli.helm_builds import (
    chart_directory,
    compose_values,
    is_hook,
    load_helmrelease,
    release_of,
    render,
)
from sluice_cli.local_builds import dump_all
from sluice_cli.terminal import ERROR, OK, Failure, add_cluster_flags, connected, run_verb
from sluice_runtime.helming import storage
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.discovery import RestMapper, UnknownKind
from sluice_runtime.kube.errors import KubeError
from sluice_runtime.kube.resources import SECRET
from sluice_runtime.ssa.errors import ApplyError
from sluice_runtime.ssa.manager import ResourceManager

HELM_FIELD_MANAGER = "helm"
"""The field manager helm writes with: a dry-run under another name would
conflict with every field helm set."""

BUILD_DESCRIPTION = """The build helmrelease command renders a HelmRelease's chart as the
helm-controller would install it: its values composed as the controller
composes them (valuesFrom read from the cluster, then values, then any
--values file), with the release's name and namespace, its post-renderers
and commonMetadata. It prints the multi-doc YAML to stdout.

examples:
  # Render a local chart with the values of the cluster's HelmRelease
  sluice build helmrelease podinfo -n apps --chart ./charts/podinfo

  # Render the chart the cluster's HelmRelease uses (its HelmChart's artifact)
  sluice build hr podinfo -n apps --values ./staging-values.yaml

  # Offline: a HelmRelease from a file, no cluster
  sluice build hr podinfo --chart ./charts/podinfo --helmrelease-file ./apps/podinfo.yaml --dry-run
"""

DIFF_DESCRIPTION = """The diff helmrelease command renders a HelmRelease's chart as the
helm-controller would and compares it with the cluster by a server-side
dry-run; objects the release holds that the new manifest does not are listed
as deleted. Secret values are masked.

Exit codes: 0 no differences, 1 differences found, 2 the diff failed.

examples:
  # What an upgrade to a local chart change would do
  sluice diff helmrelease podinfo -n apps --chart ./charts/podinfo

  # What new values would do, from a HelmRelease file
  sluice diff hr podinfo -n apps --chart ./charts/podinfo --helmrelease-file ./apps/podinfo.yaml
"""


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="name of the HelmRelease")
    parser.add_argument(
        "--chart", type=Path,
        help="a local chart directory (default: the artifact of the HelmRelease's chart)",
    )  # fmt: skip
    parser.add_argument(
        "--helmrelease-file", type=Path,
        help="path to a file holding the HelmRelease (default: read it from the cluster)",
    )  # fmt: skip
    parser.add_argument(
        "--values", action="append", type=Path, default=[], metavar="FILE",
        help="a values file merged over the HelmRelease's values (repeatable)",
    )  # fmt: skip
    add_cluster_flags(parser)


def add_build(kinds: Any) -> None:
    parser = kinds.add_parser(
        "helmrelease",
        aliases=["hr"],
        help="render a HelmRelease's chart as the helm-controller would",
        description=BUILD_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _flags(parser)
    parser.add_argument(
        "--dry-run", action="store_true",
        help="do not read the cluster: needs --chart; valuesFrom is not read",
    )  # fmt: skip
    parser.set_defaults(run=lambda args: run_verb("build", lambda: asyncio.run(_build(args))))


def add_diff(kinds: Any) -> None:
    parser = kinds.add_parser(
        "helmrelease",
        aliases=["hr"],
        help="diff a HelmRelease's rendered chart with the cluster",
        description=DIFF_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _flags(parser)
    parser.set_defaults(run=lambda args: run_verb("diff", lambda: asyncio.run(_diff(args))))


@contextlib.asynccontextmanager
async def _client(args: argparse.Namespace) -> AsyncIterator[KubeClient | None]:
    if getattr(args, "dry_run", False):
        yield None
        return
    async with connected(args.kubeconfig, args.context) as client:
        yield client


async def _build(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        hr = await load_helmrelease(client, args.namespace, args.name, args.helmrelease_file)
        values = await compose_values(client, hr, args.values)
        async with chart_directory(client, hr, args.chart) as chart:
            objects = await render(hr, chart, values)
    sys.stdout.write(dump_all(objects))
    return OK


async def _diff(args: argparse.Namespace) -> int:
    async with connected(args.kubeconfig, args.context) as client:
        hr = await load_helmrelease(client, args.namespace, args.name, args.helmrelease_file)
        if hr.spec.kube_config is not None and args.helmrelease_file is None:
            raise Failure(
                f"HelmRelease {args.namespace}/{args.name} releases to another cluster "
                "(spec.kubeConfig); diff it with --kubeconfig of that cluster and "
                "--helmrelease-file",
                ERROR,
            )
        values = await compose_values(client, hr, args.values)
        async with chart_directory(client, hr, args.chart) as chart:
            objects = [o for o in await render(hr, chart, values) if not is_hook(o)]
        mapper = RestMapper(client)
        _, namespace = release_of(hr)
        await _in_release_namespace(mapper, objects, namespace)
        manager = ResourceManager(client, mapper, field_manager=HELM_FIELD_MANAGER, owner_labels={})
        try:
            previews = await manager.preview_all(objects, force=True)
        except ApplyError as error:
            raise Failure(f"dry-run failed: {' '.join(str(error).split())}", ERROR) from None
        current = await _current_objects(client, mapper, hr)
    built = {preview.id for preview in previews}
    return report(previews, [oid for oid in current if oid not in built])


async def _in_release_namespace(mapper: RestMapper, objects: list[JSON], namespace: str) -> None:
    """Put namespaced objects without a namespace into the release's, as helm installs them."""
    for obj in objects:
        meta = obj.setdefault("metadata", {})
        if meta.get("namespace"):
            continue
        try:
            namespaced = (await mapper.resource_for(obj["apiVersion"], obj["kind"])).namespaced
        except UnknownKind:
            namespaced = True  # a kind the chart's own CRDs define: helm installs it there
        if namespaced:
            meta["namespace"] = namespace


async def _current_objects(client: KubeClient, mapper: RestMapper, hr: Any) -> list[ObjectId]:
    """The objects of the release's newest stored version; none when it has never released."""
    name, namespace = release_of(hr)
    storage_namespace = hr.spec.storage_namespace or namespace
    try:
        listed = await client.list(
            SECRET, namespace=storage_namespace, label_selector=f"owner=helm,name={name}"
        )
    except KubeError as error:
        raise Failure(f"cannot read release {storage_namespace}/{name}: {error}", ERROR) from None
    if not listed.items:
        return []
    newest = max(listed.items, key=storage.stored_version)
    secret_name = newest["metadata"]["name"]
    try:
        release = storage.decode_release(str((newest.get("data") or {}).get("release") or ""))
        objects = storage.release_objects(release)
    except storage.StorageError as error:
        raise Failure(f"release Secret '{secret_name}' {error}", ERROR) from None
    await _in_release_namespace(mapper, objects, namespace)
    return [ObjectId.of(obj) for obj in objects]
