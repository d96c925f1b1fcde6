"""The last step: what the current release holds, written as Flux 2.8 writes it.

`status.inventory` lists every object of the newest release's manifest (the
one Helm stored, post-renderers applied), `<namespace>_<name>_<group>_<kind>`
with an empty namespace for cluster-scoped kinds, which API discovery tells
apart (cached: a steady reconcile asks nothing). A release that is not
deployed leaves the last inventory as it was. `status.lastAppliedRevision`,
which only v2beta1 readers see, is the revision of a deployed release.
"""

from __future__ import annotations

from typing import Any

import yaml

from helm_controller.contexts import HelmReleaseContext
from sluice_api.kustomize import ResourceInventory
from sluice_api.meta import ObjectId
from sluice_runtime import building
from sluice_runtime.kube.discovery import RestMapper, UnknownKind
from sluice_runtime.reconciling.steps import Result, step


def manifest_ids(manifest: str, *, namespace: str) -> list[tuple[dict[str, Any], str]]:
    """The objects of a release manifest with the namespace helm installs each into
    when it is namespaced (its own, else the release's)."""
    found = []
    for doc in building.load_yaml_all(manifest):
        if not isinstance(doc, dict) or not doc.get("kind"):
            continue
        meta = doc.get("metadata") or {}
        found.append((doc, str(meta.get("namespace") or namespace)))
    return found


async def inventory_of(manifest: str, *, namespace: str, mapper: RestMapper) -> ResourceInventory:
    entries = []
    for doc, ns in manifest_ids(manifest, namespace=namespace):
        api_version = str(doc.get("apiVersion") or "")
        oid = ObjectId.of(doc)
        try:
            namespaced = (await mapper.resource_for(api_version, oid.kind)).namespaced
        except UnknownKind:
            # Not served any more (its CRD went): only its own namespace is known.
            namespaced = bool(oid.namespace)
        scoped = ObjectId(oid.group, oid.kind, ns if namespaced else "", oid.name)
        entries.append((scoped, api_version.rpartition("/")[2]))
    return ResourceInventory.of(entries)


@step()
async def reconcile_inventory(ctx: HelmReleaseContext) -> Result | None:
    if not ctx.releases:
        return None
    release, snap = ctx.releases[0]
    if snap.status != "deployed":
        return None
    status = ctx.obj.status
    mapper = ctx.target_mapper or ctx.services.rest_mapper(ctx.client)
    try:
        status.inventory = await inventory_of(
            str(release.get("manifest") or ""), namespace=ctx.release_namespace, mapper=mapper
        )
    except yaml.YAMLError:
        # Helm stored it, so it parses; a corrupted record keeps the last inventory.
        return None
    status.last_applied_revision = status.last_attempted_revision
    return None
