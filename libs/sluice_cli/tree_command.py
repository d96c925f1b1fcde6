"""`sluice tree kustomization NAME`: what a Kustomization applied, as a tree.

The tree is the Kustomization's inventory (`status.inventory`), nested
through the Kustomizations it applied (their own inventories, as deep as
they go) and through the HelmReleases it applied: their objects are read,
as `flux tree` reads them, from the manifest of the release's current
version in Helm's storage Secret (`sh.helm.release.v1.<release>.v<version>`).
Where the HelmRelease API is not served (a cluster without a
helm-controller) a HelmRelease is a leaf. A Kustomization that appears twice
on one path (a cycle) is shown once, then marked.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gzip
import json
import sys
from typing import Any

import yaml
from rich.tree import Tree

from sluice_api.meta import ObjectId
from sluice_cli.kinds import HELM_RELEASE, KUSTOMIZATION
from sluice_cli.terminal import OK, Failure, add_cluster_flags, connected, console, run_verb
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.discovery import RestMapper, UnknownKind, split_api_version
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import SECRET

DESCRIPTION = """The tree kustomization command prints the resources reconciled by a
Kustomization, following the Kustomizations it applied.

examples:
  # Print the resources managed by the root Kustomization
  sluice tree kustomization flux-system

  # Print the Flux resources only, as JSON
  sluice tree ks flux-system --compact -o json
