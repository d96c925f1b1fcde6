"""Ref resolution: Flux's precedence, revision strings and semver ranges."""

from __future__ import annotations

import pytest

from sluice_api.source import GitRepositoryRef
from source_controller.refs import InvalidRef, RefNotFound, highest_matching_tag, resolve

A, B, C, D = "a" * 40, "b" * 40, "c" * 40, "d" * 40
REFS = {
    "HEAD": A,
    "refs/heads/master": A,
    "refs/heads/main": B,
    "refs/tags/v1.0.0": C,
    "refs/tags/v1.2.0": D,
    "refs/tags/not-a-version": A,
    "refs/pull/7/head": B,
}


@pytest.mark.parametrize(
    ("ref", "revision", "refspec", "depth"),
    [
        pytest.param(None, f"master@sha1:{A}", "+refs/heads/master:refs/remotes/origin/master", 1, id="default-master"),
        pytest.param(GitRepositoryRef(branch="main"), f"main@sha1:{B}", "+refs/heads/main:refs/remotes/origin/main", 1, id="branch"),
        pytest.param(GitRepositoryRef(branch="main", tag="v1.0.0"), f"v1.0.0@sha1:{C}", "+refs/tags/v1.0.0:refs/tags/v1.0.0", 1, id="tag-beats-branch"),
        pytest.param(GitRepositoryRef(tag="v1.0.0", semver=">=1.0.0"), f"v1.2.0@sha1:{D}", "+refs/tags/v1.2.0:refs/tags/v1.2.0", 1, id="semver-beats-tag"),
        pytest.param(GitRepositoryRef(semver="~1.2", name="refs/pull/7/head"), f"refs/pull/7/head@sha1:{B}", "+refs/pull/7/head:refs/sluice/target", 1, id="name-beats-semver"),
        pytest.param(GitRepositoryRef(name="refs/heads/main", commit=C), f"sha1:{C}", None, 0, id="commit-beats-all"),
        pytest.param(GitRepositoryRef(branch="main", commit=C.upper()), f"main@sha1:{C}", "+refs/heads/main:refs/remotes/origin/main", 0, id="commit-with-branch"),
    ],
)  # fmt: skip
def test_precedence_and_revision(
    ref: GitRepositoryRef | None, revision: str, refspec: str | None, depth: int
) -> None:
    resolved = resolve(ref, REFS)
    assert (resolved.revision, resolved.refspec, resolved.depth) == (revision, refspec, depth)


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        pytest.param(GitRepositoryRef(branch="nope"), "branch 'nope' not found", id="branch"),
        pytest.param(GitRepositoryRef(tag="v9"), "tag 'v9' not found", id="tag"),
        pytest.param(
            GitRepositoryRef(name="refs/heads/x"), "ref 'refs/heads/x' not found", id="name"
        ),
        pytest.param(
            GitRepositoryRef(semver=">=2.0.0"), "no tag matches semver range '>=2.0.0'", id="semver"
        ),
        pytest.param(
            GitRepositoryRef(branch="gone", commit=A), "branch 'gone' not found", id="commit-branch"
        ),
    ],
)
def test_missing_refs_say_what_is_missing(ref: GitRepositoryRef, message: str) -> None:
    with pytest.raises(RefNotFound, match=message):
        resolve(ref, REFS)


@pytest.mark.parametrize(
    ("constraint", "tags", "expected"),
    [
        pytest.param(">=1.0.0 <2.0.0", ["v1.0.0", "v1.9.3", "v2.0.0"], "v1.9.3", id="space-and"),
        pytest.param(">= 1.0, < 2.0", ["1.0.0", "1.5.0", "2.1.0"], "1.5.0", id="masterminds-comma"),
        pytest.param("~1.2", ["v1.2.0", "v1.2.9", "v1.3.0"], "v1.2.9", id="tilde"),
        pytest.param("^1.2.0", ["v1.2.0", "v1.9.0", "v2.0.0"], "v1.9.0", id="caret"),
        pytest.param("1.x", ["v1.0.0", "v1.4.2", "v2.0.0"], "v1.4.2", id="x-range"),
        pytest.param("*", ["v0.1.0", "v3.0.0", "latest"], "v3.0.0", id="any-ignores-non-versions"),
        pytest.param(">=1.0.0", ["v1.0.0", "v1.1.0-rc.1"], "v1.0.0", id="prerelease-excluded"),
        pytest.param(
            ">=1.1.0-0", ["v1.0.0", "v1.1.0-rc.1"], "v1.1.0-rc.1", id="prerelease-asked-for"
        ),
        pytest.param("<1.0.0 || >=3.0.0", ["v0.9.0", "v2.0.0"], "v0.9.0", id="or"),
        pytest.param("1.2", ["v1.2", "v1.3"], "v1.2", id="short-versions"),
        pytest.param(
            ">=1.0.0-0",
            ["v1.0.0", "v1.4.0-prod"],
            "v1.4.0-prod",
            id="masterminds-prerelease-any-version",
        ),
        pytest.param(
            ">= 6.1.0-0, < 7.0.0",
            ["6.2.0-rc.1", "6.0.0", "7.0.0"],
            "6.2.0-rc.1",
            id="prerelease-bounded",
        ),
    ],
)
def test_highest_matching_tag(constraint: str, tags: list[str], expected: str) -> None:
    assert highest_matching_tag(constraint, tags) == expected


def test_a_malformed_range_is_invalid_not_missing() -> None:
    with pytest.raises(InvalidRef, match="not valid"):
        highest_matching_tag(">>>1", ["v1.0.0"])
