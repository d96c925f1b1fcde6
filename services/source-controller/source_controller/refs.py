"""Which commit a GitRepository's `ref` names, decided from a listing of remote refs.

Pure functions over the ref listing, so the precedence rules (commit > name >
semver > tag > branch, default branch `master`), the revision strings of
Flux RFC-0005 and semver range matching are unit-tested without a server.
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice_api.source import GitRepositoryRef
from sluice_runtime.versions import InvalidRange, parse_range, parse_version

DEFAULT_BRANCH = "master"


class RefNotFound(Exception):
    """The ref does not exist on the remote (or no tag matches the range)."""


class InvalidRef(Exception):
    """The ref cannot be valid on any remote (a malformed semver range)."""


@dataclass(frozen=True)
class ResolvedRef:
    commit: str
    """The full hex SHA-1 the ref points at; empty when only the fetch can tell."""
    revision: str
    """Flux's revision string, e.g. `main@sha1:<hex>`."""
    refspec: str | None
    """What to fetch to get the commit; None means every branch."""
    depth: int
    """1 for a shallow fetch; 0 when the commit may be anywhere in the history."""


def resolve(ref: GitRepositoryRef | None, refs: dict[str, str]) -> ResolvedRef:
    """Resolve `ref` against the remote's refs (`refs/...` → commit SHA, tags peeled)."""
    ref = ref or GitRepositoryRef()
    if ref.commit:
        commit = ref.commit.lower()
        if ref.branch:
            if f"refs/heads/{ref.branch}" not in refs:
                raise RefNotFound(f"branch '{ref.branch}' not found")
            return ResolvedRef(
                commit=commit,
                revision=f"{ref.branch}@sha1:{commit}",
                refspec=f"+refs/heads/{ref.branch}:refs/remotes/origin/{ref.branch}",
                depth=0,
            )
        return ResolvedRef(commit=commit, revision=f"sha1:{commit}", refspec=None, depth=0)
    if ref.name:
        if ref.name not in refs:
            raise RefNotFound(f"ref '{ref.name}' not found")
        commit = refs[ref.name]
        return ResolvedRef(
            commit=commit,
            revision=f"{ref.name}@sha1:{commit}",
            refspec=f"+{ref.name}:refs/sluice/target",
            depth=1,
        )
    if ref.semver:
        tag = highest_matching_tag(ref.semver, tags_of(refs))
        commit = refs[f"refs/tags/{tag}"]
        return ResolvedRef(
            commit=commit,
            revision=f"{tag}@sha1:{commit}",
            refspec=f"+refs/tags/{tag}:refs/tags/{tag}",
            depth=1,
        )
    if ref.tag:
        name = f"refs/tags/{ref.tag}"
        if name not in refs:
            raise RefNotFound(f"tag '{ref.tag}' not found")
        return ResolvedRef(
            commit=refs[name],
            revision=f"{ref.tag}@sha1:{refs[name]}",
            refspec=f"+{name}:{name}",
            depth=1,
        )
    branch = ref.branch or DEFAULT_BRANCH
    name = f"refs/heads/{branch}"
    if name not in refs:
        raise RefNotFound(f"branch '{branch}' not found")
    return ResolvedRef(
        commit=refs[name],
        revision=f"{branch}@sha1:{refs[name]}",
        refspec=f"+{name}:refs/remotes/origin/{branch}",
        depth=1,
    )


def tags_of(refs: dict[str, str]) -> list[str]:
    return [name.removeprefix("refs/tags/") for name in refs if name.startswith("refs/tags/")]


def highest_matching_tag(constraint: str, tags: list[str]) -> str:
    try:
        spec = parse_range(constraint)
    except InvalidRange as error:
        raise InvalidRef(str(error)) from None
    candidates = []
    for tag in tags:
        version = parse_version(tag)
        if version is not None and spec.match(version):
            candidates.append((version, tag))
    if not candidates:
        raise RefNotFound(f"no tag matches semver range '{constraint}'")
    # Equal versions spelled differently (v1.0.0 and 1.0.0): prefer the
    # lexically greatest tag so the choice is stable.
    return max(candidates, key=lambda item: (item[0], item[1]))[1]
