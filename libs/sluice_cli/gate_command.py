"""`sluice gate open|close|list`: ask a Gate to open or close, and see where gates stand.

Opening or closing is the RFC's annotation with the current time, as
`kubectl annotate` would write it, plus who asked, so the gating-controller
can put the user in the gate's audit trail. The command does not wait for
the controller: it reports the request, `sluice gate list` the outcome.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import os
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from sluice_api.gating import (
    CLOSE_REQUESTED_AT_ANNOTATION,
    CLOSE_REQUESTED_BY_ANNOTATION,
    OPEN_REQUESTED_AT_ANNOTATION,
    OPEN_REQUESTED_BY_ANNOTATION,
    Gate,
)
from sluice_api.meta import format_time
from sluice_runtime.conditions import condition_of
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import KubeError, NotFound, one_line
from sluice_runtime.kube.resources import ResourceType

DEFAULT_NAMESPACE = "flux-system"
"""Where gates live unless told otherwise, as with the flux CLI."""

# The same names as gating_controller.evaluating, which libs may not import.

_ANNOTATIONS = {
    "open": (OPEN_REQUESTED_AT_ANNOTATION, OPEN_REQUESTED_BY_ANNOTATION),
    "close": (CLOSE_REQUESTED_AT_ANNOTATION, CLOSE_REQUESTED_BY_ANNOTATION),
}
GATES = ResourceType.of_model(Gate)


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser("gate", help="open, close or list Gates")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action in ("open", "close"):
        request = actions.add_parser(action, help=f"ask a gate to {action} now, for its window")
        request.add_argument("name", help="name of the Gate")
        _namespace_flag(request)
        request.add_argument("--kubeconfig")
        request.set_defaults(run=_request, gate_action=action)
    show = actions.add_parser("list", help="each gate, its state and until when")
    scope = show.add_mutually_exclusive_group()
    _namespace_flag(scope)
    scope.add_argument(
        "-A", "--all-namespaces", action="store_true", help="gates of every namespace"
    )
    show.add_argument("--kubeconfig")
    show.set_defaults(run=_list)


def _namespace_flag(parser: Any) -> None:
    parser.add_argument(
        "-n",
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help=f"namespace of the gates (default {DEFAULT_NAMESPACE})",
    )


def current_user() -> str:
    """Who runs the command: $USER, else the OS login."""
    try:
        return os.environ.get("USER") or getpass.getuser()
    except (OSError, KeyError):  # no login name at all, e.g. a bare container uid
        return "unknown"


def rfc3339_now() -> str:
    return format_time(datetime.now(UTC), fraction="none")


def _request(args: argparse.Namespace) -> int:
    action: str = args.gate_action
    at_key, by_key = _ANNOTATIONS[action]
    requested_at = rfc3339_now()
    requested_by = f"cli:{current_user()}"
    patch = {"metadata": {"annotations": {at_key: requested_at, by_key: requested_by}}}

    async def annotate() -> None:
        async with _connected(args.kubeconfig) as client:
            await client.merge_patch(GATES, args.name, patch, namespace=args.namespace)

    where = f"{args.namespace}/{args.name}"
    try:
        asyncio.run(annotate())
    except NotFound as error:
        return _fail(action, f"gate {where} not found" if _names(error, args.name) else error)
    except (KubeError, OSError) as error:
        return _fail(action, error)
    print(f"gate {where}: {action} requested at {requested_at} by {requested_by}")
    return 0


def _list(args: argparse.Namespace) -> int:
    namespace = None if args.all_namespaces else args.namespace

    async def fetch() -> list[JSON]:
        async with _connected(args.kubeconfig) as client:
            return (await client.list(GATES, namespace=namespace)).items

    try:
        gates = asyncio.run(fetch())
    except (KubeError, OSError) as error:
        return _fail("list", error)
    if not gates:
        where = "any namespace" if namespace is None else f"namespace {namespace}"
        print(f"No gates found in {where}.", file=sys.stderr)
        return 0
    header = ["NAME", "STATE", "UNTIL", "DEFAULT", "MESSAGE"]
    if namespace is None:
        header = ["NAMESPACE", *header]
    rows = [_row(gate, with_namespace=namespace is None) for gate in sorted(gates, key=_sort_key)]
    sys.stdout.write(format_table(header, rows))
    return 0


def _row(gate: JSON, *, with_namespace: bool) -> list[str]:
    meta = gate.get("metadata") or {}
    spec = gate.get("spec") or {}
    status = gate.get("status") or {}
    opened = condition_of(gate, "Opened")
    ready = condition_of(gate)
    state = {"True": "opened", "False": "closed"}.get(str((opened or {}).get("status")), "unknown")
    # A gate the controller cannot evaluate keeps its last state; say why.
    shown = ready if ready and ready.get("status") == "False" else opened
    row = [
        str(meta.get("name") or ""),
        state,
        str(status.get("resetToDefaultAt") or "-"),
        str(spec.get("default") or "closed"),
        " ".join(str((shown or {}).get("message") or "").split()),
    ]
    return [str(meta.get("namespace") or ""), *row] if with_namespace else row


def _sort_key(gate: JSON) -> tuple[str, str]:
    meta = gate.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def format_table(header: list[str], rows: list[list[str]]) -> str:
    """Columns like kubectl's: left-aligned, three spaces apart, last one unpadded."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=False)]
        lines.append("   ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines) + "\n"


@contextlib.asynccontextmanager
async def _connected(kubeconfig: str | None) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(kubeconfig=kubeconfig)
    try:
        yield client
    finally:
        await client.close()


def _names(error: NotFound, name: str) -> bool:
    """Whether the 404 is about the gate itself (not, say, a missing CRD)."""
    details = (error.body or {}).get("details") if isinstance(error.body, dict) else None
    return isinstance(details, dict) and details.get("name") == name


def _fail(action: str, error: BaseException | str) -> int:
    text = error if isinstance(error, str) else one_line(error)
    print(f"sluice gate {action}: {text}", file=sys.stderr)
    return 1
