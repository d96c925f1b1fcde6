"""The ResourceSet's use of the shared apply engine, in one place.

Apply, garbage collection and health go through sluice_runtime's
ResourceManager, the engine the kustomize-controller uses (staged
server-side apply, inventory, prune, kstatus health): one engine, not a
copy. What is the ResourceSet's own is the order of garbage collection:
Flux's kinds (Kustomizations, HelmReleases, sources) are deleted and their
deletion awaited before native objects, so a Kustomization can finalize
(prune what it applied) while its namespace, service account and RBAC
still exist.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence

from sluice_api.meta import ObjectId
from sluice_api.resourceset import PRUNE_ANNOTATION, RECONCILE_ANNOTATION
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.discovery import RestMapper, UnknownKind
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.health import HealthReport
from sluice_runtime.ssa.changeset import Action, ChangeSet
from sluice_runtime.ssa.errors import ApplyFailed, ValidationFailed
from sluice_runtime.ssa.manager import ResourceManager

__all__ = [
    "ApplyFailed",
    "ChangeSet",
    "ObjectId",
    "ResourceManager",
    "ValidationFailed",
    "garbage_collect",
    "manager",
    "wait",
]

FIELD_MANAGER = "resourceset-controller"
PRUNE_EXCLUSIONS = {PRUNE_ANNOTATION: "disabled", RECONCILE_ANNOTATION: "disabled"}
"""Objects marked so are never garbage-collected (Flux Operator's annotations)."""


def manager(
    client: KubeClient, mapper: RestMapper, *, owner_labels: Mapping[str, str]
) -> ResourceManager:
    return ResourceManager(client, mapper, field_manager=FIELD_MANAGER, owner_labels=owner_labels)


def is_flux_kind(oid: ObjectId) -> bool:
    return oid.group.endswith(".fluxcd.io") or oid.group == "fluxcd.controlplane.io"


async def garbage_collect(
    rm: ResourceManager, ids: Sequence[ObjectId], *, timeout: float
) -> ChangeSet:
    """Delete what left the set: Flux kinds first, awaited, then the rest."""
    flux = [i for i in ids if is_flux_kind(i)]
    native = [i for i in ids if not is_flux_kind(i)]
    deleted = ChangeSet()
    if flux:
        done = await rm.delete_all(flux, skip_annotations=PRUNE_EXCLUSIONS)
        deleted.extend(done)
        await _wait_gone(rm, [e.id for e in done.entries if e.action == Action.DELETED], timeout)
    if native:
        deleted.extend(await rm.delete_all(native, skip_annotations=PRUNE_EXCLUSIONS))
    return deleted


async def _wait_gone(rm: ResourceManager, ids: Sequence[ObjectId], timeout: float) -> None:
    """Until every object of `ids` is gone (its finalizers ran), or `timeout`."""
    deadline = time.monotonic() + timeout
    left = list(ids)
    while left:
        still: list[ObjectId] = []
        for oid in left:
            try:
                rt = await rm.mapper.resource_for_kind(oid.group, oid.kind)
                await rm.client.get(rt, oid.name, oid.namespace or None)
            except (NotFound, UnknownKind):
                continue
            still.append(oid)
        left = still
        if not left:
            return
        if time.monotonic() > deadline:
            names = ", ".join(o.display for o in left)
            raise ApplyFailed.of(
                names, "garbage collection", TimeoutError(f"still terminating after {timeout:g}s")
            )
        await asyncio.sleep(0.5)


async def wait(rm: ResourceManager, changeset: ChangeSet, *, timeout: float) -> HealthReport:
    return await rm.wait_for_set(changeset, timeout=timeout, interval=1.0)
