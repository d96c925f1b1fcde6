"""Tenant YAML: read as yaml.safe_load reads it, with its expansion and size bounded."""

from __future__ import annotations

import asyncio
import threading
import tracemalloc
from typing import Any

import pytest
import yaml

from sluice_runtime import yamlloading
from sluice_runtime.yamlloading import YamlLimitExceeded, YamlLimits

ROOMY = YamlLimits(max_bytes=1 << 20, max_nodes=100_000)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("---\n", id="empty-document"),
        pytest.param("a: 1\nb: [x, 'y', \"z\"]\n", id="plain"),
        pytest.param(
            "a: yes\nb: 0x1f\nc: 1.5e3\nd: ~\ne: 2024-01-01\nf: 010\n", id="implicit-types"
        ),
        pytest.param(
            "a: !!str 3\nb: !!int '7'\nc: !!binary aGVsbG8=\nd: !!float 1\n", id="scalar-tags"
        ),
        pytest.param("base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\n", id="merge-key"),
        pytest.param(
            "a: &a {x: 1}\nb: &b {x: 2, y: 2}\nc:\n  z: 0\n  <<: [*a, *b]\n", id="merge-list"
        ),
        pytest.param("x: &s hello\ny: [*s, *s]\n", id="scalar-alias"),
        pytest.param("'<<': literal\n", id="quoted-merge-is-a-string"),
        pytest.param("? [a, b]\n: c\n", id="unhashable-key"),
        pytest.param("a: *nope\n", id="undefined-alias"),
        pytest.param("a: !custom x\n", id="unknown-tag"),
        pytest.param("a: <<\n", id="merge-as-value"),
        pytest.param("<<: 1\n", id="merge-of-a-scalar"),
        pytest.param("a: [1, 2\n", id="syntax-error"),
        pytest.param("a: 1\n---\nb: 2\n", id="two-documents"),
        pytest.param("a: 1\na: 2\n", id="duplicate-key-keeps-last"),
        pytest.param("s: |\n  line\n  two\nf: >\n  folded\n  text\n", id="block-scalars"),
    ],
)
def test_load_reads_what_safe_load_reads(text: str) -> None:
    try:
        expected: Any = ("ok", yaml.safe_load(text))
    except yaml.YAMLError:
        expected = ("error", yaml.YAMLError)
    try:
        got: Any = ("ok", yamlloading.load(text, limits=ROOMY))
    except yaml.YAMLError:
        got = ("error", yaml.YAMLError)
    assert got == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("a: !!set {x}\n", id="set"),
        pytest.param("a: !!omap [x: 1]\n", id="omap"),
        pytest.param("a: !thing {x: 1}\n", id="application-tag"),
    ],
)
def test_collection_tags_kubernetes_does_not_read_are_refused(text: str) -> None:
    with pytest.raises(yaml.YAMLError, match="is not supported here"):
        yamlloading.load(text, limits=ROOMY)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("a: 2020-02-30\n", id="a-date-that-does-not-exist"),
        pytest.param("created: 2016-13-06T16:23:20Z\n", id="a-timestamp-that-does-not-exist"),
        pytest.param("a: !!int x\n", id="int-tag-on-text"),
        pytest.param("a: !!float x\n", id="float-tag-on-text"),
        pytest.param("a: !!bool x\n", id="bool-tag-on-text"),
        pytest.param("a: !!timestamp x\n", id="timestamp-tag-on-text"),
        pytest.param("a: !!int 0o99\n", id="octal-digits-out-of-range"),
    ],
)
def test_a_scalar_its_constructor_cannot_build_is_a_yaml_error(text: str) -> None:
    # Found by the fuzz (test_fuzz_yaml.py): ValueError, AttributeError or KeyError
    # escaped, and every caller catches YAMLError only.
    with pytest.raises(yaml.YAMLError, match=r"is not valid\n  in .*, line 1, column"):
        yamlloading.load(text, limits=yamlloading.VALUES_LIMITS)


def test_load_all_reads_what_safe_load_all_reads() -> None:
    text = "a: &x 1\n---\n---\nb: [2, 3]\n...\n---\nc: d\n"
    assert yamlloading.load_all(text, limits=ROOMY) == list(yaml.safe_load_all(text))


def test_anchors_do_not_outlive_their_document() -> None:
    with pytest.raises(yaml.YAMLError, match="undefined alias"):
        yamlloading.load_all("a: &x 1\n---\nb: *x\n", limits=ROOMY)


def test_a_cycle_is_refused() -> None:
    with pytest.raises(yaml.YAMLError, match=r"alias \*a is inside the node it names"):
        yamlloading.load("a: &a [1, *a]\n", limits=ROOMY)


def laughs(levels: int, width: int = 10) -> str:
    """The billion-laughs document: each level an anchor repeating the one below `width` times."""
    lines = ["l0: &l0 lol"]
    for level in range(1, levels + 1):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_alias_expansion_is_refused_at_the_node_budget_in_bounded_memory() -> None:
    # The 256-byte values ConfigMap of issue 32: 9 levels, 10^9 strings once expanded.
    bomb = laughs(9)
    assert len(bomb) < 600
    tracemalloc.start()
    try:
        with pytest.raises(YamlLimitExceeded, match="more than 500000 nodes") as raised:
            yamlloading.load(bomb, limits=yamlloading.VALUES_LIMITS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "node limit" in str(raised.value)
    # What was built is the document itself: each level shares the one below.
    assert peak < 1 << 20


def test_repeated_text_counts_against_the_size_limit() -> None:
    big = "x" * 1000
    text = f"a: &a {big}\nb: [" + ", ".join(["*a"] * 200) + "]\n"
    with pytest.raises(YamlLimitExceeded, match="more than 100000 bytes of text"):
        yamlloading.load(text, limits=YamlLimits(max_bytes=100_000, max_nodes=100_000))
    # Within the limits, aliases are welcome: values files use anchors and merge keys.
    assert len(yamlloading.load(text, limits=ROOMY)["b"]) == 200


def test_an_input_over_the_size_limit_is_refused_before_parsing() -> None:
    with pytest.raises(YamlLimitExceeded, match="YAML of 11 bytes is larger than the size limit"):
        yamlloading.load("a: 12345678", limits=YamlLimits(max_bytes=10, max_nodes=10))


def test_dense_documents_stop_at_the_node_limit() -> None:
    text = "[" + ",".join(["0"] * 2000) + "]"
    with pytest.raises(YamlLimitExceeded, match="more than 1000 nodes"):
        yamlloading.load(text, limits=YamlLimits(max_bytes=1 << 20, max_nodes=1000))


def test_the_installed_pyyaml_has_libyaml() -> None:
    # The wheels on PyPI carry libyaml; without it tenant YAML parses several times slower.
    assert yamlloading.LIBYAML and yaml.__with_libyaml__


async def test_parsing_off_the_loop_lets_the_loop_run_meanwhile() -> None:
    # Judged by order, not by a clock: ticks of the loop happen while the parse is running.
    text = "items:\n" + "".join(
        f"- {{name: item{i}, value: {i}, tags: [a, b, c]}}\n" for i in range(10_000)
    )
    limits = YamlLimits(max_bytes=8 << 20, max_nodes=1_000_000)
    parsing = asyncio.ensure_future(yamlloading.load_off_loop(text, limits=limits))
    ticks_while_parsing = 0
    while not parsing.done():
        await asyncio.sleep(0)
        ticks_while_parsing += 1
    assert len((await parsing)["items"]) == 10_000
    assert ticks_while_parsing > 10
    assert threading.current_thread() is threading.main_thread()
