"""A template spends a bounded budget: steps, and bytes of what it writes and builds."""

from __future__ import annotations

import tracemalloc

import pytest

from sluice_runtime import gotemplate
from sluice_runtime.gotemplate import Budget

STEPS = "the step budget"
SIZE = "the size budget"


@pytest.mark.parametrize(
    ("template", "budget"),
    [
        pytest.param('{{ repeat 1000000000 "lol" }}', SIZE, id="repeat"),
        pytest.param("{{ until 1000000000 }}", SIZE, id="until"),
        pytest.param("{{ untilStep 0 1000000000 1 }}", SIZE, id="untilStep"),
        pytest.param("{{ seq 1000000000 }}", SIZE, id="seq"),
        pytest.param('{{ printf "%999999999d" 1 }}', SIZE, id="printf-width"),
        pytest.param('{{ indent 1000000000 "x" }}', SIZE, id="indent"),
        pytest.param('{{ $s := repeat 10000 "x" }}{{ replace "" $s $s }}', SIZE, id="replace"),
        pytest.param(
            '{{ $s := "ab" }}{{ range until 64 }}{{ $s = cat $s $s }}{{ end }}',
            r"the (size|step) budget",
            id="doubling",
        ),
        pytest.param(
            # Ten levels of a list holding the level below ten times: 10^10 once written out.
            '{{ $l := list "lol" }}{{ range until 10 }}'
            "{{ $l = list $l $l $l $l $l $l $l $l $l $l }}{{ end }}{{ toJson $l }}",
            SIZE,
            id="shared-lists-to-json",
        ),
        pytest.param(
            '{{ $l := list "lol" }}{{ range until 10 }}'
            "{{ $l = list $l $l $l $l $l $l $l $l $l $l }}{{ end }}{{ $l }}",
            SIZE,
            id="shared-lists-printed",
        ),
        pytest.param(
            '{{ $l := list "lol" }}{{ range until 10 }}'
            '{{ $l = list $l $l $l $l $l $l $l $l $l $l }}{{ end }}{{ join "," $l }}',
            SIZE,
            id="shared-lists-joined",
        ),
        pytest.param("{{ range 1000000000 }}{{ end }}", STEPS, id="range-over-an-int"),
        pytest.param(
            "{{ range 100000 }}{{ range 100000 }}{{ end }}{{ end }}",
            STEPS,
            id="nested-ranges",
        ),
        pytest.param("{{ range 100000000 }}x{{ end }}", STEPS, id="output"),
    ],
)
def test_a_template_stops_at_its_budget_in_bounded_memory(template: str, budget: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(gotemplate.ExecError, match=budget) as raised:
            gotemplate.render(template, {}, name="t", budget=Budget(max_steps=200_000))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The error says where the template was (Go's prefix) and which budget ran out.
    assert str(raised.value).startswith("template: t:1:")
    assert peak < 64 << 20


def test_written_output_counts_against_the_size_budget() -> None:
    with pytest.raises(gotemplate.ExecError, match="more than 1000 bytes"):
        gotemplate.render("{{ range 2000 }}x{{ end }}", {}, budget=Budget(max_bytes=1000))
    assert gotemplate.render("{{ range 900 }}x{{ end }}", {}, budget=Budget(max_bytes=1000))


def test_one_budget_bounds_many_renders_together() -> None:
    budget = Budget(max_steps=1000)
    # Each render takes about a hundred steps: nine fit, the next ones run out.
    for _ in range(9):
        gotemplate.render("{{ range 50 }}{{ end }}", {}, budget=budget)
    with pytest.raises(gotemplate.ExecError, match=STEPS):
        gotemplate.render("{{ range 500 }}{{ end }}", {}, budget=budget)


def test_ordinary_templates_fit_the_default_budget() -> None:
    inputs = {"items": [{"name": f"app{i}", "replicas": i} for i in range(500)]}
    template = (
        "{{ range .items }}---\nname: {{ .name | quote }}\nreplicas: {{ .replicas }}\n"
        '{{ toYaml (dict "labels" (dict "app" .name)) | nindent 2 }}{{ end }}'
    )
    assert gotemplate.render(template, inputs).count("---") == 500


def test_a_call_pays_for_the_arguments_it_reads() -> None:
    """A function's own work grows with its arguments (`regexMatch` over a 4 kB literal
    ran 5 s on 500,000 steps when a call cost one step, whatever it read)."""
    calls: list[int] = []

    def counted(s: str) -> bool:
        calls.append(len(s))
        return True

    literal = "ab" * 2000
    with pytest.raises(gotemplate.TemplateError, match=r"ran more than 500000 steps"):
        gotemplate.render(
            f'<< range 1000000000 >><< counted "{literal}" >><< end >>',
            {},
            delims=("<<", ">>"),
            funcs={"counted": counted},
            budget=Budget(),
        )
    # 4000 bytes read cost 62 steps more than the call: the budget stops it 65x sooner.
    assert 7000 < len(calls) < 8000, len(calls)
