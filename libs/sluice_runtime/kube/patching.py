"""Patches computed from what changed, so writes carry only differences.

`merge_patch` builds an RFC 7386 JSON merge patch turning one document into
another; the runner sends it to /status once per reconcile, and sends nothing
when it is empty, which keeps idle controllers from generating watch events.
Finalizer edits use JSON patch with a `test` so a concurrent edit of the list
fails with a conflict instead of being overwritten.
"""

from __future__ import annotations

from typing import Any

from sluice_api.meta import JSON


def merge_patch(old: JSON, new: JSON) -> JSON:
    """The merge patch that turns `old` into `new` (empty when they are equal).

    Lists are replaced whole, as merge patches require; keys missing from
    `new` become null, which deletes them.
    """
    patch: JSON = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key, _MISSING)
        if before == value:
            continue
        if isinstance(value, dict) and isinstance(before, dict):
            nested = merge_patch(before, value)
            if nested:
                patch[key] = nested
        else:
            patch[key] = value
    return patch


_MISSING: Any = object()


def add_finalizer_ops(finalizers: list[str] | None, finalizer: str) -> list[JSON]:
    if not finalizers:
        return [{"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}]
    return [
        {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
        {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
    ]


def remove_finalizer_ops(finalizers: list[str], finalizer: str) -> list[JSON]:
    return [
        {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
        {
            "op": "replace",
            "path": "/metadata/finalizers",
            "value": [f for f in finalizers if f != finalizer],
        },
    ]
