"""Per-object annotations (`kustomize.toolkit.fluxcd.io/...`) that steer the apply.

- `ssa: Ignore` skips; `ssa: IfNotPresent` creates but never updates;
  `ssa: Override` (also the default) first takes over fields that
  kubectl-style managers own and drops kubectl's last-applied annotation, so
  a later apply can remove fields edited in by hand; `ssa: Merge` leaves
  other managers' fields alone.
- `reconcile: disabled` skips an object that exists and keeps it out of pruning.
- `force: enabled` deletes and re-creates an object whose change the API
  calls immutable.
- `prune: disabled` keeps an object when it leaves the set.

Each rule reads the desired object and the live one (either may carry the
annotation), so all of them are pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from sluice_api.kustomize import (
    FORCE_ANNOTATION,
    PRUNE_ANNOTATION,
    RECONCILE_ANNOTATION,
    SSA_ANNOTATION,
)

DISABLED = "disabled"
ENABLED = "enabled"

DEFAULT_PRUNE_EXCLUSIONS: Mapping[str, str] = {
    PRUNE_ANNOTATION: DISABLED,
    RECONCILE_ANNOTATION: DISABLED,
}
"""What pruning never deletes unless told otherwise (label or annotation key: value)."""


class SSAPolicy(StrEnum):
    """Values of the `kustomize.toolkit.fluxcd.io/ssa` annotation."""

    OVERRIDE = "Override"
    MERGE = "Merge"
    IF_NOT_PRESENT = "IfNotPresent"
    IGNORE = "Ignore"


def metadata(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    meta = (obj or {}).get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def annotation(obj: Mapping[str, Any] | None, key: str) -> str:
    return str((metadata(obj).get("annotations") or {}).get(key) or "")


def any_in_metadata(obj: Mapping[str, Any] | None, selector: Mapping[str, str]) -> bool:
    """Flux's rule: any key: value of `selector` among the labels or annotations."""
    if obj is None:
        return False
    labels = metadata(obj).get("labels") or {}
    annotations = metadata(obj).get("annotations") or {}
    return any(labels.get(k) == v or annotations.get(k) == v for k, v in selector.items())


def ssa_policy(desired: Mapping[str, Any], existing: Mapping[str, Any] | None) -> SSAPolicy:
    """The desired object's policy, else the live one's, else Override (case-insensitive)."""
    for obj in (desired, existing):
        value = annotation(obj, SSA_ANNOTATION).lower()
        for policy in SSAPolicy:
            if value == policy.value.lower():
                return policy
    return SSAPolicy.OVERRIDE


def wants_force(desired: Mapping[str, Any], existing: Mapping[str, Any] | None) -> bool:
    return any(annotation(o, FORCE_ANNOTATION).lower() == ENABLED for o in (desired, existing))


def reconcile_disabled(obj: Mapping[str, Any] | None) -> bool:
    return annotation(obj, RECONCILE_ANNOTATION).lower() == DISABLED


def prunable(desired: Mapping[str, Any], existing: Mapping[str, Any] | None) -> bool:
    return not any(any_in_metadata(o, DEFAULT_PRUNE_EXCLUSIONS) for o in (desired, existing))


def skip_reason(desired: Mapping[str, Any], existing: Mapping[str, Any] | None) -> str:
    """Why this object is not applied, or "" when it is."""
    policy = ssa_policy(desired, existing)
    if policy == SSAPolicy.IGNORE:
        return f"{SSA_ANNOTATION}: {SSAPolicy.IGNORE}"
    if existing is None:
        return ""
    if policy == SSAPolicy.IF_NOT_PRESENT:
        return f"{SSA_ANNOTATION}: {SSAPolicy.IF_NOT_PRESENT} and it exists"
    if reconcile_disabled(desired) or reconcile_disabled(existing):
        return f"{RECONCILE_ANNOTATION}: {DISABLED}"
    return ""
