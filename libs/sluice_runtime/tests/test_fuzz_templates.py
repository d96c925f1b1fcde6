"""Fuzz of ResourceSet templates (gotemplate.render) within a small budget.

Templates are generated from actions over the sprig functions a tenant can
call, with loops, variables that double what they hold, and random text. A
render either returns output within the budget's bytes, or raises a
TemplateError (the budget's own ExecError among them); nothing else escapes,
and the work and memory it takes are bounded by the budget: a function that
works without spending from it (a quadratic `uniq`, an exponential
`deepEqual` over a value that shares its parts) fails the call bound
instead of running for minutes.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sluice_envtest.fuzzing import bounded, examples
from sluice_runtime import gotemplate
from sluice_runtime.gotemplate import Budget, TemplateError

MAX_STEPS = 2_000
MAX_BYTES = 64 << 10
# A step costs tens of Python calls (hundreds for the heaviest functions); what a
# render may make is MAX_BYTES. Measured on generated templates: under 60k calls
# and 1.5 MiB at the peak.
MAX_CALLS = 1_000 * MAX_STEPS
MAX_PEAK = 32 * MAX_BYTES + (4 << 20)

INPUTS = {"name": "app", "replicas": 3.0, "tags": ["a", "b", "a"], "env": {"k": "v", "n": 1.0}}

atoms = st.sampled_from([
    "1", "0", "-1", "3", "100", "1.5", '"a"', '"abc"', '""', '"%d"', '"%9999d"', "true", "nil",
    ".", ".name", ".tags", ".env", ".env.k", ".missing", "$", "$x", "$y", "(list 1 2)",
    "(dict \"a\" 1)", "(until 50)", "(list $x $x)", "(dict \"a\" $x \"b\" $x)",
])  # fmt: skip
functions = st.sampled_from([
    "repeat", "until", "seq", "list", "dict", "uniq", "has", "without", "deepEqual", "join",
    "toJson", "toYaml", "toString", "printf", "print", "indent", "nindent", "replace", "upper",
    "trunc", "substr", "len", "index", "slice", "append", "concat", "keys", "values", "default",
    "b64enc", "b64dec", "regexReplaceAll", "regexFindAll", "splitList", "sortAlpha", "reverse",
    "first", "last", "add", "mul", "div", "mod", "max", "min", "quote", "cat", "trim", "eq",
    "lt", "and", "or", "not", "ternary", "fromJson", "mustFromJson", "dig", "pluck", "pick",
    "omit", "set", "unset", "compact", "chunk", "untilStep", "toDate", "slugify", "fail",
])  # fmt: skip


@st.composite
def pipelines(draw: st.DrawFn, depth: int = 2) -> str:
    name = draw(functions)
    args = [
        draw(pipelines(depth - 1)) if depth and draw(st.integers(0, 3)) == 0 else draw(atoms)
        for _ in range(draw(st.integers(0, 3)))
    ]
    return f"({' '.join([name, *args])})"


@st.composite
def templates(draw: st.DrawFn) -> str:
    parts = ["{{ $x := list 1 }}{{ $y := list 1 }}"]
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.integers(0, 6))
        if kind == 0:
            parts.append(draw(st.text(alphabet="ab \n{}-:", max_size=12)))
        elif kind == 1:
            parts.append(f"{{{{ {draw(pipelines())} }}}}")
        elif kind == 2:
            # A variable that doubles what it holds each time round.
            count = draw(st.integers(0, 40))
            var = draw(st.sampled_from(["$x", "$y"]))
            parts.append(
                f"{{{{ range until {count} }}}}{{{{ {var} = list {var} {var} }}}}{{{{ end }}}}"
            )
        elif kind == 3:
            parts.append(
                f"{{{{ range {draw(atoms)} }}}}{{{{ {draw(pipelines(1))} }}}}{{{{ end }}}}"
            )
        elif kind == 4:
            parts.append(f"{{{{ if {draw(pipelines(1))} }}}}x{{{{ else }}}}y{{{{ end }}}}")
        elif kind == 5:
            parts.append(f"{{{{ $x = {draw(pipelines(1))} }}}}")
        else:
            parts.append(
                draw(st.sampled_from(["{{", "}}", "{{ end }}", '{{ define "t" }}', "{{/*"]))
            )
    return "".join(parts)


def render(text: str) -> tuple[str | None, Budget]:
    budget = Budget(max_steps=MAX_STEPS, max_bytes=MAX_BYTES)
    with bounded(max_calls=MAX_CALLS) as spent:
        try:
            out: str | None = gotemplate.render(text, INPUTS, budget=budget)
            refusal = ""
        except TemplateError as error:
            out, refusal = None, str(error)
    assert out is not None or refusal.startswith("template: "), refusal
    assert spent.peak_bytes < MAX_PEAK, f"{spent.peak_bytes} bytes at the peak"
    return out, budget


@examples(ci=400)
@given(text=templates())
@example(text='{{ repeat 1000000000 "lol" }}')
@example(text="{{ range until 1000000000 }}{{ end }}")
@example(text='{{ printf "%999999999d" 1 }}')
def test_a_template_renders_within_its_budget_or_is_refused(text: str) -> None:
    out, budget = render(text)
    if out is not None:
        assert len(out) <= MAX_BYTES
        assert budget.steps <= MAX_STEPS and budget.bytes <= MAX_BYTES


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("{{ uniq (until 400) | len }}", id="uniq-is-quadratic"),
        pytest.param(
            "{{ $a := list 1 }}{{ $b := list 1 }}{{ range until 30 }}{{ $a = list $a $a }}"
            "{{ $b = list $b $b }}{{ end }}{{ deepEqual $a $b }}",
            id="deepEqual-over-shared-parts",
        ),
        pytest.param(
            "{{ $a := list 1 }}{{ range until 30 }}{{ $a = list $a $a }}{{ end }}"
            "{{ without (list $a (list 1)) $a | len }}",
            id="without-over-shared-parts",
        ),
    ],
)
def test_comparisons_spend_the_step_budget(text: str) -> None:
    # Found while writing this fuzz: uniq of 20,000 numbers took 217 s and deepEqual of two values
    # doubled 24 times 156 s, within a budget of 500,000 steps, spending 5 and 153 of them.
    out, budget = render(text)
    assert out is None
    assert budget.steps > MAX_STEPS
