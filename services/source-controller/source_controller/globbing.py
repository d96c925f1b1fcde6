"""The patterns of an ArtifactGenerator's copy operations, matched as Flux matches them.

`from` globs as Go's `fs.Glob` (segment by segment, `**` no more than `*`),
`exclude` and `Extract` patterns as doublestar globs (`**` crosses
directories, `{a,b}` alternatives). Patterns come from tenants: they are
compiled to RE2 (linear time) and the number of alternatives is bounded.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import re2

_GLOB_CHARS = "*?[]"
_MAX_ALTERNATIVES = 20


class CopyError(ValueError):
    """A copy operation that cannot be carried out; the message names it."""


def has_glob(pattern: str) -> bool:
    return any(c in pattern for c in _GLOB_CHARS)


def check_pattern(pattern: str, what: str) -> None:
    depth = commas = 0
    escaped = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth = max(depth - 1, 0)
        elif char == "," and depth:
            commas += 1
    if commas > _MAX_ALTERNATIVES:
        raise CopyError(f"{what} '{pattern}' has more than {_MAX_ALTERNATIVES} alternatives")


def doublestar_regex(pattern: str) -> Any:
    """A compiled RE2 for a doublestar glob (`**` spans directories, `{a,b}`, classes)."""
    out: list[str] = []
    i, n = 0, len(pattern)
    depth = 0
    while i < n:
        char = pattern[i]
        if char == "*":
            if pattern.startswith("**", i):
                at_start = i == 0 or pattern[i - 1] == "/"
                end = i + 2
                if at_start and end < n and pattern[end] == "/":
                    out.append("(?:.*/)?")
                    i = end + 1
                    continue
                if at_start and end == n:
                    out.append(".*")
                    i = end
                    continue
                out.append("[^/]*")
                i = end
                continue
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "\\" and i + 1 < n:
            i += 1
            out.append(re2.escape(pattern[i]))
        elif char == "[":
            close = pattern.find("]", i + 1)
            if close == -1:
                raise CopyError(f"pattern '{pattern}' has an unclosed '['")
            body = pattern[i + 1 : close]
            if body.startswith(("!", "^")):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = close
        elif char == "{":
            depth += 1
            out.append("(?:")
        elif char == "}" and depth:
            depth -= 1
            out.append(")")
        elif char == "," and depth:
            out.append("|")
        else:
            out.append(re2.escape(char))
        i += 1
    if depth:
        raise CopyError(f"pattern '{pattern}' has an unclosed '{{'")
    try:
        return re2.compile("^" + "".join(out) + "$")
    except re2.error as error:
        raise CopyError(f"pattern '{pattern}' is invalid: {error}") from None


def _segment_match(segment: str, name: str) -> bool:
    # Go's path.Match per segment: fnmatch's syntax but for negation.
    return fnmatch.fnmatchcase(name, segment.replace("[^", "[!"))


def go_glob(root: Path, pattern: str) -> list[str]:
    """Go's fs.Glob over `root`: `*` within one segment, `**` like `*`; sorted results."""
    matches = [""]
    for segment in [s for s in pattern.split("/") if s]:
        following: list[str] = []
        for base in matches:
            directory = root / base if base else root
            if not has_glob(segment):
                candidate = f"{base}/{segment}" if base else segment
                if os.path.lexists(root / candidate):
                    following.append(candidate)
                continue
            if directory.is_symlink() or not directory.is_dir():
                continue
            for name in sorted(os.listdir(directory)):
                if _segment_match(segment.replace("**", "*"), name):
                    following.append(f"{base}/{name}" if base else name)
        matches = following
    return [m for m in matches if m]


def doublestar_glob(root: Path, pattern: str) -> list[str]:
    """Every path under `root` (files and directories) the doublestar `pattern` matches."""
    regex = doublestar_regex(pattern)
    found = []
    for directory, dirs, files in os.walk(root):
        rel_dir = Path(directory).relative_to(root).as_posix()
        for name in sorted(dirs) + sorted(files):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if regex.match(rel):
                found.append(rel)
    return sorted(found)


def literal_root(pattern: str) -> str:
    """The part of `pattern` before its first glob segment ('.' when none)."""
    parts = []
    for part in [p for p in pattern.split("/") if p not in ("", ".")]:
        if has_glob(part):
            break
        parts.append(part)
    return "/".join(parts) or "."


@dataclass
class Excluder:
    patterns: tuple[str, ...]
    _compiled: list[tuple[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for pattern in self.patterns:
            check_pattern(pattern, "exclude pattern")
            self._compiled.append((pattern, doublestar_regex(pattern)))

    def excluded(self, path: str, base: str) -> bool:
        if self._match(path):
            return True
        if base in (".", ""):
            return False
        prefix = base.rstrip("/") + "/"
        return path.startswith(prefix) and self._match(path.removeprefix(prefix))

    def _match(self, path: str) -> bool:
        name = posixpath.basename(path)
        for pattern, regex in self._compiled:
            if regex.match(path) or ("/" not in pattern and regex.match(name)):
                return True
        return False


def is_tarball(path: str) -> bool:
    return path.endswith((".tar.gz", ".tgz"))
