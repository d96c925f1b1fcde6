"""Which commit a GitRepository's `ref` names, decided from a listing of remote refs.

Pure functions over the ref listing, so the precedence rules (commit > name >
semver > tag > branch, default branch `master`), the revision strings of
Flux RFC-0005 and semver range matching are unit-tested without a server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import semantic_version

from sluice_api.source import GitRepositoryRef

DEFAULT_BRANCH = "master"
_SEMVER_TAG = re.compile(r"^v?(\d+)(\.\d+)?(\.\d+)?(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
_OPERATOR_SPACE = re.compile(r"(>=|<=|!=|>|<|=|~|\^)\s+")


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


@dataclass(frozen=True)
class VersionRange:
    """A Masterminds-style constraint, as Flux evaluates semver ranges.

    `||` separates alternatives; within one, comparators separated by commas
    or spaces must all hold. Plain comparators (`>=1.0.0-0`) follow
    Masterminds: once the range names a prerelease, prereleases of any
    version may match. Caret, tilde and x-ranges follow npm's rules, which
    agree with Masterminds for releases.
    """

    text: str
    alternatives: tuple[tuple[semantic_version.BaseSpec, ...], ...]
    allows_prerelease: bool

    def match(self, version: semantic_version.Version) -> bool:
        if version.prerelease and not self.allows_prerelease:
            return False
        return any(all(c.match(version) for c in clauses) for clauses in self.alternatives)


_PLAIN = re.compile(r"^(>=|<=|!=|>|<|=|==)?v?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")


def parse_range(text: str) -> VersionRange:
    """Parse `>= 1.0, < 2.0`, `~1.2`, `^1.2.0`, `1.x`, `*`, `a || b`."""
    alternatives = []
    try:
        for alternative in text.split("||"):
            normalized = _OPERATOR_SPACE.sub(r"\1", alternative.strip()).replace(",", " ")
            tokens = normalized.split() or ["*"]
            clauses: list[semantic_version.BaseSpec] = []
            for token in tokens:
                if _PLAIN.match(token):
                    operator = re.match(r"^[<>=!]*", token).group(0)  # type: ignore[union-attr]
                    version = token[len(operator) :].removeprefix("v")
                    clauses.append(semantic_version.SimpleSpec(f"{operator or '=='}{version}"))
                else:
                    clauses.append(semantic_version.NpmSpec(token))
            alternatives.append(tuple(clauses))
    except ValueError as error:
        raise InvalidRef(f"semver range '{text}' is not valid: {error}") from None
    allows_prerelease = bool(re.search(r"\d-[0-9A-Za-z]", text))
    return VersionRange(text, tuple(alternatives), allows_prerelease)


def parse_version(tag: str) -> semantic_version.Version | None:
    """The version a tag names (`v1.2.3`, `1.2`), or None for other tags."""
    if not _SEMVER_TAG.match(tag):
        return None
    try:
        return semantic_version.Version.coerce(tag.removeprefix("v"))
    except ValueError:
        return None


def highest_matching_tag(constraint: str, tags: list[str]) -> str:
    spec = parse_range(constraint)
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
