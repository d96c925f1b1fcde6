"""What the differential suite cannot show: Go 1.23 syntax, Flux Operator's calling
convention, slugify (gosimple/slug is not packaged in Debian), and the error types."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

from sluice_runtime.gotemplate import ExecError, ParseError, TemplateError, as_go_json, render
from sluice_runtime.gotemplate.yamling import slugify

INPUTS = {"tenant": "team1", "app": {"version": "6.7.x", "replicas": 2}, "tags": ["a", "b"]}


def rs(text: str, inputs: dict[str, Any] = INPUTS, **kw: Any) -> str:
    """Render as ResourceSet does: << >>, missingkey=error, inputs as a function."""
    return render(text, None, delims=("<<", ">>"), funcs={"inputs": lambda: inputs}, **kw)


@pytest.mark.parametrize(
    ("template", "data", "want"),
    [
        pytest.param(
            "{{with .a}}A{{else with .b}}B{{.}}{{else}}C{{end}}",
            {"a": 0, "b": 7},
            "B7",
            id="else-with",
        ),
        pytest.param(
            "{{with .a}}A{{else with .b}}B{{else}}C{{end}}",
            {"a": 0, "b": ""},
            "C",
            id="else-with-falls-through",
        ),
        pytest.param("{{range 3}}{{.}}{{end}}", {}, "012", id="range-int"),
        pytest.param("{{range $i := .n}}{{$i}},{{end}}", {"n": 2}, "0,1,", id="range-int-var"),
        pytest.param("{{range 0}}x{{else}}none{{end}}", {}, "none", id="range-int-zero-else"),
        pytest.param(
            "{{range .l}}{{if eq . 3}}{{break}}{{end}}{{.}}{{end}}",
            {"l": [1, 2, 3, 4]},
            "12",
            id="break",
        ),
        pytest.param("{{ .a }}", {"a": "x"}, "x", id="curly-default-delims"),
        pytest.param("{{ dateInZone }}", {}, None, id="clock-functions-are-refused"),
    ],
)
def test_language_beyond_go_1_19(template: str, data: Any, want: str | None) -> None:
    if want is None:
        with pytest.raises(ParseError, match='function "dateInZone" not defined'):
            render(template, data)
        return
    assert render(template, data) == want


def test_range_over_int_refuses_two_variables() -> None:
    with pytest.raises(ExecError, match="can't use 3 to iterate over more than one variable"):
        render("{{range $i, $v := 3}}{{end}}", {})


@pytest.mark.parametrize(
    ("template", "want"),
    [
        pytest.param("name: podinfo-<< inputs.tenant >>", "name: podinfo-team1", id="field"),
        pytest.param("<< inputs.app.version | quote >>", '"6.7.x"', id="pipe"),
        pytest.param("<< inputs.app.replicas | int >>", "2", id="int"),
        pytest.param(
            "<<- range $t := inputs.tags >>\n- << $t >><<- end >>", "\n- a\n- b", id="range-trim"
        ),
        pytest.param("{{ .not.a.template }}", "{{ .not.a.template }}", id="curly-is-text"),
        pytest.param(
            "<< inputs.app | toYaml | nindent 2 >>",
            "\n  replicas: 2\n  version: 6.7.x\n  ",
            id="toYaml-nindent",
        ),
        pytest.param("<< inputs.tenant | slugify >>", "team1", id="slugify"),
    ],
)
def test_resourceset_calling_convention(template: str, want: str) -> None:
    assert rs(template) == want


@pytest.mark.parametrize(
    ("template", "name", "message"),
    [
        pytest.param(
            "a: << inputs.nope >>",
            "resources[0]",
            'template: resources[0]:1:6: executing "resources[0]" at <inputs>: '
            'map has no entry for key "nope"',
            id="missing-key",
        ),
        pytest.param(
            "a:\n  b: << nope >>",
            "resourcesTemplate",
            'template: resourcesTemplate:2: function "nope" not defined',
            id="unknown-function",
        ),
        pytest.param(
            "<< if inputs.tenant >>", "t", "template: t:1: unexpected EOF", id="unclosed-if"
        ),
        pytest.param(
            '<< fail "tenant is required" >>',
            "t",
            'template: t:1:3: executing "t" at <fail "tenant is required">: '
            "error calling fail: tenant is required",
            id="fail",
        ),
    ],
)
def test_errors_name_the_template_line_and_problem(template: str, name: str, message: str) -> None:
    with pytest.raises(TemplateError) as raised:
        rs(template, name=name)
    assert str(raised.value) == message


def test_missing_key_default_prints_no_value() -> None:
    assert rs("<< inputs.nope >>", missing_key_error=False) == "<no value>"


def test_a_callers_function_error_is_a_template_error() -> None:
    def boom(x: Any) -> str:
        raise ValueError(f"bad {x}")

    with pytest.raises(ExecError, match=r"error calling boom: bad 1"):
        render("{{ boom 1 }}", {}, funcs={"boom": boom})


def test_deep_nesting_is_a_template_error_not_a_crash() -> None:
    with pytest.raises(TemplateError, match="template: t: nested too deeply"):
        render("{{" + "(" * 2000 + "1" + ")" * 2000 + "}}", {}, name="t")


def test_infinite_template_recursion_is_an_error_not_a_crash() -> None:
    with pytest.raises(ExecError, match="exceeded maximum template depth"):
        render('{{define "r"}}{{template "r" .}}{{end}}{{template "r" .}}', {})


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param(">=1.0.0-rc.0", "1-0-0-rc-0", id="flux-operator-golden-rc"),
        pytest.param(">=1.0.0", "1-0-0", id="flux-operator-golden"),
        pytest.param("Hello World!", "hello-world", id="words"),
        pytest.param("  trim me  ", "trim-me", id="trim"),
        pytest.param("Ünïcödé Straße", "unicode-strasse", id="transliterate"),
        pytest.param("北京", "bei-jing", id="cjk"),
        pytest.param("a & b @ c", "a-and-b-at-c", id="english-substitutions"),
        pytest.param("__x__", "x", id="trim-underscores"),
        pytest.param("keep_under-score", "keep_under-score", id="underscore-kept"),
        pytest.param("a--b  c", "a-b-c", id="collapse-dashes"),
        pytest.param("feature/JIRA-123 fix", "feature-jira-123-fix", id="branch-name"),
        pytest.param("word-" * 20, "-".join(["word"] * 12), id="smart-truncate-at-dash"),
        pytest.param("x" * 70, "x" * 63, id="one-long-word-cut-at-63"),
        pytest.param("", "", id="empty"),
    ],
)
def test_slugify(text: str, want: str) -> None:
    assert slugify(text) == want
    assert len(slugify(text)) <= 63


@pytest.mark.parametrize(
    ("template", "want"),
    [
        pytest.param("{{ .n }} {{ .f }} {{ .l }}", "2 1.5 [1 2]", id="numbers-print-as-go"),
        pytest.param("{{ .n | int }} {{ add .n 1 }}", "2 3", id="sprig-converts"),
        pytest.param("{{ eq .n 2.0 }}", "true", id="float-equals-float"),
        pytest.param("{{ eq .n 2 }}", None, id="float-is-not-int"),
        pytest.param("{{ toYaml .m }}", "k: 3\n", id="toYaml-integral-float"),
    ],
)
def test_inputs_decoded_as_go_decodes_json(template: str, want: str | None) -> None:
    data = as_go_json({"n": 2, "f": 1.5, "l": [1, 2], "m": {"k": 3}, "b": True, "s": "x"})
    if want is None:
        with pytest.raises(ExecError, match="incompatible types for comparison"):
            render(template, data)
        return
    assert render(template, data) == want


def test_as_go_json_keeps_bools_strings_and_nulls() -> None:
    assert as_go_json({"b": True, "s": "x", "n": None, "l": [1, None]}) == {
        "b": True,
        "s": "x",
        "n": None,
        "l": [1.0, None],
    }
    assert isinstance(as_go_json({"b": True})["b"], bool)


def test_rand_int_stays_in_range_and_refuses_an_empty_one() -> None:
    values = {int(render("{{ randInt 3 6 }}", {})) for _ in range(200)}
    assert values <= {3, 4, 5} and len(values) > 1
    with pytest.raises(ExecError, match="error calling randInt: invalid argument to Intn"):
        render("{{ randInt 5 5 }}", {})


def test_os_abs_resolves_against_the_working_directory() -> None:
    assert render('{{ osAbs "a/../b" }}', {}) == os.getcwd() + "/b"
    assert render('{{ osAbs "/x//y" }}', {}) == "/x/y"


def test_the_same_template_renders_for_many_inputs() -> None:
    template = "name: << inputs.tenant >>-<< inputs.i >>"
    outs = [rs(template, {"tenant": "t", "i": i}) for i in range(3)]
    assert outs == ["name: t-0", "name: t-1", "name: t-2"]


def test_ago_counts_from_now() -> None:
    assert re.fullmatch(r"\d+h\d+m\d+s", render('{{ toDate "2006-01-02" "2020-01-01" | ago }}', {}))
    assert render('{{ toDate "2006" "2999" | ago }}', {}).startswith("-")
    assert render("{{ ago .x }}", {"x": "not a time"}) == "0s"
