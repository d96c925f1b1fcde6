"""`sluice reconcile`: ask for a reconcile now and wait until it is done.

As with `flux reconcile`, the request is the `reconcile.fluxcd.io/requestedAt`
annotation with the current time; the controller copies the value into
`status.lastHandledReconcileAt` when it runs. The command waits for that,
and for a Ready condition that is about the current generation and no longer
Unknown, then prints the revision (or the failure, exit 1). With
`--with-source` the source of a Kustomization or HelmRelease goes first (for
a HelmRelease, its HelmChart's source, then the HelmChart), so the new
commit or chart version is fetched before it is applied.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from sluice_api.meta import RECONCILE_REQUESTED_AT_ANNOTATION, parse_duration
from sluice_cli import kinds as kinds_
from sluice_cli.kinds import Kind
from sluice_cli.terminal import (
    ERROR,
    FAILED,
    OK,
    Failure,
    Progress,
    add_cluster_flags,
    connected,
    console,
    error_console,
    rfc3339_now,
    run_verb,
)
from sluice_runtime.conditions import condition_of
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import NotFound

DESCRIPTION = """The reconcile sub-commands trigger a reconciliation of sources and resources.

examples:
  # Trigger a reconciliation of a Kustomization, fetching its source first
  sluice reconcile kustomization podinfo --with-source

  # Trigger a fetch of a Git repository now
  sluice reconcile source git podinfo
