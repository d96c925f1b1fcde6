"""The sprig functions Flux Operator's ResourceSet templates offer (filled in by later commits)."""

from __future__ import annotations

from sluice_runtime.gotemplate.functions import GoFunc

SPRIG: dict[str, GoFunc] = {}
