"""`sluice events`: the Kubernetes Events of Sluice objects, oldest first, as `flux events`.

Only events about the toolkit's own kinds (`*.toolkit.fluxcd.io`) and the
other kinds Sluice's controllers serve (ResourceSets, ArtifactGenerators,
KubeSphere Applications) are shown, so the controllers' story is not drowned
in Pod scheduling noise; `--for Kind/name` narrows it to one object.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime
from typing import Any

from sluice_cli import kinds
from sluice_cli.terminal import (
    ERROR,
    OK,
    Failure,
    add_cluster_flags,
    connected,
    console,
    human_duration,
    parse_time,
    print_table,
    run_verb,
)
from sluice_runtime.kube.client import JSON
from sluice_runtime.kube.resources import EVENT

TOOLKIT = "toolkit.fluxcd.io"
GROUPS = frozenset(kind.rt.group for kind in kinds.ALL)
"""API groups whose objects' events are shown, besides every `*.toolkit.fluxcd.io`."""

DESCRIPTION = """The events sub-command shows Kubernetes events from Flux resources.

examples:
  # Display events of all Flux resources in the flux-system namespace
  sluice events

  # Display events of one Kustomization
  sluice events --for Kustomization/podinfo

  # Display events of Flux resources in every namespace
  sluice events -A
"""


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "events",
        help="display Kubernetes events for Flux resources",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--for", dest="for_", metavar="KIND/NAME",
        help="get events for a particular object, e.g. Kustomization/podinfo",
    )  # fmt: skip
    add_cluster_flags(parser, all_namespaces=True)
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    return run_verb("events", lambda: asyncio.run(_events(args)))


def parse_for(value: str | None) -> tuple[str, str] | None:
    """`Kustomization/podinfo` as (kind, name); kinds compare case-insensitively."""
    if value is None:
        return None
    kind, slash, name = value.partition("/")
    if not slash or not kind or not name or "/" in name:
        raise Failure(f"--for {value!r} is not KIND/NAME, e.g. Kustomization/podinfo", ERROR)
    return kind, name


def select(events: list[JSON], wanted: tuple[str, str] | None) -> list[JSON]:
    """The events about Sluice's kinds (and `wanted` only, when given), oldest first."""
    chosen = []
    for event in events:
        involved = event.get("involvedObject") or {}
        group = str(involved.get("apiVersion") or "").rpartition("/")[0]
        if not group.endswith(TOOLKIT) and group not in GROUPS:
            continue
        if wanted is not None and (
            str(involved.get("kind") or "").lower() != wanted[0].lower()
            or involved.get("name") != wanted[1]
        ):
            continue
        chosen.append(event)
    return sorted(chosen, key=lambda e: _when(e) or datetime.min.replace(tzinfo=UTC))


def _when(event: JSON) -> datetime | None:
    series = event.get("series") or {}
    for value in (
        event.get("lastTimestamp"),
        series.get("lastObservedTime"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        (event.get("metadata") or {}).get("creationTimestamp"),
    ):
        when = parse_time(value)
        if when is not None:
            return when
    return None


def row(event: JSON, *, now: datetime, with_namespace: bool) -> list[str]:
    involved = event.get("involvedObject") or {}
    when = _when(event)
    cells = [
        human_duration((now - when).total_seconds()) if when else "<unknown>",
        str(event.get("type") or ""),
        str(event.get("reason") or ""),
        f"{involved.get('kind', '')}/{involved.get('name', '')}",
        " ".join(str(event.get("message") or "").split()),
    ]
    if with_namespace:
        cells.insert(0, str(involved.get("namespace") or ""))
    return cells


async def _events(args: argparse.Namespace) -> int:
    wanted = parse_for(args.for_)
    namespace = None if args.all_namespaces else args.namespace
    async with connected(args.kubeconfig, args.context) as client:
        listed = await client.list(EVENT, namespace=namespace)
    events = select(listed.items, wanted)
    if not events:
        where = "any namespace" if namespace is None else f"{namespace} namespace"
        about = f" for {wanted[0]}/{wanted[1]}" if wanted else ""
        print(f"no events found{about} in {where}", file=sys.stderr)
        return OK
    header = ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    if namespace is None:
        header.insert(0, "NAMESPACE")
    now = datetime.now(UTC)
    print_table(
        console(), header, [row(e, now=now, with_namespace=namespace is None) for e in events]
    )
    return OK
