"""sluice_runtime.gotemplate renders every case exactly as Go's text/template and sprig do.

Each case runs through both engines; where Go succeeds the outputs must be
identical, and where Go fails Python must fail too, with Go's message unless
the case is marked loose (a message Python cannot reproduce word for word).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from sluice_runtime.gotemplate import TemplateError, render
from sluice_runtime.gotemplate.builtins import BUILTINS
from sluice_runtime.gotemplate.sprig import SPRIG as SPRIG_FUNCS

from .cases_core import CORE
from .cases_sprig import SPRIG
from .cases_yaml import YAML
from .conftest import GoRender
from .random_templates import generate, generate_printf, generate_yaml

ALL: dict[str, dict[str, Any]] = {**CORE, **{f"sprig-{k}": v for k, v in SPRIG.items()}, **YAML}


@pytest.fixture(scope="module")
def go_results(go_render: GoRender) -> dict[str, dict[str, Any]]:
    names = sorted(ALL)
    batch = [
        {
            "template": ALL[k]["template"],
            "data": ALL[k]["data"],
            "left": ALL[k].get("left", "{{"),
            "right": ALL[k].get("right", "}}"),
            "missingkey": ALL[k]["missingkey"],
        }
        for k in names
    ]
    return dict(zip(names, go_render(batch), strict=True))


@pytest.mark.parametrize("name", sorted(ALL))
def test_same_as_go(name: str, go_results: dict[str, dict[str, Any]]) -> None:
    spec = ALL[name]
    want = go_results[name]
    try:
        got: str | None = render(
            spec["template"],
            spec["data"],
            delims=(spec.get("left", "{{"), spec.get("right", "}}")),
            missing_key_error=spec["missingkey"] == "error",
        )
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


# Not comparable with Go here: random (randInt), the working directory (osAbs), the clock
# (ago), and
# gosimple/slug, which Debian does not package (slugify); test_gotemplate.py covers them.
NOT_DIFFERENTIAL = {"randInt", "osAbs", "slugify", "ago"}


def test_every_function_has_a_differential_case() -> None:
    text = " ".join(spec["template"] for spec in ALL.values())
    names = set(SPRIG_FUNCS) | set(BUILTINS)
    uncovered = sorted(
        name
        for name in names - NOT_DIFFERENTIAL
        if not re.search(r"(?<![\w.])" + re.escape(name) + r"(?!\w)", text)
    )
    assert uncovered == []


@pytest.mark.parametrize(
    "cases",
    [
        pytest.param(generate(seed=17, count=1000), id="pipelines-and-control"),
        pytest.param(generate_printf(seed=23, count=1000), id="printf-verbs-flags-widths"),
        pytest.param(generate_yaml(seed=29, count=1000), id="toYaml-of-tricky-data"),
    ],
)
def test_random_templates_same_as_go(go_render: GoRender, cases: list[dict[str, Any]]) -> None:
    batch = [{**c, "left": "{{", "right": "}}"} for c in cases]
    differ = []
    for spec, want in zip(cases, go_render(batch), strict=True):
        try:
            got = render(
                spec["template"], spec["data"], missing_key_error=spec["missingkey"] == "error"
            )
            same = want["ok"] and got == want["out"]
        except TemplateError as err:
            # Go 1.19 refuses to range over an integer; Sluice ranges as Go 1.22 does.
            go_119_range = "range can't iterate over" in want["err"] and "more than one" in str(err)
            same = (not want["ok"] and str(err) == want["err"]) or go_119_range
        if not same:
            differ.append(spec["template"])
    assert differ == []
