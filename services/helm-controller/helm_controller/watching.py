"""What makes a HelmRelease reconcile besides its own changes: a chart's artifact
or readiness (through the `chartRef` index) and a dependency's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sluice_api.helm import NAME_LABEL, NAMESPACE_LABEL
from sluice_runtime import dependencies
from sluice_runtime.informing.watching import Change, Index, Store


def chart_watchers(hrs: Store, kind: str = "HelmChart") -> Callable[[Change], list[str]]:
    """HelmReleases to reconcile when a HelmChart's (or an OCIRepository's) artifact or
    readiness changed."""

    def mapper(change: Change) -> list[str]:
        old = (change.old or {}).get("status") or {}
        new = (change.new or {}).get("status") or {}
        if (
            change.kind == "updated"
            and old.get("artifact") == new.get("artifact")
            and old.get("conditions") == new.get("conditions")
        ):
            return []
        meta = change.obj["metadata"]
        key = f"{meta.get('namespace')}/{meta['name']}"
        labels = meta.get("labels") or {}
        keys = []
        if labels.get(NAME_LABEL) and labels.get(NAMESPACE_LABEL):
            keys.append(f"{labels[NAMESPACE_LABEL]}/{labels[NAME_LABEL]}")
        keys += hrs.referencing(CHART_REF, f"{kind}/{key}")
        return keys

    return mapper


def _chart_refs(obj: dict[str, Any]) -> list[str]:
    ref = (obj.get("spec") or {}).get("chartRef")
    if not isinstance(ref, dict) or not ref.get("kind") or not ref.get("name"):
        return []
    namespace = ref.get("namespace") or obj["metadata"].get("namespace", "")
    return [f"{ref['kind']}/{namespace}/{ref['name']}"]


CHART_REF = Index("spec.chartRef", _chart_refs)
"""HelmReleases by what their `chartRef` names (`kind/namespace/name`)."""


def dependent_watchers(hrs: Store) -> Callable[[Change], list[str]]:
    def mapper(change: Change) -> list[str]:
        return dependencies.dependents(change.key, hrs)

    return mapper
