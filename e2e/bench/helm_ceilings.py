"""The ceilings the helm-controller's throughput is measured against, and the API
server's own count of who sent what.

The **helm ceiling** is N `helm install`s of the same chart by the same helm
binary, with the flags the helm-controller passes for the benchmark's
HelmRelease (`--wait --wait-for-jobs --take-ownership`, its timeout), at the
controller's concurrency, straight from a script: one Helm home, as a user's
pipeline has, and no controller. The **SSA ceiling** is what an in-process
Helm SDK would send for the same releases: a server-side apply of each object
the chart rendered and of one release Secret each (the very Secrets helm
stored for the helm ceiling, so their size is real), at the same concurrency.

Requests are counted at the API server, from its audit log (one Metadata-level
event per answered request, `ControlPlane(audit=True)`): helm's own requests
(its User-Agent is `Helm/<version>`) are sent by processes the controller
starts, so no client-side counter sees them. Helm's requests are told apart
into discovery (`/version`, `/api`, `/apis`, each group's document, OpenAPI),
which says nothing about the release, and the release's own.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from e2e.fleet import Controller
from sluice_envtest.controlplane import ControlPlane
from sluice_envtest.measuring import cpu_times
from sluice_runtime.helming import helm_binary
from sluice_runtime.helming.storage import decode_release, release_objects
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.discovery import RestMapper
from sluice_runtime.kube.resources import SECRET

RELEASE_TIMEOUT = "1m"
"""The benchmark HelmRelease's `spec.timeout`; the helm ceiling passes the same."""


def release_values(index: int) -> dict[str, Any]:
    """The values of release `index`: the benchmark's HelmRelease `spec.values`."""
    return {"greeting": f"app-{index}"}


def install_args(name: str, chart: Path, values: Path, *, namespace: str) -> list[str]:
    """`helm install` as the helm-controller runs it for the benchmark's HelmRelease
    (`releasing._release_args` with no install options set)."""
    return [
        "install", name, str(chart), "--values", str(values),
        "--description", "install by Sluice helm-controller",
        "--wait", "--wait-for-jobs", "--take-ownership",
        "--timeout", "60s", "--namespace", namespace,
    ]  # fmt: skip


def helm_env(home: Path, kubeconfig: str) -> dict[str, str]:
    """One Helm home, as a person's shell or a pipeline has: kept between installs."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "KUBECONFIG": kubeconfig,
    }


async def helm_ceiling(
    kubeconfig: str,
    chart: Path,
    *,
    namespace: str,
    releases: int,
    concurrency: int,
    workdir: Path,
) -> float:
    """Seconds for `releases` `helm install`s of `chart` into `namespace` (which must
    exist), `concurrency` at a time, from one Helm home in `workdir`."""
    home = workdir / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = helm_env(home, kubeconfig)
    binary = str(helm_binary())
    limit = asyncio.Semaphore(concurrency)
    files = []
    for i in range(releases):
        values = workdir / f"values-{i}.json"
        values.write_text(json.dumps(release_values(i)))
        files.append(values)

    async def install(i: int) -> None:
        args = install_args(f"podinfo-{i}", chart, files[i], namespace=namespace)
        async with limit:
            proc = await asyncio.create_subprocess_exec(
                binary, *args, env=env, cwd=str(home),
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            _, err = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"helm install podinfo-{i}: {err.decode()[-500:]}")

    start = time.monotonic()
    await asyncio.gather(*(install(i) for i in range(releases)))
    return time.monotonic() - start


async def helm_start_seconds(*, runs: int = 5) -> float:
    """The median wall time of `helm version`: what starting a helm process costs
    before it does anything (no cluster, no chart)."""
    binary = str(helm_binary())
    times = []
    for _ in range(runs):
        start = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            binary, "version", "--short",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        await proc.wait()
        times.append(time.monotonic() - start)
    return sorted(times)[len(times) // 2]


def ssa_requests(
    secret: dict[str, Any], *, namespace: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What an in-process Helm SDK would write for the release stored in `secret`
    (one of helm's `sh.helm.release.v1.*` Secrets), moved into `namespace`: the
    same Secret (as an apply body) and the objects of its manifest."""
    meta = secret["metadata"]
    stored = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": secret.get("type", "helm.sh/release.v1"),
        "metadata": {"name": meta["name"], "namespace": namespace,
                     "labels": dict(meta.get("labels") or {})},
        "data": dict(secret.get("data") or {}),
    }  # fmt: skip
    objects = []
    for obj in release_objects(decode_release(secret["data"]["release"])):
        moved = {**obj, "metadata": {**(obj.get("metadata") or {}), "namespace": namespace}}
        objects.append(moved)
    return stored, objects


