"""What must hold after (and while) faults hit a fleet: the chaos suite's invariants.

Each phase of a run publishes one revision whose every object carries the
annotation `chaos.sluice.dev/phase`, so an object tells which revision last
wrote it. The checks read the cluster and the artifact storage directly,
never the controllers' own view of them.
"""

from __future__ import annotations

import hashlib
import os
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.fleet import APP, APP_KINDS, KUSTOMIZATION, Controller, Origin
from sluice_envtest.harness import condition
from sluice_runtime.kube.client import JSON, KubeClient

PHASE = "chaos.sluice.dev/phase"


def apps(default: int) -> int:
    """The fleet size: small in the default `tox` run, 200 under `tox -e chaos`."""
    return int(os.environ.get("SLUICE_CHAOS_APPS", default))


def manifests(
    phase: str, *, ingress: bool = True, broken: bool = False, without: Collection[str] = ()
) -> dict[str, str]:
    """The app of MTTP, every object annotated with `phase`.

    `broken` adds a Deployment the API server refuses (negative replicas), so
    the whole revision fails its server-side dry-run; `ingress=False` drops
    the Ingress, so only a complete inventory lets prune find it; `without`
    drops the objects of those kinds too.
    """
    dropped = {*without, *(() if ingress else ("Ingress",))}
    docs = [d for d in yaml.safe_load_all(APP) if d and d["kind"] not in dropped]
    if broken:
        bad = yaml.safe_load(yaml.safe_dump(docs[0]))
        bad["metadata"]["name"] = "broken-${INDEX}"
        bad["spec"]["replicas"] = -1
        docs.append(bad)
    for doc in docs:
        doc["metadata"].setdefault("annotations", {})[PHASE] = phase
    return {"podinfo.yaml": yaml.safe_dump_all(docs, sort_keys=False)}


def revision_of(origin: Origin, published: str) -> str:
    """The tail of `status.lastAppliedRevision` that names what `publish` returned."""
    return published if origin.kind == "OCIRepository" else f"sha1:{published}"


async def poke_all(
    client: KubeClient, origin: Origin, ns: str, count: int, token: str, *, first: int = 0
) -> None:
    """Ask every source to fetch now, as a webhook receiver would."""
    patch = {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}}
    for i in range(first, first + count):
        await client.merge_patch(origin.rt, f"podinfo-{i}", patch, namespace=ns)


def applied(obj: JSON, revision: str) -> bool:
    status = obj.get("status") or {}
    ready = condition(obj, "Ready") or {}
    return bool(
        ready.get("status") == "True"
        and str(status.get("lastAppliedRevision", "")).endswith(revision)
        and status.get("observedGeneration") == obj["metadata"].get("generation")
    )


def refused(obj: JSON, revision: str) -> bool:
    """The Kustomization tried `revision` and reports it failed (Ready=False)."""
    status = obj.get("status") or {}
    ready = condition(obj, "Ready") or {}
    return bool(
        ready.get("status") == "False"
        and str(status.get("lastAttemptedRevision", "")).endswith(revision)
    )


@dataclass
class Violations:
    half_applied: list[str] = field(default_factory=list)
    from_refused: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)

    def total(self) -> int:
        return (
            len(self.half_applied) + len(self.from_refused) + len(self.lost) + len(self.artifacts)
        )


async def app_objects(client: KubeClient, ns: str) -> dict[tuple[str, str], JSON]:
    found: dict[tuple[str, str], JSON] = {}
    for rt in APP_KINDS:
        for obj in (await client.list(rt, namespace=ns)).items:
            if obj["metadata"]["name"].startswith(("podinfo-", "broken-")):
                found[(rt.kind, obj["metadata"]["name"])] = obj
    return found


