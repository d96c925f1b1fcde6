"""`ssa: Override`: making the fields kubectl-style managers own ours.

Without this, a field added with `kubectl apply/edit` stays owned by kubectl
and our apply can never remove it. The surgery is a JSON patch of
`metadata.managedFields` (and the removal of kubectl's last-applied
annotation), computed by the pure functions here.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from sluice_runtime.kube.client import JSON
from sluice_runtime.ssa.policy import metadata

LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"

TAKEOVER_MANAGERS: tuple[tuple[str, str], ...] = (
    ("kubectl", "Apply"),
    ("kubectl", "Update"),
    ("before-first-apply", "Update"),
)
"""Managers whose fields `ssa: Override` takes over, as (name prefix, operation):
`kubectl apply` (client-side, and server-side with --force-conflicts),
`kubectl edit/patch/scale/label/...`, and kubectl's pre-SSA migration entry."""


def take_over_patch(existing: Mapping[str, Any], manager: str) -> list[JSON]:
    """The JSON patch that hands kubectl's fields of `existing` to `manager`; [] when
    there is nothing to take. It starts with a resourceVersion test, so a
    concurrent writer wins instead of us overwriting its managedFields with a
    stale list."""
    meta = metadata(existing)
    ops: list[JSON] = []
    if LAST_APPLIED_ANNOTATION in (meta.get("annotations") or {}):
        key = LAST_APPLIED_ANNOTATION.replace("~", "~0").replace("/", "~1")
        ops.append({"op": "remove", "path": f"/metadata/annotations/{key}"})
    merged = take_over_managed_fields(meta.get("managedFields") or [], manager)
    if merged is not None:
        ops.append({"op": "replace", "path": "/metadata/managedFields", "value": merged})
    version = meta.get("resourceVersion")
    if ops and version:
        ops.insert(0, {"op": "test", "path": "/metadata/resourceVersion", "value": version})
    return ops


def take_over_managed_fields(
    entries: Sequence[Mapping[str, Any]], manager: str
) -> list[JSON] | None:
    """managedFields with kubectl-style managers' fields merged into `manager`'s Apply entry.

    Returns None when no entry matches. The API server keys entries by
    manager and operation, so two Apply entries for one manager would
    shadow each other: matching field sets are merged into one entry.
    """

    def matches(entry: Mapping[str, Any]) -> bool:
        name = str(entry.get("manager") or "")
        return (
            not entry.get("subresource")
            and bool(_owned_fields(entry))
            and any(
                name.startswith(prefix) and entry.get("operation") == operation
                for prefix, operation in TAKEOVER_MANAGERS
            )
        )

    if not any(matches(e) for e in entries):
        return None
    ours: JSON | None = None
    kept: list[JSON] = []
    for entry in entries:
        if (
            entry.get("manager") == manager
            and entry.get("operation") == "Apply"
            and not entry.get("subresource")
        ):
            ours = copy.deepcopy(dict(entry))
        elif not matches(entry):
            kept.append(copy.deepcopy(dict(entry)))
    for entry in entries:
        if not matches(entry):
            continue
        if ours is None:
            ours = {
                **copy.deepcopy(dict(entry)),
                "manager": manager,
                "operation": "Apply",
                "fieldsV1": _owned_fields(entry),
            }
        else:
            ours["fieldsV1"] = _merge_fields(ours.get("fieldsV1") or {}, _owned_fields(entry))
    assert ours is not None
    return [ours, *kept]


def _owned_fields(entry: Mapping[str, Any]) -> JSON:
    """An entry's fields an apply can own: all but status.

    Servers before 1.22 record a write to the status subresource as an
    Update of the object itself (no `subresource` in the entry); status is
    never applied, so such fields are neither ours to take nor drift.
    """
    fields = entry.get("fieldsV1")
    if not isinstance(fields, Mapping):
        return {}
    return {k: copy.deepcopy(v) for k, v in fields.items() if k != "f:status"}


def _merge_fields(a: Mapping[str, Any], b: Mapping[str, Any]) -> JSON:
    """Union of two FieldsV1 tries (nested maps whose leaves are `{}`)."""
    merged: JSON = copy.deepcopy(dict(a))
    for key, value in b.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge_fields(merged[key], value)
        else:
            merged.setdefault(key, copy.deepcopy(value))
    return merged
