"""Flux Operator's annotations for when its kinds reconcile.

`fluxcd.controlplane.io/reconcile: disabled` stops reconciling;
`reconcileEvery` and `reconcileTimeout` are Go durations. A value that does
not parse falls back to the default, as in Flux Operator.
"""

from __future__ import annotations

from collections.abc import Mapping

from sluice_api.meta import parse_duration
from sluice_api.resourceset import (
    RECONCILE_ANNOTATION,
    RECONCILE_EVERY_ANNOTATION,
    RECONCILE_TIMEOUT_ANNOTATION,
)

DISABLED_RECHECK = 3600.0
"""A disabled object is looked at again when it changes, or after this long."""


def disabled(annotations: Mapping[str, str] | None) -> bool:
    return (annotations or {}).get(RECONCILE_ANNOTATION, "").lower() == "disabled"


def _seconds(annotations: Mapping[str, str] | None, key: str, default: float) -> float:
    text = (annotations or {}).get(key)
    if not text:
        return default
    try:
        seconds = parse_duration(text).total_seconds()
    except ValueError:
        return default
    return seconds if seconds > 0 else default


def interval(annotations: Mapping[str, str] | None, *, default: float) -> float:
    return max(_seconds(annotations, RECONCILE_EVERY_ANNOTATION, default), 1.0)


def timeout(annotations: Mapping[str, str] | None, *, default: float) -> float:
    return _seconds(annotations, RECONCILE_TIMEOUT_ANNOTATION, default)
