"""Drift of the cluster from a release's manifest (`spec.driftDetection`).

Flux's method: every object of the manifest Helm stored for the release is
dry-run with a server-side apply and compared with the live object; the
objects that would change (or are missing) have drifted. `warn` reports
them in an event; `enabled` also applies them (server-side, forced, as the
helm-controller field manager), which puts back what was edited without a
`helm upgrade` and without a new release revision. The dry-run, the
comparison and the ignore rules are the runtime's (`ssa`,
`kube.ignoring`), the same the kustomize-controller uses, so a path ignored
here is left alone exactly as a Kustomization's `driftIgnoreRules` leave it.

An object labelled or annotated `helm.toolkit.fluxcd.io/driftDetection:
disabled` is left out, as in Flux.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from sluice_api.meta import ObjectId
from sluice_runtime import building
from sluice_runtime.ssa.changeset import Preview
from sluice_runtime.ssa.normalizing import has_drifted

DISABLED_KEY = "helm.toolkit.fluxcd.io/driftDetection"
DISABLED = "disabled"


class ManifestError(ValueError):
    """The stored release manifest cannot be read as Kubernetes objects."""


def manifest_objects(manifest: str, *, namespace: str) -> list[dict[str, Any]]:
    """The objects of a release manifest, in the release namespace unless they name one.

    Helm installs a namespaced object without `metadata.namespace` into the
    release namespace; the apply drops the namespace again of cluster-scoped kinds.
    Objects opted out of drift detection are left out.
    """
    try:
        # As Kubernetes reads YAML: `2024-01-01` or `10:30` stay strings.
        documents = building.load_yaml_all(manifest)
    except yaml.YAMLError as error:
        raise ManifestError(f"the release manifest is not valid YAML: {error}") from None
    objects = []
    for doc in documents:
        if doc is None:
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
            raise ManifestError("the release manifest holds a document that is not an object")
        if _opted_out(doc):
            continue
        doc["metadata"].setdefault("namespace", namespace)
        objects.append(doc)
    return objects


def _opted_out(obj: Mapping[str, Any]) -> bool:
    meta = obj.get("metadata") or {}
    return any(
        str((meta.get(where) or {}).get(DISABLED_KEY, "")).lower() == DISABLED
        for where in ("labels", "annotations")
    )


@dataclass(frozen=True)
class Drift:
    """One object that is not as the release manifest says."""

    id: ObjectId
    missing: bool

    @property
    def subject(self) -> str:
        """`Kind/namespace/name`."""
        return self.id.display


def drifted(previews: Sequence[Preview]) -> list[Drift]:
    """The objects whose dry-run differs from the live object, or that are gone.

    Skipped objects (a `note`, no dry-run) are not drift.
    """
    found = []
    for preview in previews:
        if preview.dry_run is None:
            continue
        if preview.existing is None:
            found.append(Drift(preview.id, missing=True))
        elif has_drifted(preview.existing, preview.dry_run):
            found.append(Drift(preview.id, missing=False))
    return found


def describe(drifts: Sequence[Drift]) -> str:
    """One line per object, as Flux's drift events list them."""
    return "\n".join(f"{d.subject} {'removed' if d.missing else 'changed'}" for d in drifts)


def select(objects: Sequence[dict[str, Any]], drifts: Sequence[Drift]) -> list[dict[str, Any]]:
    """The manifest objects that drifted (a cluster-scoped one's id has no namespace)."""
    ids = {d.id for d in drifts}
    chosen = []
    for obj in objects:
        oid = ObjectId.of(obj)
        if oid in ids or ObjectId(oid.group, oid.kind, "", oid.name) in ids:
            chosen.append(obj)
    return chosen
