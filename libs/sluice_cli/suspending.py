"""`sluice suspend` and `sluice resume`: stop and restart the reconciliation of an object.

Suspending sets `spec.suspend: true` (the controller then leaves the object
and what it applied alone), or, for the kinds without one (ResourceSets,
input providers, ArtifactGenerators), their `reconcile: disabled` annotation;
resuming clears it and, as `flux resume` does, asks for a reconcile at once
and waits for it, so the user sees the object catch up rather than a bare
"resumed".
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import time
from typing import Any

from sluice_cli import kinds as kinds_
from sluice_cli.kinds import Kind
from sluice_cli.reconciling import request_and_wait, timeout_seconds
from sluice_cli.terminal import (
    OK,
    Failure,
    add_cluster_flags,
    connected,
    console,
    run_verb,
)
from sluice_runtime.kube.errors import NotFound

_DESCRIPTIONS = {
    "suspend": """The suspend sub-commands suspend the reconciliation of a resource.

examples:
  # Suspend reconciliation for an existing Kustomization
  sluice suspend ks podinfo

  # Suspend the fetching of a Git repository
  sluice suspend source git podinfo
""",
    "resume": """The resume sub-commands resume a suspended resource, and wait for it to reconcile.

examples:
  # Resume reconciliation for an existing Kustomization
  sluice resume ks podinfo

  # Resume, but do not wait for the reconciliation
  sluice resume source git podinfo --wait=false
""",
}

_SUB_DESCRIPTIONS = {
    "suspend": "The {command} command disables the reconciliation of {a_kind} resource.",
    "resume": "The {command} command marks a previously suspended {kind} resource for "
    "reconciliation and waits for it to finish.",
}


def register(commands: Any) -> None:
    for verb in ("suspend", "resume"):
        parser = commands.add_parser(
            verb,
            help=f"{verb} reconciliation of sources and resources",
            description=_DESCRIPTIONS[verb],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        subcommands = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
        suspendable = tuple(kind for kind in kinds_.ALL if kind.suspendable)
        kinds_.add_kind_parsers(
            subcommands,
            verb=verb,
            kinds=suspendable,
            configure=functools.partial(_configure, verb=verb),
            description=_SUB_DESCRIPTIONS[verb],
        )


def _configure(parser: argparse.ArgumentParser, kinds: tuple[Kind, ...], *, verb: str) -> None:
    (kind,) = kinds
    parser.add_argument("name", help=f"name of the {kind.rt.kind}")
    add_cluster_flags(parser)
    if verb == "resume":
        parser.add_argument(
            "--wait", choices=("true", "false"), default="true",
            help="wait for the resource to reconcile (default true)",
        )  # fmt: skip
        parser.add_argument(
            "--timeout", default="5m", help="how long to wait for the reconciliation (default 5m)"
        )
    parser.set_defaults(run=lambda args: _run(args, verb), kinds=kinds)


def _run(args: argparse.Namespace, verb: str) -> int:
    return run_verb(verb, lambda: asyncio.run(_set_suspend(args, verb == "suspend")))


async def _set_suspend(args: argparse.Namespace, suspend: bool) -> int:
    (kind,) = args.kinds
    what = kind.describe(args.namespace, args.name)
    timeout = 0.0 if suspend else timeout_seconds(args.timeout)
    async with connected(args.kubeconfig, args.context) as client:
        try:
            await client.merge_patch(
                kind.rt, args.name, kind.suspend_patch(suspend), namespace=args.namespace
            )
        except NotFound:
            raise Failure(f"{what} not found") from None
        console().print(f"✔ {what} {'suspended' if suspend else 'resumed'}")
        if not suspend and args.wait == "true":
            await request_and_wait(
                client, kind, args.namespace, args.name, time.monotonic() + timeout
            )
    return OK
