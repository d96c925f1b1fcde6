"""Template functions as Go declares them: parameter types decide argument checks.

Go's text/template checks each argument against the function's parameter
type and fails with ``wrong type for value; expected string; got int``; a
``GoFunc`` carries those types so the evaluator can do the same.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

ANY = "any"
VALUE = "reflect.Value"


@dataclass(frozen=True)
class GoFunc:
    fn: Callable[..., Any]
    params: tuple[str, ...]
    variadic: bool = False
    boxed_result: bool = False  # returns interface{}: a nil result prints as <no value>


def go(
    *params: str, variadic: bool = False, boxed: bool = False
) -> Callable[[Callable[..., Any]], GoFunc]:
    def wrap(fn: Callable[..., Any]) -> GoFunc:
        return GoFunc(fn, params, variadic, boxed)

    return wrap


def from_callable(fn: Callable[..., Any]) -> GoFunc:
    """A caller's Python function: every parameter is interface{}."""
    if isinstance(fn, GoFunc):
        return fn
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return GoFunc(fn, (ANY,), variadic=True, boxed_result=True)
    fixed = [
        p
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    variadic = any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values())
    params = (ANY,) * (len(fixed) + (1 if variadic else 0))
    return GoFunc(fn, params, variadic, boxed_result=True)


def merge(*maps: Mapping[str, GoFunc | Callable[..., Any]] | None) -> dict[str, GoFunc]:
    out: dict[str, GoFunc] = {}
    for m in maps:
        for name, fn in (m or {}).items():
            out[name] = fn if isinstance(fn, GoFunc) else from_callable(fn)
    return out
