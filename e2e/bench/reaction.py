"""Benchmark 3 (shared/spec/benchmarks.md): reaction time, from an event to the change applied.

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

Usage: python -m e2e.bench reaction [--trials 30] [--receiver-debounce 2s]
       [--load-apps 1000] [--fifo-loop] [--requested-hold S] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from e2e.bench import timelines
from e2e.bench.cluster import (
    CONFIG_MAP,
    GATE,
    GITREPO,
    KUSTOMIZATION,
    RECEIVER,
    REQUESTED_AT,
    Controller,
    Watching,
    applied,
    condition,
    create_namespace,
    create_receiver,
    git_repository,
    has_artifact,
    kustomization,
    now_rfc3339,
    ready,
)
from e2e.bench.common import in_background, median, percentile, table, write
from e2e.fleet import APP, all_ready, create_apps, oci_origin, prepare_namespace
from sluice_cli.crds_command import all_crds
from sluice_cli.dev import events_token_file
from sluice_envtest.controlplane import ControlPlane, free_port
from sluice_envtest.gitserver import GitHttpServer, WorkRepo
from sluice_envtest.harness import github_headers, push_payload
from sluice_envtest.registry import OciRegistry
from sluice_envtest.workloads import simulated_rollouts
from sluice_runtime.app import duration
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.installing import install_crds

NS = "bench"
LOAD_NS = "load"
TOKEN = "reaction-benchmark-token"


def _config_map(name: str, version: int) -> dict[str, str]:
    body = f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  version: '{version}'\n"
    return {"cm.yaml": body}


def _commit(repo: WorkRepo, name: str, version: int) -> str:
    head = repo.commit(f"v{version}", files=_config_map(name, version))
    repo.push()
    return f"main@sha1:{head}"


def _requested_at(obj: Any) -> str | None:
    value: str | None = ((obj or {}).get("metadata", {}).get("annotations") or {}).get(REQUESTED_AT)
    return value


def _asked_anew(before: str | None) -> Any:
    return lambda o: _requested_at(o) != before


def _opened(status: str) -> Any:
    return lambda o: (condition(o, "Opened") or {}).get("status") == status


def _held(o: Any) -> bool:
    return (condition(o, "Approved") or {}).get("status") == "False"


async def _check_applied(client: KubeClient, name: str, version: int) -> None:
    data = (await client.get(CONFIG_MAP, name, NS)).get("data") or {}
    if data.get("version") != str(version):
        raise RuntimeError(f"ConfigMap {name} has {data}, not version {version}")


async def _receiver_url(client: KubeClient, port: int) -> str:
    await create_receiver(
        client, NS, "github", token=TOKEN, resources=[{"kind": "GitRepository", "name": "app"}]
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        obj = await client.get(RECEIVER, "github", NS)
        if ready(obj) and obj["status"].get("webhookPath"):
            return f"http://127.0.0.1:{port}{obj['status']['webhookPath']}"
        await asyncio.sleep(0.2)
    raise TimeoutError("the Receiver did not become Ready")


async def _webhook_series(
    client: KubeClient,
    git: GitHttpServer,
    repos: Watching,
    kss: Watching,
    receiver_port: int,
    args: argparse.Namespace,
    start_load: Callable[[asyncio.Event], object] | None = None,
) -> list[dict[str, Any]]:
    repo = git.create_repo("app")
    revision = _commit(repo, "app", 0)
    await client.create(GITREPO, git_repository("app", git.url("app")), namespace=NS)
    await client.create(
        KUSTOMIZATION, kustomization("app", "app", targetNamespace=NS), namespace=NS
    )
    url = await _receiver_url(client, receiver_port)
    await kss.until("app", applied(revision), timeout=120)
    spacing = args.receiver_debounce + 0.25
    trials = []
    last_post = 0.0
    load_done = asyncio.Event()
    if start_load is None:
        load_done.set()
    else:
        start_load(load_done)
    async with aiohttp.ClientSession() as session:
        for trial in range(1, args.trials + 1):
            revision = _commit(repo, "app", trial)
            await asyncio.sleep(max(0.0, last_post + spacing - time.monotonic()))
            asked_before = _requested_at(repos.objects.get("app"))
            requested = repos.expect("app", _asked_anew(asked_before))
            source_done = repos.expect("app", has_artifact(revision))
            ks_done = kss.expect("app", applied(revision))
            body = push_payload()
            headers = github_headers(TOKEN, body)
            start = last_post = time.monotonic()
            posted_at = time.time()
            async with session.post(url, data=body, headers=headers) as answer:
                status = answer.status
            answered = time.monotonic()
            if status != 200:
                raise RuntimeError(f"webhook answered {status}")
            _, requested_at = await repos.wait("app", requested)
            _, source_at = await repos.wait("app", source_done)
            _, applied_at = await kss.wait("app", ks_done)
            await _check_applied(client, "app", trial)
            trials.append(
                {
                    "answered": answered - start,
                    "requested": requested_at - start,
                    "source_artifact": source_at - start,
                    "applied": applied_at - start,
                    "stage_fetch": source_at - requested_at,
                    "stage_apply": applied_at - source_at,
                    "under_load": float(not load_done.is_set()),
                    "posted_at": posted_at,
                    "applied_at": posted_at + applied_at - start,
                }
            )
            under = " (under load)" if not load_done.is_set() else ""
            print(
                f"  webhook trial {trial}: {applied_at - start:.3f}s{under} (answered "
                f"{answered - start:.3f}, requestedAt {requested_at - start:.3f}, artifact "
                f"{source_at - start:.3f})",
                flush=True,
            )
    return trials


async def _gate_series(
    client: KubeClient,
    git: GitHttpServer,
    repos: Watching,
    kss: Watching,
    gates: Watching,
    args: argparse.Namespace,
) -> list[dict[str, float]]:
    repo = git.create_repo("gated")
    revision = _commit(repo, "gated", 0)
    await client.create(
        GATE,
        {
            "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
            "kind": "Gate",
            "metadata": {"name": "approval"},
            "spec": {"interval": "1h", "default": "closed", "window": "1h"},
        },
        namespace=NS,
    )
    await gates.until("approval", _opened("False"), timeout=60)
    await client.create(GITREPO, git_repository("gated", git.url("gated")), namespace=NS)
    await client.create(
        KUSTOMIZATION,
        kustomization("gated", "gated", targetNamespace=NS, gates=[{"name": "approval"}]),
        namespace=NS,
    )
    await repos.until("gated", has_artifact(revision), timeout=120)
    await kss.until("gated", _held, timeout=60)
    trials = []
    for trial in range(1, args.trials + 1):
        revision = _commit(repo, "gated", trial)
        fetched = repos.expect("gated", has_artifact(revision))
        await client.merge_patch(
            GITREPO,
            "gated",
            {"metadata": {"annotations": {REQUESTED_AT: secrets.token_hex(4)}}},
            namespace=NS,
        )
        await repos.wait("gated", fetched)
        # The Kustomization sees the new artifact and stays held; let that settle.
        await asyncio.sleep(args.settle)
        if (kss.objects["gated"].get("status") or {}).get("lastAppliedRevision") == revision:
            raise RuntimeError("the revision was applied while the gate was closed")

        gate_open = gates.expect("approval", _opened("True"))
        ks_done = kss.expect("gated", applied(revision))
        start = time.monotonic()
        await client.merge_patch(
            GATE,
            "approval",
            {"metadata": {"annotations": {"open.gate.fluxcd.io/requestedAt": now_rfc3339()}}},
            namespace=NS,
        )
        _, opened_at = await gates.wait("approval", gate_open)
        _, applied_at = await kss.wait("gated", ks_done)
        await _check_applied(client, "gated", trial)
        trials.append({"gate_opened": opened_at - start, "applied": applied_at - start})
        print(f"  gate trial {trial}: {applied_at - start:.3f}s", flush=True)

        gate_closed = gates.expect("approval", _opened("False"))
        held = kss.expect("gated", _held)
        await client.merge_patch(
            GATE,
            "approval",
            {"metadata": {"annotations": {"close.gate.fluxcd.io/requestedAt": now_rfc3339()}}},
            namespace=NS,
        )
        await gates.wait("approval", gate_closed, timeout=60)
        await kss.wait("gated", held, timeout=60)
    return trials


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
                webhook = await _webhook_series(
                    client, git, repos, kss, receiver_port, args, start_load
                )
                served.append(await timelines.served(client))
                print(f"gate series: {args.trials} trials", flush=True)
                try:
                    gate = await _gate_series(client, git, repos, kss, gates, args)
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