async def ssa_ceiling(
    client: KubeClient,
    secrets: Sequence[dict[str, Any]],
    *,
    namespace: str,
    concurrency: int,
) -> float:
    """Seconds to server-side apply, for each release Secret of `secrets`, its
    objects and then the Secret itself into `namespace` (which must exist),
    `concurrency` releases at a time."""
    mapper = RestMapper(client)
    bodies = [ssa_requests(secret, namespace=namespace) for secret in secrets]
    types = {}
    for _, objects in bodies:  # discovery warmed before the clock starts
        for obj in objects:
            key = (obj["apiVersion"], obj["kind"])
            if key not in types:
                types[key] = await mapper.resource_for(*key)
    limit = asyncio.Semaphore(concurrency)

    async def release(stored: dict[str, Any], objects: list[dict[str, Any]]) -> None:
        async with limit:
            for obj in objects:
                rt = types[(obj["apiVersion"], obj["kind"])]
                await client.apply(rt, obj, field_manager="helm", force=True)
            await client.apply(SECRET, stored, field_manager="helm", force=True)

    start = time.monotonic()
    await asyncio.gather(*(release(stored, objects) for stored, objects in bodies))
    return time.monotonic() - start


async def stored_releases(client: KubeClient, namespace: str) -> list[dict[str, Any]]:
    """helm's release Secrets in `namespace`."""
    listed = await client.list(SECRET, namespace=namespace, label_selector="owner=helm")
    return list(listed.items)


# -- CPU, which the machine's other load does not inflate as it does wall time --------------


def children_cpu() -> float:
    """CPU-seconds of this process's reaped children: the helm ceiling's helm processes."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def server_cpu(plane: ControlPlane) -> float:
    """CPU-seconds the API server and etcd have used."""
    return sum(cpu_times(plane.pid(part))[0] for part in plane.PARTS)


def sluice_cpu(plane: ControlPlane, controllers: dict[str, Controller]) -> dict[str, float]:
    """CPU-seconds so far of each controller, of the helm processes they ran (reaped
    children), and of the API server and etcd."""
    spent = {"api_server_and_etcd": server_cpu(plane)}
    for name, controller in controllers.items():
        own, children = cpu_times(controller.proc.pid)
        spent[f"{name}-controller"] = own
        spent[f"{name}-controller children (helm)"] = children
    return spent


# -- counting at the API server ------------------------------------------------------------


def is_discovery(uri: str) -> bool:
    """Whether a request URI reads discovery: the server's version, its API groups and
    each group-version's resources, or its OpenAPI documents."""
    path = uri.split("?", 1)[0].rstrip("/")
    parts = path.strip("/").split("/") if path else []
    if not parts:
        return True
    if parts[0] in ("version", "openapi"):
        return True
    if parts[0] == "api":
        return len(parts) <= 2
    if parts[0] == "apis":
        return len(parts) <= 3
    return False


def agent_of(event: dict[str, Any]) -> str:
    """'helm' for helm's own requests, 'sluice' for the controllers' and the bench's
    client, else the agent's first word ('kube-apiserver' for its own loops)."""
    agent = str(event.get("userAgent") or "")
    if agent.startswith("Helm/"):
        return "helm"
    return agent.split("/", 1)[0] or "unknown"


@dataclass
class AuditCounts:
    """Requests the API server answered in a window, by agent and kind."""

    by_agent: Counter[str] = field(default_factory=Counter)
    helm_discovery: int = 0
    """helm's requests that read discovery (`is_discovery`)."""
    helm_by_verb: Counter[str] = field(default_factory=Counter)
    """helm's other requests, by audit verb."""
    helm_discovery_seconds: float = 0.0
    """The API server's time answering helm's discovery, summed."""
    helm_other_seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.by_agent.values())

    def as_json(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "by_agent": dict(self.by_agent),
            "helm_discovery": self.helm_discovery,
            "helm_by_verb": dict(self.helm_by_verb),
            "helm_discovery_seconds": self.helm_discovery_seconds,
            "helm_other_seconds": self.helm_other_seconds,
        }


def _when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def count_audit(lines: Iterable[str], *, since: datetime, until: datetime) -> AuditCounts:
    """The requests of audit log `lines` received in [since, until] (aware datetimes),
    watches included once each."""
    counts = AuditCounts()
    for line in lines:
        if not line.strip():
            continue
        event = json.loads(line)
        received = _when(event["requestReceivedTimestamp"])
        if not since <= received <= until:
            continue
        agent = agent_of(event)
        counts.by_agent[agent] += 1
        if agent != "helm":
            continue
        took = (_when(event["stageTimestamp"]) - received).total_seconds()
        if is_discovery(str(event.get("requestURI") or "")):
            counts.helm_discovery += 1
            counts.helm_discovery_seconds += took
        else:
            counts.helm_by_verb[str(event.get("verb"))] += 1
            counts.helm_other_seconds += took
    return counts


def read_audit(path: Path, *, since: datetime, until: datetime) -> AuditCounts:
    with path.open() as handle:
        return count_audit(handle, since=since, until=until)
