"""Which files of a source tree go into its artifact.

Flux's rules, in rising priority:

1. Flux's default exclusions (media, archives, CI configs), only when the
   object has no `spec.ignore`: setting it replaces them.
2. Every `.sourceignore` file in the tree, scoped to the directory holding
   it; a deeper file outranks a shallower one, as nested `.gitignore`s do.
3. `spec.ignore`, last, so a `!pattern` there re-includes anything above.

The VCS exclusions (`.git/` and git's own dotfiles) apply whatever the
rules say; unlike Flux, a `!.git/` in `spec.ignore` cannot re-include the
repository's object database into an artifact served to the cluster.

Matching follows gitignore: the last matching pattern of the highest-
priority source that matches decides, and nothing under an ignored
directory can be re-included. Lines git would reject (a lone `!`) are
skipped in `.sourceignore` files, as git does; in `spec.ignore` they raise
`InvalidIgnorePattern`, since the object's author can fix them.

Patterns come from tenants (the object and every file of the repository),
and pathspec turns each into a regular expression: `a*a*a*a*a*b` becomes
one that takes polynomial time on a backtracking engine for each path it
is asked about. pathspec's RE2 backend matches every pattern in one linear
pass instead; it is asked for by name, so a missing `re2` module fails
loudly rather than falling back to Python's `re`.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import re2
from pathspec import GitIgnoreSpec

IGNORE_FILE = ".sourceignore"

_BACKEND = "re2"

VCS_PATTERNS = (".git/", ".gitignore", ".gitmodules", ".gitattributes")

MEDIA_PATTERNS = ("*.jpg", "*.jpeg", "*.gif", "*.png", "*.wmv", "*.flv", "*.tar.gz", "*.zip")
"""Flux's `ExcludeExt`: media and archives. Alone (with the VCS patterns), it is
what `flux push|diff artifact` leave out when not given `--ignore-paths`."""

DEFAULT_PATTERNS = (
    *MEDIA_PATTERNS,
    # CI configuration
    ".github/", ".circleci/", ".travis.yml", ".gitlab-ci.yml", "appveyor.yml", ".drone.yml",
    "cloudbuild.yaml", "codeship-services.yml", "codeship-steps.yml",
    # tool configuration that is not meant for the cluster
    "**/.goreleaser.yml", "**/.sops.yaml", "**/.flux.yaml",
)  # fmt: skip


class InvalidIgnorePattern(ValueError):
    """Ignore rules that cannot be used; the message names where they come from."""

    def __init__(self, line: str, reason: str, *, source: str = "spec.ignore") -> None:
        super().__init__(f"invalid ignore pattern {line!r} in {source}: {reason}")
        self.line = line
        self.reason = reason
        self.source = source


@dataclass(frozen=True)
class _Scope:
    """Patterns from one source; they see paths relative to `prefix`."""

    prefix: str  # "" for the root, else "sub/dir/"
    spec: GitIgnoreSpec

    def verdict(self, candidate: str) -> bool | None:
        """True: ignore; False: re-included by a negation; None: no opinion."""
        if not candidate.startswith(self.prefix):
            return None
        return self.spec.check_file(candidate[len(self.prefix) :]).include


class IgnoreRules:
    """The effective rules for one tree; `ignored()` answers for any path in it."""

    def __init__(self, *, spec_ignore: str | None) -> None:
        self._vcs = _vcs_spec()
        self._spec = None if spec_ignore is None else _scope("", spec_ignore, source="spec.ignore")
        self._defaults = (
            _scope("", DEFAULT_PATTERNS, source="the default exclusions")
            if spec_ignore is None
            else None
        )
        self._sourceignores: list[_Scope] = []
        self._scopes = self._ordered()
        self._dirs: dict[str, bool] = {}

    @classmethod
    def load(cls, root: Path, *, spec_ignore: str | None) -> IgnoreRules:
        """Read every `.sourceignore` under `root` and combine them with `spec_ignore`.

        Directories already ignored are not searched: nothing inside them can
        be included, so their `.sourceignore` files cannot matter. Symlinked
        directories are not followed, as they are not when archiving.
        """
        rules = cls(spec_ignore=spec_ignore)

        def visit(directory: Path, prefix: str) -> None:
            text = _read_ignore_file(directory / IGNORE_FILE)
            if text is not None:
                rules.add_sourceignore(prefix, text)
            with os.scandir(directory) as entries:
                children = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
            for child in children:
                if not rules.ignored(prefix + child, is_dir=True):
                    visit(directory / child, f"{prefix}{child}/")

        visit(root, "")
        return rules

    def add_sourceignore(self, directory: str, text: str) -> None:
        """Add the rules of the `.sourceignore` in `directory` (relative POSIX
        path, "" for the root); they apply to paths below it only."""
        directory = directory.strip("/")
        prefix = f"{directory}/" if directory else ""
        source = prefix + IGNORE_FILE
        self._sourceignores.append(_scope(prefix, text.splitlines(), source=source, strict=False))
        self._scopes = self._ordered()
        self._dirs.clear()

    def _ordered(self) -> list[_Scope]:
        # Highest priority first. Deeper `.sourceignore` files outrank
        # shallower ones; only files on one path's ancestor chain ever apply
        # to it, so depth alone orders them.
        nested = sorted(self._sourceignores, key=lambda s: s.prefix.count("/"), reverse=True)
        return [
            *([self._spec] if self._spec else []),
            *nested,
            *([self._defaults] if self._defaults else []),
        ]

    def ignored(self, rel_posix_path: str, *, is_dir: bool) -> bool:
        """Whether the path (relative to the tree's root, '/'-separated) is left out."""
        parts = [p for p in rel_posix_path.split("/") if p not in ("", ".")]
        if not parts:
            return False  # the root itself
        for depth in range(1, len(parts)):
            if self._dir_ignored("/".join(parts[:depth])):
                return True
        path = "/".join(parts)
        return self._dir_ignored(path) if is_dir else self._matches(path)

    def _dir_ignored(self, path: str) -> bool:
        # Every file below a directory asks about it again; remember.
        verdict = self._dirs.get(path)
        if verdict is None:
            verdict = self._dirs[path] = self._matches(path + "/")
        return verdict

    def _matches(self, candidate: str) -> bool:
        if self._vcs.check_file(candidate).include:
            return True
        for scope in self._scopes:
            verdict = scope.verdict(candidate)
            if verdict is not None:
                return verdict
        return False


@functools.cache
def _vcs_spec() -> GitIgnoreSpec:
    return GitIgnoreSpec.from_lines(VCS_PATTERNS, backend=_BACKEND)


_CACHED_TEXT = 4096
"""Rule sets up to this many characters are compiled once per process: every
artifact of a source built again compiles the same few patterns (the default
exclusions, its `spec.ignore`), and RE2 compiles took a tenth of the
source-controller's CPU at 1000 OCIRepositories (e2e.bench source-cost).
Larger sets (a tenant's long `.sourceignore`) are compiled each time, so the
cache's memory stays small whatever tenants write."""


def _scope(prefix: str, lines: str | Iterable[str], *, source: str, strict: bool = True) -> _Scope:
    if isinstance(lines, str):
        lines = lines.splitlines()
    lines = tuple(lines)
    if sum(len(line) + 1 for line in lines) > _CACHED_TEXT:
        return _compile_scope(prefix, lines, source=source, strict=strict)
    return _cached_scope(prefix, lines, source=source, strict=strict)


@functools.lru_cache(maxsize=256)
def _cached_scope(prefix: str, lines: tuple[str, ...], *, source: str, strict: bool) -> _Scope:
    # A refusal raises, and lru_cache keeps no exception: it is found again each time.
    return _compile_scope(prefix, lines, source=source, strict=strict)


def _compile_scope(prefix: str, lines: tuple[str, ...], *, source: str, strict: bool) -> _Scope:
    valid: list[str] = []
    for line in lines:
        try:
            GitIgnoreSpec.from_lines([line], backend=_BACKEND)
        except _PATTERN_ERRORS as error:
            if strict:
                raise InvalidIgnorePattern(line, _reason(error), source=source) from None
            continue
        valid.append(line)
    try:
        spec = GitIgnoreSpec.from_lines(valid, backend=_BACKEND)
    except _PATTERN_ERRORS as error:
        # Each line compiles alone, so the set as a whole is over RE2's memory
        # budget: tens of thousands of patterns. Refused, whoever wrote them.
        reason = f"too many to match together ({_reason(error)})"
        raise InvalidIgnorePattern(f"{len(valid)} patterns", reason, source=source) from None
    return _Scope(prefix=prefix, spec=spec)


# pathspec raises ValueError for what gitignore rejects, Python's re.error for
# a class like `[z-a]`, and RE2's error for what only Python's syntax allows.
_PATTERN_ERRORS = (ValueError, re.error, re2.error)


def _reason(error: Exception) -> str:
    detail = error.args[0] if error.args else error
    return detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)


def _read_ignore_file(path: Path) -> str | None:
    # Only regular files: a `.sourceignore` that is a symlink or a FIFO in a
    # cloned repository must not make the controller read outside the tree
    # or block.
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return path.read_text(encoding="utf-8", errors="surrogateescape")
