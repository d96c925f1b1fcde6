"""The ceilings Sluice's apply throughput is measured against: the rates at which this
API server and etcd take the same objects with no controller in the loop.

Raw SSA (issue 19's "raw limit") is one server-side apply per object. The
kustomize-controller keeps the issue's safety promise too: every object of a
revision is dry-run before any is applied, so each object it applies costs at
least a dry-run and an apply. "With the dry-run promise" is that floor: each
object dry-run applied and then applied, into a namespace of its own so it is
a first apply like the controllers'. The dry-run alone says what the promise
adds.

"Every request of the contract" is the floor of the whole delivery, not of
the applies alone: per app, what the benchmark itself sends (its source and
Kustomization created) and what any controller pair serving Flux's API must
send for it, however it is built: the source's finalizer, its status with the
artifact and its NewArtifact Event; the Kustomization's finalizer, the
promise's dry-run and apply of each object (as the tenant, as the benchmark's
`serviceAccountName` asks), its status and its two Events (what was applied;
Ready). Health reads, watches and the stand-in rollouts are left out: a
controller could do without them, the contract's requests it cannot. What
Sluice reaches against it is the share the controllers' own work (their CPU
beside the API server's, the latencies between requests) leaves. The floor's
sources, Kustomizations and applied objects are deleted once it is measured,
before the controllers start.

All four run at the same concurrency on the fresh server, before the
controllers start, so one run prints Sluice's throughput against each.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from e2e.fleet import KUSTOMIZATION, OCIREPO, app_objects, prepare_namespace
from sluice_api.kustomize import NAME_LABEL, NAMESPACE_LABEL
from sluice_api.meta import FINALIZER
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.discovery import RestMapper
from sluice_runtime.kube.patching import add_finalizer_ops
from sluice_runtime.kube.resources import EVENT, NAMESPACE, ResourceType
from sluice_runtime.recording import Event, InvolvedObject

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
    contract: float
    """Objects per second with every request of the contract (the docstring's)."""

    def as_json(self) -> dict[str, float]:
        return asdict(self)


def shares(rate: float, ceilings: Ceilings) -> tuple[float, float, float]:
    """`rate` as a share of raw SSA, of the dry-run promise's floor and of the contract's."""
    return rate / ceilings.ssa, rate / ceilings.promise, rate / ceilings.contract


def against(rate: float, ceilings: Ceilings) -> str:
    """'90.0 obj/s = 18% / 35% / 70%': a throughput and its shares of the three floors."""
    return f"{rate:.1f} obj/s = " + " / ".join(f"{s:.0%}" for s in shares(rate, ceilings))


def ceiling_line(ceilings: Ceilings, *, end_to_end: float, applying: float) -> str:
    """The ceilings and Sluice's two throughputs as shares of raw SSA / of the promise /
    of the contract."""
    return (
        f"raw SSA {ceilings.ssa:.0f} obj/s, with the dry-run promise "
        f"{ceilings.promise:.0f} obj/s (dry-run alone {ceilings.dry_run:.0f} obj/s), "
        f"every request of the contract {ceilings.contract:.0f} obj/s; "
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


CONTRACT_SOURCE_SPEC = {
    "url": "oci://127.0.0.1:1/manifests/podinfo",
    "insecure": True,
    "ref": {"tag": "latest"},
}
"""The floor's OCIRepositories: never fetched, so the address needs no registry."""
TENANT = "flux"
"""The benchmark's tenant service account (`prepare_namespace`)."""


def _condition(kind: str, reason: str, message: str, stamp: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": stamp,
        "observedGeneration": 1,
    }


def _event(involved: dict[str, Any], reason: str, message: str, revision: str) -> dict[str, Any]:
    """An Event for `involved` as the controllers' recorder writes it."""
    event = Event(
        involved=InvolvedObject.of(involved),
        type="Normal",
        severity="info",
        reason=reason,
        message=message,
        metadata={"revision": revision},
        time=datetime.now(UTC),
    )
    return event.kubernetes_json(controller="contract", instance="contract-0")


def contract_requests(
    app: int, namespace: str, objects: Sequence[dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """App `app`'s source and Kustomization as the benchmark creates them, and its
    objects as the Kustomization applies them (in `namespace`, with its labels)."""
    source, kustomization = app_objects("OCIRepository", CONTRACT_SOURCE_SPEC, namespace, app)
    name = kustomization["metadata"]["name"]
    labels = {NAME_LABEL: name, NAMESPACE_LABEL: namespace}
    applied = [
        {**obj, "metadata": {**obj["metadata"], "namespace": namespace, "labels": labels}}
        for obj in objects
    ]
    return source, kustomization, applied


async def contract_rate(
    client: KubeClient,
    manifests: Sequence[dict[str, Any]],
    *,
    namespace: str,
    per_app: int = 4,
    concurrency: int = 64,
    remove: bool = True,
) -> float:
    """Objects per second when every request of the contract (the module's
    docstring) is sent for each app of `manifests` (`per_app` objects each), in a
    new `namespace` with the benchmark's tenant, `concurrency` apps at a time;
    then, unless `remove` is False, its sources and Kustomizations are removed."""
    await prepare_namespace(client, namespace)
    tenant = client.impersonate(f"system:serviceaccount:{namespace}:{TENANT}")
    mapper = RestMapper(client)
    limit = asyncio.Semaphore(concurrency)
    finalizer = add_finalizer_ops(None, FINALIZER)
    revision = "latest@sha256:" + "0" * 64

    async def deliver(app: int, objects: Sequence[dict[str, Any]]) -> None:
        source, kustomization, applied = contract_requests(app, namespace, objects)
        types = [await mapper.resource_for(o["apiVersion"], o["kind"]) for o in applied]
        async with limit:
            source = await client.create(OCIREPO, source)
            kustomization = await client.create(KUSTOMIZATION, kustomization)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            # The source-controller's part.
            name = source["metadata"]["name"]
            await client.json_patch(OCIREPO, name, finalizer, namespace=namespace)
            path = f"ocirepository/{namespace}/{name}/{'0' * 64}.tar.gz"
            artifact = {
                "path": path,
                "url": f"http://source-controller.flux-system.svc.cluster.local./{path}",
                "revision": revision,
                "digest": "sha256:" + "0" * 64,
                "lastUpdateTime": stamp,
                "size": 1024,
            }
            stored = f"stored artifact for digest '{revision}'"
            status = {
                "observedGeneration": 1,
                "url": artifact["url"],
                "artifact": artifact,
                "conditions": [
                    _condition("Ready", "Succeeded", stored, stamp),
                    _condition("ArtifactInStorage", "Succeeded", stored, stamp),
                ],
            }
            await client.merge_patch(
                OCIREPO, name, {"status": status}, namespace=namespace, subresource="status"
            )
            await client.create(EVENT, _event(source, "NewArtifact", stored, revision))
            # The kustomize-controller's part: the promise, then what it tells.
            await client.json_patch(KUSTOMIZATION, name, finalizer, namespace=namespace)
            for dry_run in (True, False):
                for rt, obj in zip(types, applied, strict=True):
                    await tenant.apply(
                        rt, obj, field_manager="kustomize-controller", force=True, dry_run=dry_run
                    )
            entries = [
                {"id": f"{namespace}_{o['metadata']['name']}_{rt.group}_{rt.kind}", "v": rt.version}
                for rt, o in zip(types, applied, strict=True)
            ]
            message = f"Applied revision: {revision}"
            status = {
                "observedGeneration": 1,
                "lastAppliedRevision": revision,
                "lastAttemptedRevision": revision,
                "inventory": {"entries": entries},
                "conditions": [
                    _condition("Ready", "ReconciliationSucceeded", message, stamp),
                    _condition("Healthy", "Succeeded", "Health check passed", stamp),
                ],
            }
            await client.merge_patch(
                KUSTOMIZATION, name, {"status": status}, namespace=namespace, subresource="status"
            )
            created = "\n".join(f"{rt.kind}/{namespace}/{o['metadata']['name']} created"
                                 for rt, o in zip(types, applied, strict=True))  # fmt: skip
            await client.create(EVENT, _event(kustomization, "Progressing", created, revision))
            await client.create(
                EVENT,
                _event(kustomization, "ReconciliationSucceeded", message, revision),
            )

    apps = [manifests[i : i + per_app] for i in range(0, len(manifests), per_app)]
    for obj in manifests[:per_app]:  # discovery warmed before the clock starts
        await mapper.resource_for(obj["apiVersion"], obj["kind"])
    start = time.monotonic()
    await asyncio.gather(*(deliver(i, objects) for i, objects in enumerate(apps)))
    rate = len(manifests) / (time.monotonic() - start)
    if remove:
        await remove_contract_objects(
            client, namespace, manifests, per_app=per_app, concurrency=concurrency
        )
    return rate


async def remove_contract_objects(
    client: KubeClient,
    namespace: str,
    manifests: Sequence[dict[str, Any]],
    *,
    per_app: int = 4,
    concurrency: int = 64,
) -> None:
    """The floor's sources and Kustomizations deleted, finalizers and all, and the
    objects applied for them: the controllers that start next would otherwise
    reconcile those sources and Kustomizations (failing on artifacts that are not
    there), and find the applied objects, which carry the owner labels, in their
    watches of applied kinds, beside the benchmark's own apps."""
    limit = asyncio.Semaphore(concurrency)
    mapper = RestMapper(client)

    async def removed(rt: ResourceType, name: str, *, finalized: bool) -> None:
        async with limit:
            await client.delete(rt, name, namespace=namespace)
            if finalized:
                await client.merge_patch(
                    rt, name, {"metadata": {"finalizers": None}}, namespace=namespace
                )

    apps = len(manifests) // per_app
    applied = [
        (await mapper.resource_for(o["apiVersion"], o["kind"]), o["metadata"]["name"])
        for o in manifests
    ]
    await asyncio.gather(
        *(removed(rt, f"podinfo-{i}", finalized=True)
          for rt in (OCIREPO, KUSTOMIZATION) for i in range(apps)),
        *(removed(rt, name, finalized=False) for rt, name in applied),
    )  # fmt: skip
    for rt in {OCIREPO, KUSTOMIZATION, *(rt for rt, _ in applied)}:
        left = [o["metadata"]["name"] for o in (await client.list(rt, namespace=namespace)).items]
        assert not [n for n in left if n.startswith("podinfo-")], f"{rt.kind}s left: {left}"


async def measure(client: KubeClient, manifests: Sequence[dict[str, Any]]) -> Ceilings:
    """The four ceilings for `manifests`, each into its own new namespace, after a
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
    contract = await contract_rate(client, manifests, namespace="raw-contract")
    return Ceilings(ssa=ssa, promise=promise, dry_run=dry_run, contract=contract)


def of_result(result: dict[str, Any]) -> Ceilings:
    """The ceilings a benchmark result recorded (its JSON keys)."""
    return Ceilings(
        ssa=result["raw_ssa_objects_per_second"],
        promise=result["raw_dry_run_then_apply_objects_per_second"],
        dry_run=result["raw_dry_run_objects_per_second"],
        contract=result["raw_contract_objects_per_second"],
    )


TABLE_HEADERS = [
    "dry-run+apply obj/s",
    "ratio to it (while applying)",
    "dry-run obj/s",
    "contract obj/s",
    "ratio to it (while applying)",
]
"""The MTTP table's columns for the promise and the contract, after raw SSA's."""


def table_cells(ceilings: Ceilings, *, end_to_end: float, applying: float) -> list[str]:
    """The cells under TABLE_HEADERS for one run."""
    return [
        f"{ceilings.promise:.0f}",
        f"{end_to_end / ceilings.promise:.0%} ({applying / ceilings.promise:.0%})",
        f"{ceilings.dry_run:.0f}",
        f"{ceilings.contract:.0f}",
        f"{end_to_end / ceilings.contract:.0%} ({applying / ceilings.contract:.0%})",
    ]