async def check_fleet(
    client: KubeClient,
    ns: str,
    *,
    phases: dict[str, str],
    order: list[str],
    refused_phases: set[str],
    violations: Violations,
    removed: dict[str, set[str]] | None = None,
) -> None:
    """One sweep of the invariants that must hold at every instant.

    - An object never carries the annotation of a revision that was refused.
    - A Kustomization reporting revision R as applied has every object of its
      inventory present (unless a later revision, in `removed`, drops its kind)
      and written by R or a later revision.
    """
    removed = removed or {}
    # Kustomizations first, then the objects: a status read before the objects
    # can only be older than them, and what a later revision did to an object
    # is allowed below. The other order read objects as they were before a
    # fast delivery and its status as after it (a 200-app kill run: three
    # "missing at applied r1" for objects created during the sweep).
    kustomizations = (await client.list(KUSTOMIZATION, namespace=ns)).items
    objects = await app_objects(client, ns)
    for (kind, name), obj in objects.items():
        phase = ((obj["metadata"].get("annotations") or {}).get(PHASE)) or ""
        if phase in refused_phases:
            violations.from_refused.append(f"{kind}/{name} from refused {phase}")
    for ks in kustomizations:
        status = ks.get("status") or {}
        last = str(status.get("lastAppliedRevision", ""))
        phase = next((p for p, rev in phases.items() if rev and last.endswith(rev)), None)
        if phase is None:
            continue
        for entry in (status.get("inventory") or {}).get("entries") or []:
            _ns, name, _group, kind = entry["id"].split("_")
            obj = objects.get((kind, name))
            name_ = f"{ks['metadata']['name']}: {kind}/{name}"
            if obj is None:
                # Gone is fine once a later revision that drops the kind is out:
                # its prune runs before its status patch (and its health wait).
                later = order[order.index(phase) + 1 :]
                if not any(kind in removed.get(p, ()) and p in phases for p in later):
                    violations.half_applied.append(f"{name_} missing at applied {phase}")
                continue
            written = (obj["metadata"].get("annotations") or {}).get(PHASE, "")
            if written not in order or order.index(written) < order.index(phase):
                violations.half_applied.append(f"{name_} is {written!r} under {phase}")


async def check_inventories(
    client: KubeClient, ns: str, count: int, *, expect: set[str], violations: Violations
) -> None:
    """Every app's inventory lists exactly its objects, and exactly those exist."""
    objects = await app_objects(client, ns)
    for i in range(count):
        ks = await client.get(KUSTOMIZATION, f"podinfo-{i}", ns)
        entries = (ks.get("status") or {}).get("inventory", {}).get("entries") or []
        listed = {(e["id"].split("_")[3], e["id"].split("_")[1]) for e in entries}
        wanted = {(kind, f"podinfo-{i}app") for kind in expect}
        if listed != wanted:
            violations.lost.append(f"podinfo-{i}: inventory {sorted(listed)} != {sorted(wanted)}")
    present = {
        key for key in objects if key[1].endswith("app") and key[1].split("-")[-1][:-3].isdigit()
    }
    stray = {key for key in present if key[0] not in expect}
    violations.lost.extend(
        f"{kind}/{name} left behind (not pruned)" for kind, name in sorted(stray)
    )


async def check_artifacts(
    client: KubeClient,
    origin: Origin,
    ns: str,
    count: int,
    storage: Path,
    violations: Violations,
    *,
    first: int = 0,
) -> None:
    """Every source's artifact file exists and hashes to its recorded digest."""
    for i in range(first, first + count):
        source = await client.get(origin.rt, f"podinfo-{i}", ns)
        artifact = (source.get("status") or {}).get("artifact") or {}
        path = storage / artifact.get("path", "missing")
        if not path.is_file():
            violations.artifacts.append(f"podinfo-{i}: {artifact.get('path')} missing")
            continue
        digest = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != artifact.get("digest"):
            violations.artifacts.append(f"podinfo-{i}: {path.name} does not match its digest")


@dataclass
class Killer:
    """SIGKILLs a random controller at random moments, restarting it each time."""

    controllers: list[Controller]
    rng: random.Random
    min_gap: float = 0.5
    max_gap: float = 3.0
    injections: dict[str, int] = field(default_factory=dict)
    last_restart: float = 0.0

    async def strike(self, sleep: Callable[[float], Awaitable[Any]]) -> None:
        await sleep(self.rng.uniform(self.min_gap, self.max_gap))
        victim = self.rng.choice(self.controllers)
        victim.kill()
        self.injections[victim.name] = self.injections.get(victim.name, 0) + 1
        # Down for a moment sometimes, as a crash-looping pod would be.
        await sleep(self.rng.choice((0.0, 0.0, 0.5, 2.0)))
        victim.restart()
        self.last_restart = time.monotonic()


def report(line: str) -> None:
    """Print a figure, and append it to `$SLUICE_CHAOS_REPORT` when set (`tox -e chaos`)."""
    print(line)
    target = os.environ.get("SLUICE_CHAOS_REPORT")
    if target:
        with open(target, "a") as handle:
            handle.write(line + "\n")


def summary(values: list[float]) -> tuple[float, float]:
    return (statistics.median(values), max(values)) if values else (float("nan"), float("nan"))
