"""What goes into a source artifact: VCS files, Flux's defaults, `.sourceignore`
files scoped to their directory, and `spec.ignore` on top."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from sluice_runtime.artifacts.ignoring import IgnoreRules, InvalidIgnorePattern

WriteTree = Callable[..., Path]  # the `write_tree` fixture

NOT_SET = None

CASES = [
    # VCS files are always out, whatever spec.ignore says.
    pytest.param(NOT_SET, {}, ".git", True, True, id="vcs-git-dir"),
    pytest.param(NOT_SET, {}, ".git/config", False, True, id="vcs-git-content"),
    pytest.param(NOT_SET, {}, "sub/.git", True, True, id="vcs-nested-git-dir"),
    pytest.param(NOT_SET, {}, ".gitignore", False, True, id="vcs-gitignore"),
    pytest.param(NOT_SET, {}, "sub/.gitmodules", False, True, id="vcs-nested-gitmodules"),
    pytest.param(NOT_SET, {}, ".gitattributes", False, True, id="vcs-gitattributes"),
    pytest.param("", {}, ".git/HEAD", False, True, id="vcs-with-empty-spec"),
    pytest.param("!.git/\n!.gitignore", {}, ".git/HEAD", False, True, id="vcs-not-negatable"),
    pytest.param("!.gitignore", {}, ".gitignore", False, True, id="vcs-file-not-negatable"),
    pytest.param(NOT_SET, {}, ".git", False, False, id="vcs-git-file-is-not-dir-pattern"),
    # Flux's defaults, when spec.ignore is not set.
    pytest.param(NOT_SET, {}, "logo.png", False, True, id="default-png"),
    pytest.param(NOT_SET, {}, "docs/img/a.jpeg", False, True, id="default-nested-jpeg"),
    pytest.param(NOT_SET, {}, "dist/app.tar.gz", False, True, id="default-tarball"),
    pytest.param(NOT_SET, {}, ".github/workflows/ci.yml", False, True, id="default-github"),
    pytest.param(NOT_SET, {}, ".github", True, True, id="default-github-dir"),
    pytest.param(NOT_SET, {}, ".github", False, False, id="default-github-file-kept"),
    pytest.param(NOT_SET, {}, "cloudbuild.yaml", False, True, id="default-cloudbuild"),
    pytest.param(NOT_SET, {}, "deploy/.sops.yaml", False, True, id="default-nested-sops"),
    pytest.param(NOT_SET, {}, ".flux.yaml", False, True, id="default-flux-yaml"),
    pytest.param(NOT_SET, {}, "apps/deploy.yaml", False, False, id="default-keeps-yaml"),
    pytest.param(NOT_SET, {}, "apps", True, False, id="default-keeps-dirs"),
    # spec.ignore replaces the defaults and has the last word.
    pytest.param("*.txt", {}, "logo.png", False, False, id="spec-replaces-defaults"),
    pytest.param("*.txt", {}, "notes/a.txt", False, True, id="spec-pattern"),
    pytest.param("", {}, "logo.png", False, False, id="empty-spec-replaces-defaults"),
    pytest.param("/*\n!/apps/", {}, "README.md", False, True, id="spec-allowlist-excludes"),
    pytest.param("/*\n!/apps/", {}, "apps/x.yaml", False, False, id="spec-allowlist-includes"),
    pytest.param("# a comment\n\n*.md", {}, "a.md", False, True, id="spec-comments"),
    pytest.param("\\#x", {}, "#x", False, True, id="spec-escaped-hash"),
    pytest.param(
        "!keep.yaml", {"": "*.yaml"}, "keep.yaml", False, False, id="spec-negates-sourceignore"
    ),
    pytest.param(
        "!keep.yaml", {"": "*.yaml"}, "other.yaml", False, True, id="sourceignore-under-spec"
    ),
    pytest.param("*.yaml", {"": "!a.yaml"}, "a.yaml", False, True, id="spec-beats-sourceignore"),
    # .sourceignore files, scoped to their directory.
    pytest.param(
        NOT_SET, {"": "!*.png"}, "logo.png", False, False, id="sourceignore-negates-default"
    ),
    pytest.param(NOT_SET, {"sub": "*.yaml"}, "sub/a.yaml", False, True, id="nested-applies-below"),
    pytest.param(NOT_SET, {"sub": "*.yaml"}, "sub/x/b.yaml", False, True, id="nested-any-depth"),
    pytest.param(NOT_SET, {"sub": "*.yaml"}, "a.yaml", False, False, id="nested-not-above"),
    pytest.param(
        NOT_SET, {"sub": "*.yaml"}, "other/sub/a.yaml", False, False, id="nested-not-aside"
    ),
    pytest.param(
        NOT_SET, {"sub": "/only.yaml"}, "sub/only.yaml", False, True, id="nested-anchored"
    ),
    pytest.param(
        NOT_SET, {"sub": "/only.yaml"}, "sub/x/only.yaml", False, False, id="nested-anchored-deeper"
    ),
    pytest.param(
        NOT_SET,
        {"": "*.yaml", "sub": "!keep.yaml"},
        "sub/keep.yaml",
        False,
        False,
        id="deeper-beats-shallower",
    ),
    pytest.param(
        NOT_SET,
        {"": "*.yaml", "sub": "!keep.yaml"},
        "keep.yaml",
        False,
        True,
        id="deeper-scoped",
    ),
    pytest.param(NOT_SET, {"a/b": "c/"}, "a/b/c/d.txt", False, True, id="nested-two-levels"),
    pytest.param(
        NOT_SET, {"sub": "!\nx"}, "sub/x", False, True, id="sourceignore-bad-line-skipped"
    ),
    # gitignore semantics.
    pytest.param("build/", {}, "build", True, True, id="dir-only-dir"),
    pytest.param("build/", {}, "build", False, False, id="dir-only-not-file"),
    pytest.param("build/", {}, "src/build/out.bin", False, True, id="dir-only-any-depth"),
    pytest.param("/build", {}, "src/build", True, False, id="anchored-not-nested"),
    pytest.param("/build", {}, "build/x", False, True, id="anchored-root"),
    pytest.param(
        "build/\n!build/keep.txt",
        {},
        "build/keep.txt",
        False,
        True,
        id="no-reinclude-under-ignored-dir",
    ),
    pytest.param(
        "build/*\n!build/keep.txt", {}, "build/keep.txt", False, False, id="reinclude-with-star"
    ),
    pytest.param("a/**/z.yaml", {}, "a/z.yaml", False, True, id="double-star-zero"),
    pytest.param("a/**/z.yaml", {}, "a/b/c/z.yaml", False, True, id="double-star-many"),
    pytest.param("a/**/z.yaml", {}, "b/a/z.yaml", False, False, id="double-star-anchored"),
    pytest.param("**/tmp", {}, "x/y/tmp", True, True, id="leading-double-star"),
    pytest.param("logs/**", {}, "logs/a/b", False, True, id="trailing-double-star"),
    pytest.param("*.yaml\n!*.yaml", {}, "a.yaml", False, False, id="last-pattern-wins"),
]


@pytest.mark.parametrize(("spec", "sourceignores", "path", "is_dir", "ignored"), CASES)
def test_ignored(
    spec: str | None, sourceignores: dict[str, str], path: str, is_dir: bool, ignored: bool
) -> None:
    rules = IgnoreRules(spec_ignore=spec)
    for directory, text in sourceignores.items():
        rules.add_sourceignore(directory, text)
    assert rules.ignored(path, is_dir=is_dir) is ignored


@pytest.mark.parametrize(
    ("spec", "line"),
    [
        pytest.param("!", "!", id="lone-bang"),
        pytest.param("ok\nfoo\\", "foo\\", id="trailing-backslash"),
        pytest.param("ok\n[z-a]", "[z-a]", id="reversed-range"),
        pytest.param("[[:alpha:]]x", "[[:alpha:]]x", id="python-only-class"),
    ],
)
def test_invalid_spec_ignore_is_an_error(spec: str, line: str) -> None:
    with pytest.raises(InvalidIgnorePattern) as error:
        IgnoreRules(spec_ignore=spec)
    assert error.value.line == line
    assert f"invalid ignore pattern {line!r} in spec.ignore: " in str(error.value)


def test_invalid_sourceignore_lines_are_skipped() -> None:
    rules = IgnoreRules(spec_ignore=None)
    rules.add_sourceignore("sub", "[z-a]\n[[:alpha:]]x\n*.txt")
    assert rules.ignored("sub/a.txt", is_dir=False)
    assert not rules.ignored("sub/a.yaml", is_dir=False)


CATASTROPHIC = "*a" * 12 + "b"
"""On a backtracking engine, matching this against forty a's tries every way of
splitting them between the stars: hours for one path."""


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("spec", "sourceignore"),
    [
        pytest.param(CATASTROPHIC, None, id="spec-ignore"),
        pytest.param("", CATASTROPHIC, id="sourceignore"),
    ],
)
def test_a_catastrophic_pattern_is_matched_in_linear_time(
    spec: str, sourceignore: str | None
) -> None:
    rules = IgnoreRules(spec_ignore=spec)
    if sourceignore is not None:
        rules.add_sourceignore("", sourceignore)
    assert not rules.ignored("a" * 40, is_dir=False)
    assert not rules.ignored("a" * 40, is_dir=True)
    assert rules.ignored("a" * 40 + "b", is_dir=False)


def test_load_reads_sourceignore_files_in_the_tree(tmp_path: Path, write_tree: WriteTree) -> None:
    root = write_tree(
        tmp_path / "repo",
        {
            ".sourceignore": "*.md\n",
            "apps/.sourceignore": "/local.yaml\n",
            "apps/local.yaml": "",
            "apps/deep/local.yaml": "",
            "README.md": "",
            "vendor/.sourceignore": "!*.md\n",  # in an ignored directory: never read
            "vendor/a.md": "",
            "logo.png": b"",
        },
    )
    rules = IgnoreRules.load(root, spec_ignore="vendor/\n")
    assert rules.ignored("README.md", is_dir=False)
    assert rules.ignored("apps/local.yaml", is_dir=False)
    assert not rules.ignored("apps/deep/local.yaml", is_dir=False)
    assert rules.ignored("vendor/a.md", is_dir=False)
    assert not rules.ignored("logo.png", is_dir=False)  # spec.ignore dropped the defaults


def test_load_does_not_follow_symlinked_dirs_or_files(
    tmp_path: Path, write_tree: WriteTree
) -> None:
    write_tree(tmp_path / "elsewhere", {".sourceignore": "*\n"})
    root = write_tree(tmp_path / "repo", {"a.yaml": "", "sub/b.yaml": ""})
    os.symlink(tmp_path / "elsewhere", root / "linked")
    os.symlink(tmp_path / "elsewhere" / ".sourceignore", root / "sub" / ".sourceignore")
    rules = IgnoreRules.load(root, spec_ignore=None)
    assert not rules.ignored("a.yaml", is_dir=False)
    assert not rules.ignored("sub/b.yaml", is_dir=False)


@pytest.mark.parametrize(
    ("spec", "sourceignore", "shared"),
    [
        pytest.param(None, None, True, id="defaults-compiled-once"),
        pytest.param("*.md\n!keep.md\n", None, True, id="spec-ignore-compiled-once"),
        pytest.param(None, "*.txt\n", True, id="short-sourceignore-compiled-once"),
        pytest.param(None, "".join(f"/f{i}.txt\n" for i in range(600)), False,
                     id="long-sourceignore-compiled-each-time"),
    ],
)  # fmt: skip
def test_rule_sets_are_compiled_once_per_process(
    spec: str | None, sourceignore: str | None, shared: bool
) -> None:
    """Every artifact built again compiled the same patterns again (a tenth of the
    source-controller's CPU at 1000 sources); a tenant's long file stays uncached."""
    first, second = IgnoreRules(spec_ignore=spec), IgnoreRules(spec_ignore=spec)
    if sourceignore is not None:
        first.add_sourceignore("apps", sourceignore)
        second.add_sourceignore("apps", sourceignore)
    assert (first._scopes[0].spec is second._scopes[0].spec) is shared
    assert first._vcs is second._vcs
    assert first.ignored("apps/f1.txt", is_dir=False) is (sourceignore is not None)
    assert first.ignored("a.md", is_dir=False) is (spec is not None)


def test_a_refused_spec_ignore_is_refused_every_time() -> None:
    for _ in range(2):
        with pytest.raises(InvalidIgnorePattern):
            IgnoreRules(spec_ignore="ok.yaml\n!\n")
