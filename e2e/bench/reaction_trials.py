"""The reaction benchmark's two series of trials (`e2e.bench.reaction` wires and reports).

Each series sets up its own GitRepository and Kustomization in `NS`, then
times `--trials` trials on the watches `Watching` keeps, and returns one
dict of seconds per trial; what each figure measures is described in
`e2e.bench.reaction`'s docstring, which `--help` prints.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from e2e.bench.cluster import (
    CONFIG_MAP,
    GATE,
    GITREPO,
    KUSTOMIZATION,
    RECEIVER,
    REQUESTED_AT,
    Watching,
    applied,
    condition,
    create_receiver,
    git_repository,
    has_artifact,
    kustomization,
    now_rfc3339,
    ready,
)
from sluice_envtest.gitserver import GitHttpServer, WorkRepo
from sluice_envtest.harness import github_headers, push_payload
from sluice_runtime.kube.client import KubeClient

NS = "bench"
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


async def webhook_series(
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


async def gate_series(
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
