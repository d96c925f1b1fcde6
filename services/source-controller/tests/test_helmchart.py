"""Pure parts of the HelmChart reconcile: version choice, values merge, the index cache."""

from __future__ import annotations

from typing import Any

import pytest

from sluice_runtime.helming import merge_values
from source_controller.charts import select_version
from source_controller.helmrepository import (
    DEFAULT_INDEX_MAX_SIZE,
    IndexCache,
    InvalidIndex,
    chart_url,
    index_limits,
    parse_index,
)

from .indexes import bitnami_like_index

ENTRIES = [{"version": v} for v in ("1.0.0", "1.2.0", "1.10.0", "2.0.0-rc.1", "2.0.0", "junk")]


@pytest.mark.parametrize(
    ("constraint", "expected"),
    [
        pytest.param("*", "2.0.0", id="any-newest-release"),
        pytest.param("1.x", "1.10.0", id="x-range-numeric-order"),
        pytest.param(">=1.0.0 <1.5.0", "1.2.0", id="bounded"),
        pytest.param("~1.2", "1.2.0", id="tilde"),
        pytest.param("1.0.0", "1.0.0", id="exact"),
        pytest.param("<2.0.0 || >=3", "1.10.0", id="alternatives"),
    ],
)
def test_the_newest_matching_version_is_chosen(constraint: str, expected: str) -> None:
    assert select_version(ENTRIES, constraint)["version"] == expected


def test_no_match_says_which_range() -> None:
    with pytest.raises(LookupError, match=r"no chart version matches '>=3\.0\.0'"):
        select_version(ENTRIES, ">=3.0.0")


@pytest.mark.parametrize(
    ("base", "override", "expected"),
    [
        pytest.param({"a": 1}, {"b": 2}, {"a": 1, "b": 2}, id="disjoint"),
        pytest.param({"a": {"x": 1, "y": 2}}, {"a": {"y": 3}}, {"a": {"x": 1, "y": 3}}, id="deep"),
        pytest.param({"a": [1, 2]}, {"a": [3]}, {"a": [3]}, id="lists-replaced"),
        pytest.param({"a": {"x": 1}}, {"a": None}, {"a": None}, id="null-replaces"),
        pytest.param({"a": 1}, {"a": {"x": 1}}, {"a": {"x": 1}}, id="scalar-to-map"),
    ],
)
def test_values_files_merge_like_helm(
    base: dict[str, Any], override: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert merge_values(base, override) == expected


@pytest.mark.parametrize(
    ("repo", "url", "expected"),
    [
        pytest.param(
            "https://h/charts",
            "podinfo-1.0.0.tgz",
            "https://h/charts/podinfo-1.0.0.tgz",
            id="relative",
        ),
        pytest.param("https://h/charts/", "https://cdn/p.tgz", "https://cdn/p.tgz", id="absolute"),
        pytest.param("https://h/a", "/x/p.tgz", "https://h/x/p.tgz", id="rooted"),
    ],
)
def test_chart_urls_resolve_against_the_repository(repo: str, url: str, expected: str) -> None:
    assert chart_url(repo, url) == expected


LIMITS = index_limits(DEFAULT_INDEX_MAX_SIZE)


def test_the_index_cache_parses_each_digest_once() -> None:
    cache = IndexCache(size=2)
    index = b"apiVersion: v1\nentries:\n  a: []\n"
    for _ in range(1000):
        cache.get("sha256:1", lambda: index, limits=LIMITS)
    assert cache.parses == 1
    cache.get("sha256:2", lambda: index, limits=LIMITS)
    cache.get("sha256:3", lambda: index, limits=LIMITS)
    cache.get("sha256:1", lambda: index, limits=LIMITS)
    assert cache.parses == 4


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"{", id="not-yaml"),
        pytest.param(b"- a\n", id="not-a-map"),
        pytest.param(b"entries: {}\n", id="no-api-version"),
        pytest.param(b"apiVersion: v1\nentries: []\n", id="entries-not-a-map"),
    ],
)
def test_invalid_indexes_are_refused(data: bytes) -> None:
    with pytest.raises(InvalidIndex):
        parse_index(data, limits=LIMITS)


def test_an_index_the_size_of_bitnamis_fits_the_default_limits() -> None:
    index = bitnami_like_index(charts=220, versions=100)
    assert len(index) > 20 << 20
    assert len(parse_index(index, limits=LIMITS)["entries"]["chart7"]) == 100


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        pytest.param(b"apiVersion: v1\nentries: {a: [" + b"0," * 40_000 + b"]}\n",
            r"more than 8333 nodes \(the node limit", id="dense"),
        pytest.param(b"apiVersion: v1\nx: " + b"y" * 110_000 + b"\n",
            "larger than the size limit", id="large"),
    ],
)  # fmt: skip
def test_an_index_over_its_limits_is_refused_naming_the_limit(data: bytes, problem: str) -> None:
    with pytest.raises(InvalidIndex, match=problem):
        parse_index(data, limits=index_limits(100_000))
