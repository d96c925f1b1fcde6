"""Fuzz of tenant YAML (yamlloading.load/load_all): the reader every values file,
index.yaml, Chart.yaml, kubeconfig and rendered template goes through.

Properties, for generated documents, raw YAML-ish text, odd scalars and alias bombs:
- the only exception is a yaml.YAMLError (YamlLimitExceeded for the limits);
- what it accepts equals yaml.safe_load_all of the same text (with libyaml's
  parser, which it uses: libyaml and PyYAML's Python parser differ at the
  edges, a bare `!` is '' in one and None in the other), and it refuses
  nothing safe_load reads but past the limits or where documented (cycles,
  !!set/!!omap/!!pairs);
- what it accepts expands (aliases repeated) to no more nodes and scalar text
  than the limits, and an alias bomb past them is refused;
- the parse allocates a bounded peak and makes a bounded number of calls.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from sluice_envtest.fuzzing import bounded, examples
from sluice_runtime import yamlloading
from sluice_runtime.yamlloading import YamlLimitExceeded, YamlLimits

LIMITS = YamlLimits(max_bytes=16 << 10, max_nodes=2_000)
# Measured on generated inputs: under 0.5 MiB and 40k calls for anything within LIMITS.
MAX_PEAK = 4 << 20
MAX_CALLS = 400_000

# What only safe_load reads, refused here on purpose (yamlloading.py).
DOCUMENTED_REFUSALS = re.compile(r"a cycle|is not supported here|could not determine a constructor")


def expanded(value: Any, *, stop: int) -> tuple[int, int]:
    """Nodes and scalar text of `value` with every shared part counted each time it
    appears (as a serialiser writes it), counting no further than `stop` nodes."""
    nodes = text = 0
    stack = [value]
    while stack and nodes <= stop:
        v = stack.pop()
        nodes += 1
        if isinstance(v, dict):
            for k, item in v.items():
                stack += (k, item)
        elif isinstance(v, list):
            stack += v
        elif isinstance(v, str | bytes):
            text += len(v)
    return nodes, text


def canonical(value: Any) -> Any:
    """A comparable form: NaN equal to itself, dicts without regard to order."""
    if isinstance(value, float) and math.isnan(value):
        return "<nan>"
    if isinstance(value, dict):
        return ("<map>", sorted((repr(canonical(k)), canonical(v)) for k, v in value.items()))
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
    st.dates(), st.datetimes(timezones=st.just(datetime.UTC)), st.binary(max_size=8),
)  # fmt: skip
documents = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=30,
)
dumped = st.builds(
    lambda doc, flow: yaml.safe_dump(doc, default_flow_style=flow, allow_unicode=True),
    documents,
    st.sampled_from([False, True, None]),
)
# Scalars whose implicit or explicit tag makes a constructor run on tenant text.
odd_scalars = st.sampled_from([
    "2020-02-30", "2001-13-01", "2001-12-14t21:59:43.10-05:00", "2002-12-14", "9999-12-31T23:59:60Z",
    "!!int x", "!!int 0o99", "!!int 0x", "!!float x", "!!float .nan", "!!bool x", "!!null x",
    "!!timestamp x", "!!timestamp 2020-02-30", "!!binary x", "!!binary aGk=", "!!str 1", "1e999",
    "-.inf", "0b101", "0o17", "0x_1", "1_000", "190:20:30", "!!int 190:20:30", "!!set {a}",
    "!!omap [a: 1]", "!!pairs [a: 1]", "!!map [a]", "!!seq {a: 1}", "!foo x", "!<tag:x> y", "~", "<<",
])  # fmt: skip
odd_documents = st.lists(
    st.tuples(st.sampled_from(["a", "b", "<<", "? x"]), odd_scalars), min_size=1, max_size=4
).map(lambda pairs: "".join(f"{k}: {v}\n" for k, v in pairs))
yamlish = st.text(alphabet="ab01:-[]{},&*!|>'\"#\n .?%@<~\t\\", max_size=80)


def laughs(depth: int, width: int) -> str:
    """An alias bomb: each level a list of `width` aliases to the level below."""
    lines = ["l0: &l0 lol"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, depth + 1)]
    return "\n".join(lines) + "\n"


def laughs_nodes(depth: int, width: int) -> int:
    """The nodes `laughs` charges: the mapping, and each level's key and value, a
    value counting what its aliases repeat."""
    value, total = 1, 1 + 1 + 1  # the mapping; l0 and its scalar
    for _ in range(depth):
        value = 1 + width * value
        total += 1 + value
    return total


def merges(depth: int) -> str:
    """Nested merge keys, each level merging the one below twice."""
    lines = ["m0: &m0 {a: 1}"]
    lines += [f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}], k{i}: {i}}}" for i in range(1, depth + 1)]
    return "\n".join(lines) + "\n"


@examples(ci=300)
@given(
    text=st.one_of(
        dumped,
        odd_documents,
        yamlish,
        st.builds(laughs, st.integers(1, 6), st.integers(1, 9)),
        st.builds(merges, st.integers(1, 12)),
        st.lists(dumped, min_size=2, max_size=3).map("---\n".join),
    )
)
@example(text="a: 2020-02-30\n")
@example(text="a: !!int x\n")
@example(text="a: !!timestamp x\n")
@example(text="a: &a [*a]\n")
@example(text="[" * 5000 + "]" * 5000)
def test_tenant_yaml_reads_as_safe_load_does_or_is_refused_as_yaml(text: str) -> None:
    with bounded(max_calls=MAX_CALLS) as spent:
        try:
            ours: list[Any] | None = yamlloading.load_all(text, limits=LIMITS)
            refusal = None
        except yaml.YAMLError as error:
            ours, refusal = None, error
    assert spent.peak_bytes < MAX_PEAK, f"{spent.peak_bytes} bytes at the peak"
    try:
        reference: list[Any] | None = list(yaml.load_all(text, Loader=yaml.CSafeLoader))
    except (yaml.YAMLError, ValueError, TypeError, AttributeError, KeyError, RecursionError):
        reference = None  # safe_load's own failures are not ours to match
    if ours is not None:
        nodes, chars = expanded(ours, stop=LIMITS.max_nodes)
        assert nodes <= LIMITS.max_nodes and chars <= LIMITS.max_bytes
        if reference is not None:
            assert canonical(ours) == canonical(reference)
        return
    assert refusal is not None and str(refusal)
    if reference is None or isinstance(refusal, YamlLimitExceeded):
        return
    # safe_load read it: refused here only on purpose.
    assert DOCUMENTED_REFUSALS.search(str(refusal)), f"refused what safe_load reads: {refusal}"


@pytest.mark.parametrize(
    ("depth", "width"),
    [
        pytest.param(3, 9, id="under-the-node-limit"),
        pytest.param(4, 9, id="over-the-node-limit"),
        pytest.param(12, 2, id="deep-and-narrow"),
        pytest.param(30, 2, id="exponential"),
    ],
)
def test_an_alias_bomb_is_refused_exactly_past_the_node_limit(depth: int, width: int) -> None:
    text = laughs(depth, width)
    with bounded(max_calls=MAX_CALLS) as spent:
        try:
            value = yamlloading.load(text, limits=LIMITS)
            refusal = ""
        except YamlLimitExceeded as error:
            value, refusal = None, str(error)
    assert value is not None or "node limit" in refusal
    assert spent.peak_bytes < MAX_PEAK
    assert (value is None) == (laughs_nodes(depth, width) > LIMITS.max_nodes)


@examples(ci=50)
@given(size=st.integers(1, 64 << 10), nodes=st.integers(1, 4000))
def test_the_size_limit_holds_for_any_limits(size: int, nodes: int) -> None:
    limits = YamlLimits(max_bytes=size, max_nodes=nodes)
    text = "k: [" + ", ".join(["ab"] * 2000) + "]\n"
    try:
        value = yamlloading.load(text, limits=limits)
    except YamlLimitExceeded:
        return
    assert len(text) <= size and expanded(value, stop=nodes)[0] <= nodes
