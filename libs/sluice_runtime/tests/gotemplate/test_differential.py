"""sluice_runtime.gotemplate renders every case exactly as Go's text/template and sprig do.

Each case runs through both engines; where Go succeeds the outputs must be
identical, and where Go fails Python must fail too, with Go's message unless
the case is marked loose (a message Python cannot reproduce word for word).
"""

from __future__ import annotations

from typing import Any

import pytest

from sluice_runtime.gotemplate import TemplateError, render

from .cases_core import CORE
from .cases_sprig import SPRIG
from .conftest import GoRender

ALL: dict[str, dict[str, Any]] = {**CORE, **{f"sprig-{k}": v for k, v in SPRIG.items()}}


@pytest.fixture(scope="module")
def go_results(go_render: GoRender) -> dict[str, dict[str, Any]]:
    names = sorted(ALL)
    batch = [
        {"template": ALL[k]["template"], "data": ALL[k]["data"], "left": ALL[k].get("left", "{{"),
         "right": ALL[k].get("right", "}}"), "missingkey": ALL[k]["missingkey"]}
        for k in names
    ]  # fmt: skip
    return dict(zip(names, go_render(batch), strict=True))


@pytest.mark.parametrize("name", sorted(ALL))
def test_same_as_go(name: str, go_results: dict[str, dict[str, Any]]) -> None:
    spec = ALL[name]
    want = go_results[name]
    try:
        got: str | None = render(
            spec["template"], spec["data"],
            delims=(spec.get("left", "{{"), spec.get("right", "}}")),
            missing_key_error=spec["missingkey"] == "error",
        )  # fmt: skip
        error = None
    except TemplateError as err:
        got, error = None, str(err)
    if want["ok"]:
        assert error is None, f"Go rendered {want['out']!r}; Python failed: {error}"
        assert got == want["out"]
    else:
        assert error is not None, f"Go failed ({want['err']}); Python rendered {got!r}"
        if not spec.get("loose"):
            assert error == want["err"]
