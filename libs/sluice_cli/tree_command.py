"""`sluice tree kustomization NAME`: what a Kustomization applied, as a tree.

The tree is the Kustomization's inventory (`status.inventory`), nested
through the Kustomizations it applied (their own inventories, as deep as
they go) and showing the HelmReleases it applied as nodes: their releases
are Helm's, which Sluice does not manage. A Kustomization that appears twice
on one path (a cycle) is shown once, then marked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import yaml
from rich.tree import Tree

from sluice_cli.kinds import KUSTOMIZATION
from sluice_cli.terminal import OK, Failure, add_cluster_flags, connected, console, run_verb
from sluice_runtime.kube.applying import ObjectId
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import NotFound

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
        else:
            node["resources"].append({"resource": child.display, "resources": []})
    return node


def _order(oid: ObjectId) -> tuple[int, str, str, str]:
    # Cluster-wide definitions first, then the rest as the inventory lists them by kind.
    first = 0 if oid.kind in ("CustomResourceDefinition", "Namespace") else 1
    return (first, oid.kind, oid.namespace, oid.name)


def render(node: JSON, tree: Tree | None = None) -> Tree:
    branch = Tree(node["resource"]) if tree is None else tree.add(node["resource"])
    for child in node["resources"]:
        render(child, branch)
    return branch
