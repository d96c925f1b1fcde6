"""Go's text/template in Python, with the sprig functions Flux Operator's ResourceSet offers.

``render`` parses and executes one template the way Go's ``text/template``
does (same output, same error texts), so ResourceSet templates written for
Flux Operator render identically here; the differential test suite checks
that against Go itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from sluice_runtime.gotemplate import budgets
from sluice_runtime.gotemplate.budgets import DEFAULT_MAX_STEPS, Budget
from sluice_runtime.gotemplate.builtins import BUILTINS
from sluice_runtime.gotemplate.errors import ExecError, ParseError, TemplateError
from sluice_runtime.gotemplate.executing import State
from sluice_runtime.gotemplate.functions import GoFunc, merge
from sluice_runtime.gotemplate.parsing import parse
from sluice_runtime.gotemplate.sprig import SPRIG
from sluice_runtime.gotemplate.values import NO_VALUE

__all__ = [
    "DEFAULT_MAX_STEPS",
    "Budget",
    "ExecError",
    "GoFunc",
    "ParseError",
    "TemplateError",
    "as_go_json",
    "render",
]


def render(
    text: str,
    data: Any,
    *,
    name: str = "template",
    delims: tuple[str, str] = ("{{", "}}"),
    missing_key_error: bool = True,
    funcs: Mapping[str, Callable[..., Any] | GoFunc] | None = None,
    budget: Budget | None = None,
) -> str:
    """Render ``text`` with ``data`` (JSON-like) as Go's text/template with sprig would.

    Raises TemplateError with Go's message. ``missing_key_error`` is Go's
    ``missingkey=error`` (a missing map key fails) versus the default
    (it prints ``<no value>``). ``funcs`` adds or overrides functions.
    ``budget`` bounds the steps and bytes of the render (budgets.py; a fresh
    default one when not given); pass one Budget to several renders to bound them together.
    """
    budget = budget or Budget()
    table = merge(BUILTINS, SPRIG, funcs)
    try:
        trees = _parse(name, text, delims[0], delims[1], frozenset(table))
        state = State(trees, table, missing_key_error=missing_key_error, budget=budget)
        with budgets.spending(budget):
            return state.execute(trees[name], NO_VALUE if data is None else data)
    except RecursionError:
        # Go's goroutine stack takes nesting Python's cannot; refuse it as a template error
        # rather than let it escape into the caller's reconcile.
        raise TemplateError(f"template: {name}: nested too deeply") from None


@functools.lru_cache(maxsize=512)
def _parse(name: str, text: str, left: str, right: str, names: frozenset[str]) -> dict[str, Any]:
    # A ResourceSet renders the same template once per input; execution never
    # changes a tree, so one parse serves them all.
    return parse(name, text, left, right, set(names))


def as_go_json(value: Any) -> Any:
    """``value`` as Go's json.Unmarshal into ``interface{}`` gives it: every number a float64.

    Flux Operator decodes ResourceSet inputs that way, so ``eq inputs.replicas 2``
    fails there (float64 against int) and ``2`` prints as ``2``; pass inputs
    through this to render them exactly as it does.
    """
    if isinstance(value, bool) or value is None or isinstance(value, str | float):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, dict):
        return {k: as_go_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_go_json(v) for v in value]
    return value
