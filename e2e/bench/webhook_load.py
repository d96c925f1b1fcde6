"""The notification-controller under a webhook burst, on loopback.

From the notification-controller issue: "200 concurrent valid webhook POSTs
and 200 invalid ones; every valid one answered 200/429 per the limits, no
invalid one annotates anything, the process stays responsive (p99 latency)".

The notification-controller runs as its own process with its default
limits (`--receiver-rate 5`, `--receiver-burst 20`, `--receiver-debounce
2s`) and a `github` Receiver for one GitRepository (no source-controller:
only the annotation matters). Each round fires `--valid` correctly signed
`push` webhooks and `--invalid` ones signed with the wrong token, shuffled,
all at once from one aiohttp session with a connection per request. Per
request: the status and the latency from sending to the whole answer read.
While the burst runs, /healthz is probed every 50 ms; right after it, one
/healthz and one fresh valid POST are timed. The GitRepository's
`reconcile.fluxcd.io/requestedAt` is followed by a watch: every new value
is one action of the receiver; they are counted after the debounce window
(and its trailing action) has passed. Rounds are spaced so the token bucket
is full and the debounce window closed when each starts.

Checks: valid answers are only 200 or 429, invalid ones only 400, no
connection fails, at most `--max-actions` annotations per round, and
/healthz and the fresh request after the burst each answer within
`--responsive-ms`.

Usage: python -m e2e.bench webhook-load [--valid 200] [--invalid 200] [--rounds 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import secrets
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from e2e.bench.cluster import (
    GITREPO,
    RECEIVER,
    REQUESTED_AT,
    Controller,
    Watching,
    create_namespace,
    create_receiver,
    git_repository,
    ready,
)
from e2e.bench.common import median, percentile, table, write
from sluice_cli.crds_command import all_crds
from sluice_envtest.controlplane import ControlPlane, free_port
from sluice_envtest.harness import github_headers
from sluice_runtime.app import duration
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.installing import install_crds

NS = "bench"
TOKEN = "webhook-load-token"


def _push(valid: bool) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {"ref": "refs/heads/main", "after": secrets.token_hex(20), "repository": {"id": 1}}
    ).encode()
    return body, github_headers(TOKEN if valid else "not-the-token", body)


async def _post(session: aiohttp.ClientSession, url: str, valid: bool) -> tuple[int | str, float]:
    body, headers = _push(valid)
    start = time.perf_counter()
    try:
        async with session.post(url, data=body, headers=headers) as answer:
            await answer.read()
            return answer.status, time.perf_counter() - start
    except aiohttp.ClientError as error:
        return type(error).__name__, time.perf_counter() - start


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int | str, float]:
    start = time.perf_counter()
    try:
        async with session.get(url) as answer:
            await answer.read()
            return answer.status, time.perf_counter() - start
    except aiohttp.ClientError as error:
        return type(error).__name__, time.perf_counter() - start


async def _probe(session: aiohttp.ClientSession, url: str, stop: asyncio.Event) -> list[float]:
    latencies = []
    while not stop.is_set():
        _, seconds = await _get(session, url)
        latencies.append(seconds)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.05)
    return latencies


def _requested(events: list[tuple[float, Any]]) -> set[str]:
    return {
        value
        for _, obj in events
        if obj and (value := (obj["metadata"].get("annotations") or {}).get(REQUESTED_AT))
    }


async def _round(
    index: int, url: str, health: str, repos: Watching, args: argparse.Namespace
) -> dict[str, Any]:
    before = _requested(repos.events) | _requested([(0.0, repos.objects.get("target"))])
    kinds = [True] * args.valid + [False] * args.invalid
    random.Random(index).shuffle(kinds)
    # A connection per request: no pool limit, nothing queued on the client side.
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=60)
    async with (
        aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
        aiohttp.ClientSession(timeout=timeout) as prober,
    ):
        stop = asyncio.Event()
        probing = asyncio.create_task(_probe(prober, health, stop))
        start = time.perf_counter()
        answers = await asyncio.gather(*(_post(session, url, valid) for valid in kinds))
        burst = time.perf_counter() - start
        stop.set()
        during = await probing
        after_health = await _get(prober, health)
        after_valid = await _post(prober, url, True)
    await asyncio.sleep(args.receiver_debounce + 1.0)  # the trailing action, if any
    actions = len(_requested(repos.events) - before)
    valid = [a for a, v in zip(answers, kinds, strict=True) if v]
    invalid = [a for a, v in zip(answers, kinds, strict=True) if not v]
    return {
        "burst_seconds": burst,
        "valid_statuses": dict(Counter(str(s) for s, _ in valid)),
        "invalid_statuses": dict(Counter(str(s) for s, _ in invalid)),
        "valid_latencies": [t for _, t in valid],
        "invalid_latencies": [t for _, t in invalid],
        "healthz_during_burst": during,
        "healthz_after": {"status": after_health[0], "seconds": after_health[1]},
        "valid_after": {"status": after_valid[0], "seconds": after_valid[1]},
        "actions": actions,
    }


async def run(args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    with ControlPlane(workdir=workdir / "cp") as plane:
        client = await KubeClient.connect(kubeconfig=str(plane.kubeconfig), qps=0)
        await install_crds(client, all_crds())
        await create_namespace(client, NS)
        receiver_port = free_port()
        notification = Controller(
            "notification-controller",
            "notification_controller",
            ["--kubeconfig", str(plane.kubeconfig),
             "--receiver-addr", f"127.0.0.1:{receiver_port}",
             "--events-addr", f"127.0.0.1:{free_port()}",
             "--receiver-rate", f"{args.receiver_rate:g}",
             "--receiver-burst", str(args.receiver_burst),
             "--receiver-debounce", f"{args.receiver_debounce:g}s"],
            workdir / "notification-controller.log",
        )  # fmt: skip
        try:
            notification.wait_ready()
            await client.create(
                GITREPO, git_repository("target", "http://127.0.0.1:1/none.git"), namespace=NS
            )
            await create_receiver(
                client,
                NS,
                "github",
                token=TOKEN,
                resources=[{"kind": "GitRepository", "name": "target"}],
            )
            path = ""
            deadline = time.monotonic() + 60
            while not path and time.monotonic() < deadline:
                obj = await client.get(RECEIVER, "github", NS)
                path = obj["status"].get("webhookPath", "") if ready(obj) else ""
                await asyncio.sleep(0.2)
            if not path:
                raise TimeoutError("the Receiver did not become Ready")
            url = f"http://127.0.0.1:{receiver_port}{path}"
            health = f"http://127.0.0.1:{notification.port}/healthz"
            rounds = []
            rest = max(args.receiver_burst / args.receiver_rate, args.receiver_debounce) + 1.0
            async with Watching(client, GITREPO, NS).running() as repos:
                for index in range(args.rounds):
                    if index:
                        await asyncio.sleep(rest)
                    rounds.append(await _round(index, url, health, repos, args))
                    r = rounds[-1]
                    print(
                        f"round {index + 1}: valid {r['valid_statuses']}, "
                        f"invalid {r['invalid_statuses']}, {r['actions']} actions, "
                        f"burst {r['burst_seconds']:.2f}s",
                        flush=True,
                    )
            peak = notification.peak_mib()
        finally:
            notification.stop()
            await client.close()
    for r in rounds:
        r["notification_controller_peak_mib"] = peak
    return rounds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="e2e.bench webhook-load", description=__doc__)
    parser.add_argument("--valid", type=int, default=200)
    parser.add_argument("--invalid", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--receiver-rate", type=float, default=5.0, help="(controller default)")
    parser.add_argument("--receiver-burst", type=int, default=20, help="(controller default)")
    parser.add_argument(
        "--receiver-debounce", type=duration, default=2.0, help="(controller default: 2s)"
    )
    parser.add_argument("--max-actions", type=int, default=3, help="annotations allowed per round")
    parser.add_argument("--responsive-ms", type=float, default=250.0)
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sluice-webhook-load-") as tmp:
        rounds = asyncio.run(run(args, Path(tmp)))

    def latencies(key: str) -> list[float]:
        return [t * 1000 for r in rounds for t in r[key]]

    def stats(values: list[float]) -> dict[str, float]:
        return {
            "p50_ms": median(values),
            "p99_ms": percentile(values, 0.99),
            "max_ms": max(values, default=float("nan")),
        }

    classes = {
        "valid (200/429)": stats(latencies("valid_latencies")),
        "invalid (400)": stats(latencies("invalid_latencies")),
        "/healthz during the burst": stats(latencies("healthz_during_burst")),
        "/healthz after the burst": stats([r["healthz_after"]["seconds"] * 1000 for r in rounds]),
        "fresh valid POST after the burst": stats(
            [r["valid_after"]["seconds"] * 1000 for r in rounds]
        ),
    }
    valid_statuses: Counter[str] = Counter()
    invalid_statuses: Counter[str] = Counter()
    for r in rounds:
        valid_statuses.update(r["valid_statuses"])
        invalid_statuses.update(r["invalid_statuses"])
    limit = args.responsive_ms / 1000
    checks = {
        "valid answered only 200/429": set(valid_statuses) <= {"200", "429"},
        "invalid answered only 400": set(invalid_statuses) <= {"400"},
        f"at most {args.max_actions} annotations per round": all(
            r["actions"] <= args.max_actions for r in rounds
        ),
        f"/healthz after the burst within {args.responsive_ms:g} ms": all(
            r["healthz_after"]["status"] == 200 and r["healthz_after"]["seconds"] <= limit
            for r in rounds
        ),
        f"fresh valid POST after the burst within {args.responsive_ms:g} ms (200/429)": all(
            r["valid_after"]["status"] in (200, 429) and r["valid_after"]["seconds"] <= limit
            for r in rounds
        ),
    }
    print()
    print(
        f"{args.rounds} rounds of {args.valid} valid + {args.invalid} invalid concurrent POSTs; "
        f"limits: rate {args.receiver_rate:g}/s, burst {args.receiver_burst}, "
        f"debounce {args.receiver_debounce:g}s"
    )
    print(
        table(
            ["requests", "p50 ms", "p99 ms", "max ms"],
            [[name, s["p50_ms"], s["p99_ms"], s["max_ms"]] for name, s in classes.items()],
        )
    )
    print(f"\nvalid statuses: {dict(valid_statuses)}; invalid statuses: {dict(invalid_statuses)}")
    print(f"annotations per round: {[r['actions'] for r in rounds]}")
    print(f"burst wall time per round: {[round(r['burst_seconds'], 2) for r in rounds]} s")
    print(
        f"notification-controller peak memory: {rounds[0]['notification_controller_peak_mib']:.0f} MiB"
    )
    print()
    print(table(["check", "result"], [[k, "ok" if v else "FAILED"] for k, v in checks.items()]))
    write(
        args.out,
        "webhook-load",
        {
            "valid": args.valid,
            "invalid": args.invalid,
            "rounds": args.rounds,
            "limits": {
                "rate": args.receiver_rate,
                "burst": args.receiver_burst,
                "debounce_seconds": args.receiver_debounce,
            },
            "latency": classes,
            "valid_statuses": dict(valid_statuses),
            "invalid_statuses": dict(invalid_statuses),
            "checks": checks,
            "per_round": rounds,
        },
    )
    if not all(checks.values()):
        raise SystemExit(1)
