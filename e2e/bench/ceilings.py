"""The ceilings Sluice's apply throughput is measured against: the rates at which this
API server and etcd take the same objects with no controller in the loop.

Raw SSA (issue 19's "raw limit") is one server-side apply per object. The
kustomize-controller keeps the issue's safety promise too: every object of a
revision is dry-run before any is applied, so each object it applies costs at
least a dry-run and an apply. "With the dry-run promise" is that floor: each
object dry-run applied and then applied, into a namespace of its own so it is
a first apply like the controllers'. The dry-run alone says what the promise
adds. All three run at the same concurrency on the fresh server, before the
controllers start, so one run prints Sluice's throughput against both.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.discovery import RestMapper
from sluice_runtime.kube.resources import NAMESPACE

SSA = (False,)
"""One apply per object."""
DRY_RUN_THEN_APPLY = (True, False)
"""The promise's floor: a dry-run apply, then the apply."""
DRY_RUN = (True,)
"""A dry-run apply alone: nothing is written."""
WARM_UP = 64
"""Objects dry-run and applied before the clocks start (not counted)."""


@dataclass(frozen=True)
class Ceilings:
    """Objects per second the API server took, each way (see the module's docstring)."""

    ssa: float
    promise: float
    dry_run: float

    def as_json(self) -> dict[str, float]:
        return asdict(self)


def shares(rate: float, ceilings: Ceilings) -> tuple[float, float]:
    """`rate` as a share of raw SSA and of the dry-run promise's floor."""
    return rate / ceilings.ssa, rate / ceilings.promise


def against(rate: float, ceilings: Ceilings) -> str:
    """'90.0 obj/s = 18% / 35%': a throughput and its shares of both ceilings."""
    of_ssa, of_promise = shares(rate, ceilings)
    return f"{rate:.1f} obj/s = {of_ssa:.0%} / {of_promise:.0%}"


def ceiling_line(ceilings: Ceilings, *, end_to_end: float, applying: float) -> str:
    """The ceilings and Sluice's two throughputs as shares of raw SSA / of the promise."""
    return (
        f"raw SSA {ceilings.ssa:.0f} obj/s, with the dry-run promise "
        f"{ceilings.promise:.0f} obj/s (dry-run alone {ceilings.dry_run:.0f} obj/s); "
        f"Sluice {against(end_to_end, ceilings)} from creation to all Ready, "
        f"{against(applying, ceilings)} while applying"
    )


async def raw_rate(
    client: KubeClient,
    manifests: list[dict[str, Any]],
    *,
    namespace: str,
    dry_runs: Sequence[bool] = SSA,
    concurrency: int = 64,
) -> float:
    """Objects per second the API server takes when each of `manifests` is
    server-side applied into a new `namespace` once per entry of `dry_runs`, in
    order (True: with dryRun=All), `concurrency` objects at a time."""
    await client.create(
        NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    mapper = RestMapper(client)
    limit = asyncio.Semaphore(concurrency)

    async def apply(obj: dict[str, Any]) -> None:
        rt = await mapper.resource_for(obj["apiVersion"], obj["kind"])
        obj["metadata"]["namespace"] = namespace
        # Held over the object's requests: `concurrency` objects in flight, as a
        # controller's workers each carry one object's dry-run and apply.
        async with limit:
            for dry_run in dry_runs:
                await client.apply(rt, obj, field_manager="raw-ssa", force=True, dry_run=dry_run)

    for obj in manifests[:4]:  # discovery warmed before the clock starts
        await mapper.resource_for(obj["apiVersion"], obj["kind"])
    start = time.monotonic()
    await asyncio.gather(*(apply(obj) for obj in manifests))
    return len(manifests) / (time.monotonic() - start)


async def measure(client: KubeClient, manifests: Sequence[dict[str, Any]]) -> Ceilings:
    """The three ceilings for `manifests`, each into its own new namespace, after a
    warm-up: the fresh server's first applies of each kind are slower (raw SSA
    at N=100 measured first came out below the promise's floor measured after it),
    and the controllers, which start after this, meet a warm server."""

    def fresh() -> list[dict[str, Any]]:  # raw_rate sets each object's namespace
        return [{**obj, "metadata": dict(obj["metadata"])} for obj in manifests]

    await raw_rate(client, fresh()[:WARM_UP], namespace="raw-warm-up", dry_runs=DRY_RUN_THEN_APPLY)
    ssa = await raw_rate(client, fresh(), namespace="raw-ssa", dry_runs=SSA)
    promise = await raw_rate(
        client, fresh(), namespace="raw-dry-run-then-apply", dry_runs=DRY_RUN_THEN_APPLY
    )
    dry_run = await raw_rate(client, fresh(), namespace="raw-dry-run", dry_runs=DRY_RUN)
    return Ceilings(ssa=ssa, promise=promise, dry_run=dry_run)


def of_result(result: dict[str, Any]) -> Ceilings:
    """The ceilings a benchmark result recorded (its JSON keys)."""
    return Ceilings(
        ssa=result["raw_ssa_objects_per_second"],
        promise=result["raw_dry_run_then_apply_objects_per_second"],
        dry_run=result["raw_dry_run_objects_per_second"],
    )


TABLE_HEADERS = ["dry-run+apply obj/s", "ratio to it (while applying)", "dry-run obj/s"]
"""The MTTP table's columns for the promise, after raw SSA's."""


def table_cells(ceilings: Ceilings, *, end_to_end: float, applying: float) -> list[str]:
    """The cells under TABLE_HEADERS for one run."""
    of_promise = end_to_end / ceilings.promise
    applying_of_promise = applying / ceilings.promise
    return [
        f"{ceilings.promise:.0f}",
        f"{of_promise:.0%} ({applying_of_promise:.0%})",
        f"{ceilings.dry_run:.0f}",
    ]
