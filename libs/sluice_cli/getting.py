"""`sluice get`: the statuses of sources, Kustomizations, HelmReleases and the other kinds.

Flux's columns (NAME, REVISION, SUSPENDED, READY, MESSAGE; NAMESPACE first
with `-A`), `--watch` for a row on every change, and `-o json|yaml` for
scripts, which get the objects as the API server gave them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import yaml

from sluice_cli import kinds as kinds_
from sluice_cli.kinds import Kind
from sluice_cli.terminal import (
    ERROR,
    OK,
    Failure,
    add_cluster_flags,
    connected,
    console,
    print_table,
    run_verb,
)
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import ApiUnavailable, Gone, NotFound

DESCRIPTION = """The get sub-commands print the statuses of Flux resources.

examples:
  # List all Kustomizations and their status
  sluice get kustomizations

  # List GitRepository sources of every namespace, and follow their changes
  sluice get sources git -A --watch

  # Everything in a namespace, as JSON
  sluice get all -n apps -o json
"""


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "get",
        help="get the resources and their status",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    subcommands = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    kinds_.add_kind_parsers(
        subcommands,
        verb="get",
        configure=_configure,
        description="The {command} command prints the statuses of the {kind} resources.",
        plural=True,
    )


def _configure(parser: argparse.ArgumentParser, kinds: tuple[Kind, ...]) -> None:
    if len(kinds) == 1:
        parser.add_argument("name", nargs="?", help=f"name of one {kinds[0].rt.kind}")
        parser.add_argument(
            "-w", "--watch", action="store_true", help="after listing, watch for changes"
        )
    add_cluster_flags(parser, all_namespaces=True)
    parser.add_argument(
        "-o", "--output", choices=("table", "json", "yaml"), default="table",
        help="the format of the output (default table)",
    )  # fmt: skip
    parser.set_defaults(run=_run, kinds=kinds, several=len(kinds) > 1)


def _run(args: argparse.Namespace) -> int:
    watching = bool(getattr(args, "watch", False))
    return run_verb("get", lambda: asyncio.run(_get(args)), streaming=watching)


async def _get(args: argparse.Namespace) -> int:
    kinds: tuple[Kind, ...] = args.kinds
    namespace = None if args.all_namespaces else args.namespace
    name: str | None = getattr(args, "name", None)
    if name is not None and namespace is None:
        raise Failure(f"{name}: a name needs a namespace; use -n instead of -A", ERROR)
    async with connected(args.kubeconfig, args.context) as client:
        found: list[tuple[Kind, list[JSON], str]] = []
        for kind in kinds:
            try:
                found.append((kind, *await _fetch(client, kind, namespace, name)))
            except NotFound as error:
                if name is not None and _names(error, name):
                    raise Failure(f"{kind.describe(args.namespace, name)} not found") from None
                if args.several:
                    continue  # `get all` leaves out kinds this cluster does not serve
                raise Failure(_not_served(kind)) from None
        if args.output != "table":
            _print_objects(found, args.output, single=name is not None)
            return OK
        out = console()
        printed = False
        for kind, objects, _ in found:
            if not objects:
                continue
            if printed:
                out.file.write("\n")
            print_table(out, _header(kind, namespace), [
                _row(kind, obj, namespace=namespace, qualified=args.several) for obj in objects
            ])  # fmt: skip
            printed = True
        if not printed:
            what = "Flux" if args.several else kinds[0].rt.kind
            where = "any namespace" if namespace is None else f"{namespace} namespace"
            print(f"no {what} objects found in {where}", file=sys.stderr)
        if getattr(args, "watch", False):
            kind, _, version = found[0]
            await _watch(client, kind, namespace, name, version, printed_header=printed)
    return OK


async def _fetch(
    client: KubeClient, kind: Kind, namespace: str | None, name: str | None
) -> tuple[list[JSON], str]:
    if name is not None:
        obj = await client.get(kind.rt, name, namespace)
        return [obj], str((obj.get("metadata") or {}).get("resourceVersion") or "")
    listed = await client.list(kind.rt, namespace=namespace)
    return sorted(listed.items, key=_sort_key), listed.resource_version


def _not_served(kind: Kind) -> str:
    hint = "install the CRDs with `sluice crds install`"
    return f"the {kind.rt.kind} API ({kind.rt.api_version}) is not served by this cluster: {hint}"


def _names(error: NotFound, name: str) -> bool:
    """Whether a 404 is about the object itself rather than its kind being unknown."""
    details = (error.body or {}).get("details") if isinstance(error.body, dict) else None
    return isinstance(details, dict) and details.get("name") == name


def _sort_key(obj: JSON) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _header(kind: Kind, namespace: str | None) -> list[str]:
    header = ["NAME", *(column.header for column in kind.columns()), "READY", "MESSAGE"]
    header += [column.header for column in kind.after]
    return header if namespace is not None else ["NAMESPACE", *header]


def _row(kind: Kind, obj: JSON, *, namespace: str | None, qualified: bool) -> list[str]:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    row = [f"{kind.rt.kind.lower()}/{name}" if qualified else name]
    row += [column.value(obj) for column in kind.columns()]
    ready, message = kinds_.status_and_message(obj)
    if kind.suspended_in_ready and kind.suspended(obj):
        ready = "Suspended"
    row += [ready, message, *(column.value(obj) for column in kind.after)]
    return row if namespace is not None else [str(meta.get("namespace") or ""), *row]


def _print_objects(found: list[tuple[Kind, list[JSON], str]], output: str, *, single: bool) -> None:
    objects = [obj for _, items, _ in found for obj in items]
    document: JSON = (
        objects[0] if single and objects else {"apiVersion": "v1", "kind": "List", "items": objects}
    )
    if output == "json":
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(document, sort_keys=False))
    sys.stdout.flush()


async def _watch(
    client: KubeClient,
    kind: Kind,
    namespace: str | None,
    name: str | None,
    version: str,
    *,
    printed_header: bool,
) -> None:
    """A row for every change, until interrupted; relists when the watch is too old."""
    out = console()
    header = printed_header
    while True:
        try:
            async for event in client.watch(kind.rt, resource_version=version, namespace=namespace):
                obj = event.object
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if event.type not in ("ADDED", "MODIFIED"):
                    continue
                if name is not None and (obj.get("metadata") or {}).get("name") != name:
                    continue
                row = _row(kind, obj, namespace=namespace, qualified=False)
                # Widths cannot be known ahead of a stream: each row is its own
                # table, with the header only over the first.
                print_table(out, _header(kind, namespace), [row], show_header=not header)
                header = True
        except Gone:
            version = (await client.list(kind.rt, namespace=namespace)).resource_version
        except ApiUnavailable:
            await asyncio.sleep(1)
