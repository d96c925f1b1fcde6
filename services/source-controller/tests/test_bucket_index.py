"""Bucket's index and revision: Flux's rules, as pure functions."""

from __future__ import annotations

import pytest

from source_controller.bucketindex import ObjectInfo, build_index, index_revision, safe_key


@pytest.mark.parametrize(
    ("index", "revision"),
    [
        pytest.param(
            {},
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            id="empty-bucket",
        ),
        pytest.param(
            {"a": "x"},
            "sha256:219ba22af22d10cbfa1edd34175a38c921eb48679378abc71fe2c64f25ef68da",
            id="one-object",
        ),
        pytest.param(
            # "B" sorts before "a" bytewise, as Go's sort.Strings orders them.
            {"a/b": "1", "B": "2"},
            "sha256:91a8b05156701a676090df5f0350c356e467278927617ac46f7cf550cfd73c58",
            id="keys-sorted-bytewise",
        ),
    ],
)
def test_revision_is_fluxs_index_digest(index: dict[str, str], revision: str) -> None:
    assert index_revision(index) == revision


def _objects(*keys: str) -> dict[str, ObjectInfo]:
    return {key: ObjectInfo(etag=f"e-{key}", size=1) for key in keys}


@pytest.mark.parametrize(
    ("keys", "spec_ignore", "sourceignore", "indexed"),
    [
        pytest.param(("a.yaml", "dir/"), None, None, ["a.yaml"], id="directory-markers-skipped"),
        pytest.param(
            ("a.yaml", ".sourceignore"), None, "", ["a.yaml"], id="root-sourceignore-not-indexed"
        ),
        pytest.param(
            ("a.yaml", "logo.png", ".github/ci.yml"),
            None,
            None,
            [".github/ci.yml", "a.yaml", "logo.png"],
            id="no-default-exclusions-in-the-index",
        ),
        pytest.param(
            ("a.yaml", "secret.txt", ".sourceignore"),
            None,
            "*.txt\n",
            ["a.yaml"],
            id="sourceignore-applies",
        ),
        pytest.param(
            ("a.yaml", "b.txt", "c.txt"),
            "*.txt\n!c.txt\n",
            None,
            ["a.yaml", "c.txt"],
            id="spec-ignore-applies",
        ),
        pytest.param(
            ("a.yaml", "b.txt", ".sourceignore"),
            "!b.txt\n",
            "*.txt\n",
            ["a.yaml", "b.txt"],
            id="spec-ignore-wins-over-sourceignore",
        ),
    ],
)
def test_index_follows_fluxs_ignore_rules(
    keys: tuple[str, ...], spec_ignore: str | None, sourceignore: str | None, indexed: list[str]
) -> None:
    index = build_index(_objects(*keys), spec_ignore=spec_ignore, sourceignore=sourceignore)
    assert sorted(index) == indexed
    assert all(index[key] == f"e-{key}" for key in index)


@pytest.mark.parametrize(
    ("key", "safe"),
    [
        pytest.param("a/b.yaml", True, id="nested"),
        pytest.param("../etc/passwd", False, id="parent"),
        pytest.param("a/../../b", False, id="parent-inside"),
        pytest.param("/abs", False, id="absolute"),
        pytest.param("a//b", False, id="empty-component"),
        pytest.param("./a", False, id="dot"),
        pytest.param("a\\b", False, id="backslash"),
    ],
)
def test_only_relative_keys_are_safe(key: str, safe: bool) -> None:
    assert safe_key(key) is safe
