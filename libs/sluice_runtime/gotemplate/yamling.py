"""Flux Operator's extra template functions: toYaml and slugify."""

from __future__ import annotations

from sluice_runtime.gotemplate.functions import GoFunc

EXTRAS: dict[str, GoFunc] = {}