"""

KS_GROUP = KUSTOMIZATION.rt.group


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "tree",
        help="print the resources reconciled by Flux",
        description="The tree sub-commands print the resources reconciled by Flux.",
    )
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    ks = kinds.add_parser(
        "kustomization",
        aliases=["ks"],
        help="print the resource inventory of a Kustomization",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ks.add_argument("name", help="name of the Kustomization")
    ks.add_argument(
        "--compact", action="store_true",
        help="list only Flux resources (Kustomizations, HelmReleases)",
    )  # fmt: skip
    ks.add_argument(
        "-o", "--output", choices=("tree", "json", "yaml"), default="tree",
        help="the format of the output (default tree)",
    )  # fmt: skip
    add_cluster_flags(ks)
    ks.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    return run_verb("tree", lambda: asyncio.run(_tree(args)))


async def _tree(args: argparse.Namespace) -> int:
    async with connected(args.kubeconfig, args.context) as client:
        try:
            root = await client.get(KUSTOMIZATION.rt, args.name, args.namespace)
        except NotFound:
            raise Failure(f"Kustomization {args.namespace}/{args.name} not found") from None
        node = await build_tree(client, root, compact=args.compact)
    if args.output == "json":
        sys.stdout.write(json.dumps(node, indent=2) + "\n")
    elif args.output == "yaml":
        sys.stdout.write(yaml.safe_dump(node, sort_keys=False))
    else:
        console().print(render(node))
    return OK


async def build_tree(
    client: KubeClient, ks: JSON, *, compact: bool, seen: frozenset[str] = frozenset()
) -> JSON:
    """`{"resource": "Kind/ns/name", "resources": [...]}`, children nested."""
    oid = ObjectId.of(ks)
    node: JSON = {"resource": oid.display, "resources": []}
    if oid.display in seen:
        node["resource"] += " (cycle)"
        return node
    entries = ((ks.get("status") or {}).get("inventory") or {}).get("entries") or []
    children = []
    for entry in entries:
        try:
            children.append(ObjectId.from_inventory_id(str(entry.get("id") or "")))
        except ValueError:
            continue
    for child in sorted(children, key=_order):
        flux = child.group.endswith("toolkit.fluxcd.io")
        if compact and not flux:
            continue
        if child.group == KS_GROUP and child.kind == "Kustomization":
            try:
                nested = await client.get(KUSTOMIZATION.rt, child.name, child.namespace)
            except NotFound:
                node["resources"].append(
                    {"resource": child.display + " (not found)", "resources": []}
                )
                continue
            node["resources"].append(
                await build_tree(client, nested, compact=compact, seen=seen | {oid.display})
            )
        elif child.group == HELM_RELEASE.group and child.kind == HELM_RELEASE.kind:
            node["resources"].append(await _release_node(client, child, compact=compact))
        else:
            node["resources"].append({"resource": child.display, "resources": []})
    return node


async def _release_node(client: KubeClient, release: ObjectId, *, compact: bool) -> JSON:
    node: JSON = {"resource": release.display, "resources": []}
    try:
        hr = await client.get(HELM_RELEASE, release.name, release.namespace)
    except NotFound:  # not served here, or gone
        return node
    spec, status = hr.get("spec") or {}, hr.get("status") or {}
    history = [h for h in status.get("history") or [] if isinstance(h, dict)]
    if not history or compact:
        return node
    current = history[0]
    name = str(current.get("name") or spec.get("releaseName") or release.name)
    namespace = str(current.get("namespace") or spec.get("targetNamespace") or release.namespace)
    storage = str(status.get("storageNamespace") or spec.get("storageNamespace") or namespace)
    secret_name = f"sh.helm.release.v1.{name}.v{current.get('version')}"
    try:
        secret = await client.get(SECRET, secret_name, storage)
    except NotFound:
        node["resources"].append(
            {"resource": f"Secret/{storage}/{secret_name} (not found)", "resources": []}
        )
        return node
    try:
        manifests = release_objects(str((secret.get("data") or {}).get("release") or ""))
    except ValueError as error:
        node["resource"] += f" (release unreadable: {error})"
        return node
    mapper = RestMapper(client)
    ids = []
    for api_version, kind, object_namespace, object_name in manifests:
        if not object_namespace:
            try:
                namespaced = (await mapper.resource_for(api_version, kind)).namespaced
            except UnknownKind:
                namespaced = True  # as Helm installs an unknown kind: into the release's namespace
            object_namespace = namespace if namespaced else ""
        group = split_api_version(api_version)[0]
        ids.append(ObjectId(group, kind, object_namespace, object_name))
    node["resources"] = [
        {"resource": oid.display, "resources": []} for oid in sorted(ids, key=_order)
    ]
    return node


def release_objects(stored: str) -> list[tuple[str, str, str, str]]:
    """(apiVersion, kind, namespace, name) of each object in a Helm storage Secret's release.

    `stored` is the Secret's `data.release` as the API returns it: base64 of
    Helm's own encoding, itself base64 of the release JSON, gzipped.
    """
    try:
        encoded = base64.b64decode(stored, validate=True)
        raw = base64.b64decode(encoded, validate=True)
        if raw[:3] == b"\x1f\x8b\x08":
            raw = gzip.decompress(raw)
        release = json.loads(raw)
        documents = yaml.safe_load_all(str(release.get("manifest") or ""))
        objects = []
        for document in documents:
            if not isinstance(document, dict) or not document.get("kind"):
                continue
            meta = document.get("metadata") or {}
            objects.append((
                str(document.get("apiVersion") or ""), str(document["kind"]),
                str(meta.get("namespace") or ""), str(meta.get("name") or ""),
            ))  # fmt: skip
        return objects
    except (ValueError, OSError, EOFError, yaml.YAMLError, AttributeError) as error:
        raise ValueError(" ".join(str(error).split()) or type(error).__name__) from None


def _order(oid: ObjectId) -> tuple[int, str, str, str]:
    # Cluster-wide definitions first, then the rest as the inventory lists them by kind.
    first = 0 if oid.kind in ("CustomResourceDefinition", "Namespace") else 1
    return (first, oid.kind, oid.namespace, oid.name)


def render(node: JSON, tree: Tree | None = None) -> Tree:
    branch = Tree(node["resource"]) if tree is None else tree.add(node["resource"])
    for child in node["resources"]:
        render(child, branch)
    return branch
