"""`sluice diff <kind>`: what would change. `diff kustomization NAME --path DIR` for now.

A Kustomization's diff is the local build (`local_builds`, the controller's
own build) dry-run on the server with the controller's field manager, as the
controller's apply would send it (`ResourceManager.preview_all`), compared
with the live objects; and, when the Kustomization prunes, what its
inventory holds that the build no longer has. Secret values never reach the
terminal: each is shown as `***`, marked `(before)`/`(after)` when it changes.
The dry-run runs as the user of the kubeconfig (as `flux diff` does), not as
the Kustomization's `serviceAccountName`; one that targets another cluster
(`spec.kubeConfig`) is refused rather than compared with this one.

Exit codes, as `flux diff` and diff(1): 0 no differences, 1 differences, 2 the
diff could not be made.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import difflib
from collections.abc import Callable
from typing import Any

import yaml
from rich.syntax import Syntax

from sluice_api.meta import ObjectId
from sluice_cli.building_command import add_local_build_flags
from sluice_cli.local_builds import FIELD_MANAGER, build_local, load_kustomization, owner_labels
from sluice_cli.terminal import ERROR, FAILED, OK, Failure, connected, console, run_verb
from sluice_runtime.kube.client import JSON
from sluice_runtime.kube.discovery import RestMapper
from sluice_runtime.ssa.changeset import Preview
from sluice_runtime.ssa.errors import ApplyError
from sluice_runtime.ssa.manager import ResourceManager
from sluice_runtime.ssa.normalizing import has_drifted

DESCRIPTION = """The diff kustomization command builds a Kustomization from a local directory,
as the kustomize-controller would, and compares it with the cluster by a
server-side dry-run. Secret values are masked.

Exit codes: 0 no differences, 1 differences found, 2 the diff failed.

examples:
  # Preview the changes local manifests would make to the cluster
  sluice diff kustomization my-app --path ./path/to/local/manifests

  # Preview using a Kustomization from a file
  sluice diff ks my-app --path ./apps --kustomization-file ./clusters/prod/apps.yaml
"""

MASK = "***"
_SERVER_FIELDS = ("managedFields", "resourceVersion", "generation", "uid", "creationTimestamp")


def add_kustomization(kinds: Any) -> None:
    parser = kinds.add_parser(
        "kustomization",
        aliases=["ks"],
        help="diff a Kustomization's local build with the cluster",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_local_build_flags(parser)
    parser.set_defaults(run=_run)


def register(commands: Any, *more: Callable[[Any], None]) -> None:
    """The `diff` verb: `diff kustomization`, and the sub-commands `more` adds
    (`diff artifact` lives with the other artifact verbs)."""
    parser = commands.add_parser(
        "diff",
        help="diff a Flux resource with the cluster",
        description="The diff sub-commands compare local changes with the cluster.",
    )
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    for add in (add_kustomization, *more):
        add(kinds)


def _run(args: argparse.Namespace) -> int:
    return run_verb("diff", lambda: asyncio.run(_diff(args)))


async def _diff(args: argparse.Namespace) -> int:
    async with connected(args.kubeconfig, args.context) as client:
        ks = await load_kustomization(client, args.namespace, args.name, args.kustomization_file)
        if ks.spec.kube_config is not None and args.kustomization_file is None:
            # Its objects live in another cluster: a dry-run here would compare
            # them with the wrong objects.
            raise Failure(
                f"Kustomization {args.namespace}/{args.name} applies to another cluster "
                "(spec.kubeConfig); diff it with --kubeconfig of that cluster and "
                "--kustomization-file",
                ERROR,
            )
        objects = await build_local(client, ks, args.path)
        manager = ResourceManager(
            client, RestMapper(client), field_manager=FIELD_MANAGER, owner_labels=owner_labels(ks)
        )
        try:
            previews = await manager.preview_all(objects, force=ks.spec.force)
        except ApplyError as error:
            raise Failure(f"dry-run failed: {' '.join(str(error).split())}", ERROR) from None
    gone: list[ObjectId] = []
    if ks.spec.prune:
        built = {preview.id for preview in previews}
        for entry in ks.status.inventory.entries if ks.status.inventory else []:
            try:
                oid = ObjectId.from_inventory_id(entry.id)
            except ValueError:
                continue
            if oid not in built:
                gone.append(oid)
    return report(previews, gone)


def report(previews: list[Preview], gone: list[ObjectId]) -> int:
    """Print what the dry-runs would create, re-create or change and what would be
    deleted (`gone`); FAILED (1) when anything would, OK (0) when nothing would."""
    out = console()
    changes = 0
    for preview in previews:
        subject = preview.id.display
        if preview.existing is None:
            out.print(f"► {subject} created")
        elif preview.note.startswith("to be re-created"):
            out.print(f"► {subject} {preview.note}")
        elif preview.dry_run is not None and has_drifted(preview.existing, preview.dry_run):
            out.print(f"► {subject} drifted")
            text = unified_diff(subject, preview.existing, preview.dry_run)
            if out.is_terminal:
                out.print(Syntax(text, "diff", theme="ansi_dark", background_color="default"))
            else:
                out.file.write(text)
        else:
            continue
        changes += 1
    for oid in gone:
        out.print(f"► {oid.display} deleted")
        changes += 1
    return FAILED if changes else OK


def comparable(obj: JSON) -> JSON:
    """The object without what the server alone writes (status, managed fields, versions)."""
    shown = copy.deepcopy(obj)
    shown.pop("status", None)
    meta = shown.get("metadata") or {}
    for key in _SERVER_FIELDS:
        meta.pop(key, None)
    return shown


def mask_secrets(live: JSON, merged: JSON) -> tuple[JSON, JSON]:
    """Secret values replaced by `***`, marked `(before)`/`(after)` where they differ."""
    if live.get("kind") != "Secret" or str(live.get("apiVersion")) != "v1":
        return live, merged
    live, merged = copy.deepcopy(live), copy.deepcopy(merged)
    for field in ("data", "stringData"):
        before = live.get(field) or {}
        after = merged.get(field) or {}
        for key in set(before) | set(after):
            changed = before.get(key) != after.get(key)
            if key in before:
                before[key] = f"{MASK} (before)" if changed else MASK
            if key in after:
                after[key] = f"{MASK} (after)" if changed else MASK
    return live, merged


def unified_diff(subject: str, live: JSON, merged: JSON) -> str:
    before, after = mask_secrets(comparable(live), comparable(merged))
    lines = difflib.unified_diff(
        yaml.safe_dump(before, sort_keys=True).splitlines(keepends=True),
        yaml.safe_dump(after, sort_keys=True).splitlines(keepends=True),
        fromfile=f"{subject} (cluster)",
        tofile=f"{subject} (local)",
    )
    return "".join(lines)
