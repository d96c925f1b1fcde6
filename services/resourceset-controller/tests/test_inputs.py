"""The rules of input sets, as a table: filters, ids, defaults, limits, combining."""

from __future__ import annotations

from typing import Any

import pytest

from resourceset_controller import inputs
from resourceset_controller.inputs import InputError, NameFilter
from sluice_api.resourceset import InputFilter

TAGS = ["app-b", "latest", "app-a", "app-c", "v1.2.0", "v1.10.0", "v2.0.0-rc.1", "v0.9.0"]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(None, sorted(TAGS, reverse=True), id="no-filter-reverse-alphabetical"),
        pytest.param({"includeTag": "^app-"}, ["app-c", "app-b", "app-a"], id="include"),
        pytest.param(
            {"includeTag": "^app-", "excludeTag": "b$"}, ["app-c", "app-a"], id="include-exclude"
        ),
        pytest.param({"includeTag": "^app-", "limit": 2}, ["app-c", "app-b"], id="limit"),
        pytest.param({"semver": ">=1.0.0"}, ["v1.10.0", "v1.2.0"], id="semver-newest-first"),
        pytest.param(
            {"semver": ">=0.1.0", "excludeTag": "^v1\\.10"}, ["v1.2.0", "v0.9.0"],
            id="semver-and-exclude",
        ),
        pytest.param({"includeTag": "^nothing"}, [], id="nothing-matches"),
    ],
)  # fmt: skip
def test_tag_filters(spec: dict[str, Any] | None, expected: list[str]) -> None:
    filt = InputFilter.model_validate(spec) if spec is not None else None
    assert NameFilter.for_tags(filt).select(TAGS) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param({"includeTag": "(a)\\1"}, "spec.filter.includeTag", id="backreference"),
        pytest.param({"excludeTag": "(?=x)"}, "spec.filter.excludeTag", id="lookahead"),
        pytest.param({"semver": "not a range"}, "spec.filter.semver", id="bad-semver"),
    ],
)
def test_bad_filters_are_refused_naming_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        NameFilter.for_tags(InputFilter.model_validate(spec))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("app-microservice1", "1018562219", id="tag"),
        pytest.param("main", "68878758", id="branch"),
    ],
)
def test_ids_are_flux_operators_adler32(text: str, expected: str) -> None:
    assert inputs.input_id(text) == expected


@pytest.mark.parametrize(
    ("sets", "limit", "message"),
    [
        pytest.param([{"id": "1"}, {"id": "2"}], None, None, id="unique"),
        pytest.param([{"id": "1"}, {"id": "1"}], None, "input id '1' is exported more than once",
                     id="duplicate"),
        pytest.param([{"id": 1}, {"id": "1"}], None, "input id '1' is exported more than once",
                     id="duplicate-number-and-string"),
        pytest.param([{"tag": "x"}], None, "input set #0 has no 'id'", id="no-id"),
        pytest.param([{"id": "1"}, {"id": "2"}, {"id": "3"}], 2,
                     "3 input sets exceed the limit of 2", id="over-limit"),
    ],
)  # fmt: skip
def test_check(sets: list[dict[str, Any]], limit: int | None, message: str | None) -> None:
    if message is None:
        inputs.check(sets, limit=limit)
    else:
        with pytest.raises(InputError, match=message):
            inputs.check(sets, limit=limit)


def test_defaults_fill_only_missing_keys() -> None:
    got = inputs.with_defaults([{"id": "1", "env": "prod"}, {"id": "2"}], {"env": "dev", "x": 1})
    assert got == [{"env": "prod", "x": 1, "id": "1"}, {"env": "dev", "x": 1, "id": "2"}]


def test_revision_ignores_key_order_and_sees_values() -> None:
    a = inputs.revision([{"id": "1", "tag": "t"}])
    assert a == inputs.revision([{"tag": "t", "id": "1"}])
    assert a != inputs.revision([{"id": "1", "tag": "u"}])
    assert a.startswith("sha256:") and len(a) == len("sha256:") + 64


def test_flatten_keeps_every_set_in_order() -> None:
    got = inputs.flatten([("a", [{"id": "1"}]), ("b", [{"id": "2"}, {"id": "3"}])])
    assert got == [{"id": "1"}, {"id": "2"}, {"id": "3"}]


def test_permute_is_the_cartesian_product_keyed_by_provider() -> None:
    got = inputs.permute([("tenants-list", [{"id": "t1"}, {"id": "t2"}]), ("envs", [{"id": "e1"}])])
    assert got == [
        {"id": inputs.input_id("t1-e1"), "tenants_list": {"id": "t1"}, "envs": {"id": "e1"}},
        {"id": inputs.input_id("t2-e1"), "tenants_list": {"id": "t2"}, "envs": {"id": "e1"}},
    ]


@pytest.mark.parametrize(
    ("sizes", "refused"),
    [
        pytest.param((100, 100), False, id="exactly-10000"),
        pytest.param((100, 101), True, id="10100"),
        pytest.param((10, 10, 10, 11), True, id="four-sources-11000"),
    ],
)
def test_permute_is_capped_at_10000(sizes: tuple[int, ...], refused: bool) -> None:
    sources = [(f"p{n}", [{"id": f"{n}-{i}"} for i in range(size)]) for n, size in enumerate(sizes)]
    if refused:
        with pytest.raises(InputError, match="exceeds the limit of 10000 input sets"):
            inputs.permute(sources)
    else:
        assert len(inputs.permute(sources)) == 10_000


PR_OLD = {"id": "4", "sha": "old", "branch": "feat", "title": "t", "labels": ["preview"]}


@pytest.mark.parametrize(
    ("labels", "skip", "previous", "expected_sha"),
    [
        pytest.param(["preview"], [], [PR_OLD], "new", id="no-skip"),
        pytest.param(["preview", "pause"], ["pause"], [PR_OLD], "old", id="skip-label-keeps-old"),
        pytest.param(["preview"], ["pause"], [PR_OLD], "new", id="skip-label-absent"),
        pytest.param(["preview"], ["!ci/passed"], [PR_OLD], "old", id="negated-absent-keeps-old"),
        pytest.param(["ci/passed"], ["!ci/passed"], [PR_OLD], "new", id="negated-present"),
        pytest.param(["pause"], ["pause"], [], None, id="new-and-skipped-left-out"),
        pytest.param(["pause"], ["pause"], None, None, id="nothing-exported-before"),
    ],
)
def test_skip_labels(
    labels: list[str], skip: list[str], previous: list[dict[str, Any]] | None,
    expected_sha: str | None,
) -> None:  # fmt: skip
    found = [{"id": "4", "sha": "new", "branch": "feat", "title": "t", "labels": labels}]
    kept = inputs.restore_skipped(found, previous, skip)
    assert [i["sha"] for i in kept] == ([expected_sha] if expected_sha else [])