"""

POLL_INTERVAL = 0.5
"""Seconds between reads of the object while waiting: a CLI, not a controller."""


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "reconcile",
        help="reconcile sources and resources",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    subcommands = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    kinds_.add_kind_parsers(
        subcommands,
        verb="reconcile",
        kinds=tuple(kind for kind in kinds_.ALL if kind.reconcilable),
        configure=_configure,
        description="The {command} command triggers a reconciliation of {a_kind} resource "
        "and waits for it to finish.",
    )


def _configure(parser: argparse.ArgumentParser, kinds: tuple[Kind, ...]) -> None:
    (kind,) = kinds
    parser.add_argument("name", help=f"name of the {kind.rt.kind}")
    if kind in kinds_.DELIVERY:
        parser.add_argument("--with-source", action="store_true", help="reconcile the source first")
    add_cluster_flags(parser)
    parser.add_argument(
        "--timeout", default="5m", help="how long to wait for the reconciliation (default 5m)"
    )
    parser.set_defaults(run=_run, kinds=kinds)


def _run(args: argparse.Namespace) -> int:
    return run_verb("reconcile", lambda: asyncio.run(_reconcile(args)))


def timeout_seconds(value: str) -> float:
    """`--timeout` as seconds; a Failure (exit 2) unless it is a positive Go duration."""
    try:
        seconds = parse_duration(value).total_seconds()
    except ValueError:
        seconds = 0.0
    if seconds <= 0:
        raise Failure(f"--timeout {value!r} is not a duration such as 30s or 5m", ERROR)
    return seconds


async def _reconcile(args: argparse.Namespace) -> int:
    (kind,) = args.kinds
    deadline = time.monotonic() + timeout_seconds(args.timeout)
    async with connected(args.kubeconfig, args.context) as client:
        obj = await _get(client, kind, args.namespace, args.name)
        if getattr(args, "with_source", False):
            chain = await _sources(client, obj)
            if not chain:
                raise Failure(await _no_source(client, kind, obj))
            for source_kind, source_namespace, source_name in chain:
                await request_and_wait(client, source_kind, source_namespace, source_name, deadline)
        await request_and_wait(client, kind, args.namespace, args.name, deadline)
    return OK


async def _sources(client: KubeClient, obj: JSON) -> list[tuple[Kind, str, str]]:
    """The sources to reconcile first, farthest first: a HelmChart's own source goes
    before it (HelmRepository, HelmChart, then the HelmRelease), as in Flux."""
    chain: list[tuple[Kind, str, str]] = []
    source = kinds_.source_of(obj)
    while source is not None:
        chain.insert(0, source)
        kind, namespace, name = source
        if kind is not kinds_.HELMCHART:
            break
        source = kinds_.source_of(await _get(client, kind, namespace, name))
    return chain


async def _no_source(client: KubeClient, kind: Kind, obj: JSON) -> str:
    """Why `--with-source` has nothing to reconcile, and for an ExternalArtifact
    (which its producer refreshes, not a controller of its own) what to run instead."""
    meta = obj.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    what = kind.describe(namespace, name)
    ref = (obj.get("spec") or {}).get("sourceRef") or {}
    if ref.get("kind") != kinds_.EXTERNAL.rt.kind:
        return f"{what} names no known source"
    source_namespace, source_name = str(ref.get("namespace") or namespace), str(ref.get("name"))
    external = kinds_.EXTERNAL.describe(source_namespace, source_name)
    try:
        artifact = await client.get(kinds_.EXTERNAL.rt, source_name, source_namespace)
    except NotFound:
        return f"{what}: its source {external} does not exist"
    producer = (artifact.get("spec") or {}).get("sourceRef") or {}
    producer_kind = kinds_.of_kind(str(producer.get("kind") or ""))
    hint = (
        f"sluice reconcile {producer_kind.word} {producer.get('name')}"
        if producer_kind is not None and producer_kind.reconcilable
        else "reconcile its producer"
    )
    return f"{what}: its source {external} is refreshed by its producer; run `{hint}` first"


async def _get(client: KubeClient, kind: Kind, namespace: str, name: str) -> JSON:
    try:
        return await client.get(kind.rt, name, namespace)
    except NotFound:
        raise Failure(f"{kind.describe(namespace, name)} not found") from None


async def request_and_wait(
    client: KubeClient, kind: Kind, namespace: str, name: str, deadline: float
) -> JSON:
    """Annotate, then wait for the controller to handle it; raise Failure if it fails."""
    what = kind.describe(namespace, name)
    obj = await _get(client, kind, namespace, name)
    if kind.suspended(obj):
        raise Failure(f"{what} is suspended: resume it first (sluice resume ...)")
    token = rfc3339_now()
    with Progress(error_console()) as progress:
        progress.step(f"► annotating {what}")
        patch = {"metadata": {"annotations": {RECONCILE_REQUESTED_AT_ANNOTATION: token}}}
        await client.merge_patch(kind.rt, name, patch, namespace=namespace)
        started = time.monotonic()
        progress.step(f"◎ waiting for {kind.rt.kind} reconciliation")
        while True:
            obj = await _get(client, kind, namespace, name)
            outcome = _outcome(obj, token)
            if outcome is not None:
                break
            if time.monotonic() > deadline:
                raise Failure(
                    f"{what} was not reconciled within the timeout; is its controller running? "
                    "(sluice check)",
                    FAILED,
                )
            ready = condition_of(obj) or {}
            message = " ".join(str(ready.get("message") or "").split())
            elapsed = int(time.monotonic() - started)
            # Only a terminal redraws in place; elsewhere each line is printed once.
            progress.update(
                f"◎ waiting for {kind.rt.kind} reconciliation ({elapsed}s): {message}"
                if progress.err.is_terminal and message
                else f"◎ waiting for {kind.rt.kind} reconciliation"
            )
    status, message = outcome
    if status != "True":
        raise Failure(f"{what} reconciliation failed: {message}")
    revision = kind.revision(obj)
    verb = kind.done or ("fetched" if kind.source else "applied")
    out = console()
    if revision:
        out.print(f"✔ {what}: {verb} revision {revision}")
    else:
        out.print(f"✔ {what}: reconciliation completed")
    return obj


def _outcome(obj: JSON, token: str) -> tuple[str, str] | None:
    """(Ready status, message) once the request was handled and Ready is settled, else None."""
    status = obj.get("status") or {}
    if status.get("lastHandledReconcileAt") != token:
        return None
    ready = condition_of(obj)
    if ready is None or ready.get("status") not in ("True", "False"):
        return None
    generation = (obj.get("metadata") or {}).get("generation")
    observed = ready.get("observedGeneration", status.get("observedGeneration"))
    if generation is not None and observed is not None and int(observed) < int(generation):
        return None
    for condition in status.get("conditions") or []:
        # Reconciling=True/Progressing: the object waits (for its source's
        # artifact, a dependency, a gate) and is not failing; with retry it is.
        if (condition.get("type"), condition.get("status"), condition.get("reason")) == (
            "Reconciling", "True", "Progressing",
        ):  # fmt: skip
            return None
    return str(ready["status"]), " ".join(str(ready.get("message") or "").split())
