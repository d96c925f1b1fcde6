"""Benchmark 3: reaction time, from an event to the change applied.

Every interval is `1h`, so only events can explain the speed. Two series of
trials against one local control plane, a Git server, and the source-,
kustomize-, notification- and gating-controller as separate processes
wired as in a cluster (events go to the notification-controller):

- webhook: a new commit is pushed (not timed), then the clock starts, a
  signed GitHub `push` webhook is POSTed to the notification-controller's
  Receiver for the GitRepository, and the clock stops when the watch on
  Kustomizations delivers the version with `lastAppliedRevision` equal to
  the new commit and Ready=True. Trials are spaced so each POST comes more
  than `--receiver-debounce` after the previous one: every trial is the
  debouncer's leading edge (acted on at once), as a lone push in production.
  Each trial is split into stages seen on the watches: the POST answered,
  the GitRepository carrying the new `requestedAt`, its new artifact in
  status, the Kustomization applied and Ready (the Kustomization's reconcile
  start is not patched anywhere, so artifact → applied is one stage).
- gate: with the Gate closed, a commit is pushed and the GitRepository is
  asked to reconcile until it has the new artifact (not timed; the
  Kustomization is held, Approved=False); after `--settle` seconds the
  clock starts, the Gate is opened (merge patch of
  `open.gate.fluxcd.io/requestedAt`, now), and it stops when the
  Kustomization is Ready with the pending revision applied. The gate is
  closed again (`close.gate.fluxcd.io/requestedAt`) between trials.

With `--load-apps N`, the webhook series runs under load: as its first
trial starts, N MTTP-shaped apps (e2e.fleet: an OCIRepository and a
Kustomization each, four objects, `wait`) are created in namespace `load`,
and each trial records whether the load was still being delivered (not every
load Kustomization Ready yet) when it ended; the figure under load is over
those trials. The receiver's push must not wait behind the load's queue.

The series themselves are `e2e.bench.reaction_trials`; this module starts what
they run against, then reports their figures.

Usage: python -m e2e.bench reaction [--trials 30] [--receiver-debounce 2s]
       [--load-apps 1000] [--fifo-loop] [--requested-hold S] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e.bench import timelines
from e2e.bench.cluster import (
    GATE,
    GITREPO,
    KUSTOMIZATION,
    Controller,
    Watching,
    create_namespace,
)
from e2e.bench.common import in_background, median, percentile, table, write
from e2e.bench.reaction_trials import NS, gate_series, webhook_series
from e2e.fleet import APP, all_ready, create_apps, oci_origin, prepare_namespace
from sluice_cli.crds_command import all_crds
from sluice_cli.dev import events_token_file
from sluice_envtest.controlplane import ControlPlane, free_port
from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.registry import OciRegistry
from sluice_envtest.workloads import simulated_rollouts
from sluice_runtime.app import duration
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.installing import install_crds

LOAD_NS = "load"


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    load_seconds: list[float] = []
    with (
        ControlPlane(workdir=workdir / "cp") as plane,
        GitHttpServer(workdir=workdir / "git") as git,
    ):
        client = await KubeClient.connect(kubeconfig=str(plane.kubeconfig), qps=0)
        await install_crds(client, all_crds())
        await create_namespace(client, NS)
        kubeconfig = str(plane.kubeconfig)
        receiver_port, events_port, storage_port = free_port(), free_port(), free_port()
        token = ["--events-token-file", str(events_token_file(workdir))]
        events = ["--events-addr", f"http://127.0.0.1:{events_port}", *token]
        if args.fifo_loop:
            events.append("--fifo-loop")  # the source-, kustomize- and gating-controller's
        if args.requested_hold is not None:
            events += ["--requested-hold", f"{args.requested_hold}s"]
        controllers = [
            Controller(
                "notification-controller",
                "notification_controller",
                ["--kubeconfig", kubeconfig, "--receiver-addr", f"127.0.0.1:{receiver_port}",
                 "--events-addr", f"127.0.0.1:{events_port}", *token,
                 "--receiver-debounce", f"{args.receiver_debounce}s",
                 *(["--fifo-loop"] if args.fifo_loop else [])],
                workdir / "notification-controller.log",
            ),
            Controller(
                "source-controller",
                "source_controller",
                ["--kubeconfig", kubeconfig, *events, "--storage-path", str(workdir / "storage"),
                 "--trace-requests", str(workdir / "source-requests.jsonl"),
                 "--storage-addr", f"127.0.0.1:{storage_port}",
                 "--storage-adv-addr", f"127.0.0.1:{storage_port}"],
                workdir / "source-controller.log",
            ),
            Controller(
                "kustomize-controller",
                "kustomize_controller",
                ["--kubeconfig", kubeconfig, *events,
                 "--trace-requests", str(workdir / "kustomize-requests.jsonl")],
                workdir / "kustomize-controller.log",
            ),
            Controller(
                "gating-controller",
                "gating_controller",
                ["--kubeconfig", kubeconfig, *events],
                workdir / "gating-controller.log",
            ),
        ]  # fmt: skip
        try:
            for controller in controllers:
                controller.wait_ready()
            async with (
                contextlib.AsyncExitStack() as stack,
                Watching(client, GITREPO, NS).running() as repos,
                Watching(client, KUSTOMIZATION, NS).running() as kss,
                Watching(client, GATE, NS).running() as gates,
            ):
                print(f"webhook series: {args.trials} trials", flush=True)
                start_load: Callable[[asyncio.Event], None] | None = None
                if args.load_apps:
                    registry = OciRegistry(workdir=workdir / "registry")
                    registry.start()
                    stack.callback(registry.stop)
                    origin = oci_origin(registry)
                    origin.publish({"podinfo.yaml": APP})
                    await prepare_namespace(client, LOAD_NS)
                    await stack.enter_async_context(
                        simulated_rollouts(client, namespace=LOAD_NS, interval=0.5)
                    )

                    async def load(done: asyncio.Event) -> None:
                        started = time.monotonic()
                        await create_apps(client, origin, LOAD_NS, args.load_apps)
                        await all_ready(client, KUSTOMIZATION, LOAD_NS, args.load_apps)
                        load_seconds.append(time.monotonic() - started)
                        done.set()

                    def begin_load(done: asyncio.Event) -> None:
                        # Ended with the stack, while the API still answers.
                        in_background(stack, load(done), name="load")

                    start_load = begin_load

                served = [await timelines.served(client)]
                webhook = await webhook_series(
                    client, git, repos, kss, receiver_port, args, start_load
                )
                served.append(await timelines.served(client))
                print(f"gate series: {args.trials} trials", flush=True)
                try:
                    gate = await gate_series(client, git, repos, kss, gates, args)
                except TimeoutError as error:
                    # On a machine too busy for the gate's deadlines the webhook
                    # figures still stand; say so rather than lose them.
                    print(f"gate series abandoned: {error}", flush=True)
                    gate = []
        finally:
            for controller in controllers:
                controller.stop()
            await client.close()
    traced = [*timelines.load(workdir / "source-requests.jsonl"),
              *timelines.load(workdir / "kustomize-requests.jsonl")]  # fmt: skip
    for trial in webhook:
        trial["breakdown"] = timelines.breakdown(trial["posted_at"], trial["applied_at"], traced)
    return {"webhook": webhook, "gate": gate, "load_seconds": load_seconds, "served": served,
            "timelines": traced}  # fmt: skip


def _summary(trials: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for key in trials[0]:
        if key in ("breakdown", "posted_at", "applied_at"):
            continue  # wall-clock anchors and the split, reported on their own
        values = [t[key] for t in trials]
        summary[key] = {
            "median": median(values),
            "p90": percentile(values, 0.90),
            "p99": percentile(values, 0.99),
            "max": max(values),
        }
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="e2e.bench reaction", description=__doc__)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument(
        "--receiver-debounce",
        type=duration,
        default=2.0,
        help="the notification-controller's flag (its default: 2s); trials are spaced past it",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=1.0,
        help="seconds between the held revision's artifact and opening the gate",
    )
    parser.add_argument(
        "--load-apps",
        type=int,
        default=0,
        help="deliver this many MTTP apps (OCI) while the webhook series runs",
    )
    parser.add_argument(
        "--fifo-loop",
        action="store_true",
        help="run the controllers with --fifo-loop (requested work's callbacks not served "
        "first in their event loops), to compare",
    )
    parser.add_argument(
        "--requested-hold",
        type=float,
        default=None,
        metavar="SECONDS",
        help="run the source-, kustomize- and gating-controller with --requested-hold "
        "(0: bulk requests never hold back for requested ones), to compare",
    )
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sluice-reaction-") as tmp:
        trials = asyncio.run(run(args, Path(tmp)))
    labels = {
        ("webhook", "answered"): "webhook: POST answered",
        ("webhook", "requested"): "webhook: GitRepository has requestedAt",
        ("webhook", "source_artifact"): "webhook: GitRepository has the new artifact",
        ("webhook", "applied"): "webhook → Kustomization applied (the figure)",
        ("webhook", "stage_fetch"): "  stage: requestedAt → artifact (source fetch)",
        ("webhook", "stage_apply"): "  stage: artifact → applied (kustomize)",
        ("gate", "gate_opened"): "gate: Gate Opened=True",
        ("gate", "applied"): "gate opened → Kustomization applied (the figure)",
    }
    summaries = {
        series: _summary(trials[series]) for series in ("webhook", "gate") if trials[series]
    }
    loaded = [t for t in trials["webhook"] if t["under_load"]]
    if loaded:
        summaries["webhook_under_load"] = _summary(loaded)
        under = f"{len(loaded)} trials while {args.load_apps} apps were delivered"
        for (series, key), label in list(labels.items()):
            if series == "webhook":
                what = label.strip().removeprefix("webhook: ").removeprefix("stage: ")
                labels["webhook_under_load", key] = f"under load: {what}"
        labels["webhook_under_load", "applied"] = f"webhook → applied, {under}"
    rows = []
    for (series, key), label in labels.items():
        if series not in summaries:
            continue
        s = summaries[series][key]
        rows.append([label, s["median"], s["p90"], s["p99"], s["max"]])
    print()
    print(f"{args.trials} trials per series, seconds from the event; every interval 1h")
    print(table(["from the event to", "median", "p90", "p99", "max"], rows))
    print(
        f"\nwebhook trials spaced > --receiver-debounce ({args.receiver_debounce:g}s): "
        "each POST is acted on at once (leading edge)"
    )
    loaded_or_all = loaded or trials["webhook"]
    print(f"\nwhere the time goes ({len(loaded_or_all)} {'loaded ' if loaded else ''}trials):")
    print(timelines.report(loaded_or_all))
    print("\nthe same requests, timed by the API server and by the controller (all trials):")
    print(timelines.server_vs_client(*trials["served"], trials["timelines"]))
    if args.load_apps:
        took = trials["load_seconds"]
        print(f"load: {args.load_apps} apps, all Ready after {took[0]:.0f}s" if took else
              f"load: {args.load_apps} apps, not all Ready when the series ended")  # fmt: skip
    print("load average at end: {:.1f}/{:.1f}/{:.1f}".format(*os.getloadavg()))
    write(
        args.out,
        "reaction",
        {
            "trials": args.trials,
            "receiver_debounce_seconds": args.receiver_debounce,
            "settle_seconds": args.settle,
            "intervals": "1h",
            "summary": summaries,
            "runs": trials,
        },
    )
