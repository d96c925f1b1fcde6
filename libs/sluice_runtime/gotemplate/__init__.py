"""Go's text/template in Python, with the sprig functions Flux Operator's ResourceSet offers.

``render`` parses and executes one template the way Go's ``text/template``
does (same output, same error texts), so ResourceSet templates written for
Flux Operator render identically here; the differential test suite checks
that against Go itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sluice_runtime.gotemplate.builtins import BUILTINS
from sluice_runtime.gotemplate.errors import ExecError, ParseError, TemplateError
from sluice_runtime.gotemplate.executing import State
from sluice_runtime.gotemplate.functions import GoFunc, merge
from sluice_runtime.gotemplate.parsing import parse
from sluice_runtime.gotemplate.sprig import SPRIG
from sluice_runtime.gotemplate.values import NO_VALUE

__all__ = ["ExecError", "GoFunc", "ParseError", "TemplateError", "render"]


def render(
    text: str,
    data: Any,
    *,
    name: str = "template",
    delims: tuple[str, str] = ("{{", "}}"),
    missing_key_error: bool = True,
    funcs: Mapping[str, Callable[..., Any] | GoFunc] | None = None,
) -> str:
    """Render ``text`` with ``data`` (JSON-like) as Go's text/template with sprig would.

    Raises TemplateError with Go's message. ``missing_key_error`` is Go's
    ``missingkey=error`` (a missing map key fails) versus the default
    (it prints ``<no value>``). ``funcs`` adds or overrides functions.
    """
    table = merge(BUILTINS, SPRIG, funcs)
    trees = parse(name, text, delims[0], delims[1], set(table))
    state = State(trees, table, missing_key_error=missing_key_error)
    return state.execute(trees[name], NO_VALUE if data is None else data)
