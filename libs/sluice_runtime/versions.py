"""Semver ranges as Flux evaluates them, over tags that name versions.

A GitRepository's and an OCIRepository's `ref.semver` pick the highest tag
in a range; `sluice list artifacts --filter-semver` shows the tags in one.
Both must agree on what a range and a version tag are, hence one module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import semantic_version

_SEMVER_TAG = re.compile(r"^v?(\d+)(\.\d+)?(\.\d+)?(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
_OPERATOR_SPACE = re.compile(r"(>=|<=|!=|>|<|=|~|\^)\s+")


class InvalidRange(ValueError):
    """A malformed semver range."""


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
        raise InvalidRange(f"semver range '{text}' is not valid: {error}") from None
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


def matching_tags(constraint: VersionRange, tags: list[str]) -> list[str]:
    """The tags whose version is in the range, in their given order."""
    matched = []
    for tag in tags:
        version = parse_version(tag)
        if version is not None and constraint.match(version):
            matched.append(tag)
    return matched
