"""ArtifactGenerator copy operations: Flux source-watcher's semantics on real directories."""

from __future__ import annotations

import io
import tarfile
import zlib
from pathlib import Path

import pytest

from source_controller.generating import Budget, Copier, Operation, content_hash, parse_destination
from source_controller.globbing import CopyError, doublestar_regex

TREE = {
    "infrastructure/controllers/ingress.yaml": "ingress",
    "infrastructure/configs/issuer.yaml": "issuer",
    "apps/base/podinfo/release.yaml": "release",
    "apps/base/podinfo/README.md": "readme",
    "apps/staging/kustomization.yaml": "staging",
    "apps/staging/values.yaml": "a: 1\nb: {c: 2, d: 3}\n",
    "apps/production/values.yaml": "b: {c: 20}\ne: 5\n",
    "top.yaml": "top",
}


def _tarball(files: dict[str, str]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def _copy(tmp_path: Path, *operations: Operation) -> dict[str, str]:
    source = tmp_path / "src"
    for name, text in TREE.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)
    (source / "charts").mkdir()
    (source / "charts" / "app.tgz").write_bytes(_tarball({"app/Chart.yaml": "name: app"}))
    staging = tmp_path / "out"
    staging.mkdir()
    copier = Copier(
        sources={"repo": source}, staging=staging, budget=Budget(max_size=1 << 20, max_files=100)
    )
    for operation in operations:
        copier.apply(operation)
    return {
        p.relative_to(staging).as_posix(): p.read_text() for p in staging.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize(
    ("operations", "expected"),
    [
        pytest.param(
            [Operation("@repo/infrastructure/**", "@artifact/")],
            {
                "controllers/ingress.yaml": "ingress",
                "configs/issuer.yaml": "issuer",
            },
            id="dir-star-star-copies-the-tree-without-its-prefix",
        ),
        pytest.param(
            [
                Operation("@repo/apps/base/**", "@artifact/base/"),
                Operation("@repo/apps/staging/**", "@artifact/staging/"),
            ],
            {
                "base/podinfo/release.yaml": "release",
                "base/podinfo/README.md": "readme",
                "staging/kustomization.yaml": "staging",
                "staging/values.yaml": "a: 1\nb: {c: 2, d: 3}\n",
            },
            id="kustomize-helm-example-apps",
        ),
        pytest.param(
            [Operation("@repo/apps/base", "@artifact/")],
            {
                "base/podinfo/release.yaml": "release",
                "base/podinfo/README.md": "readme",
            },
            id="plain-directory-lands-under-its-name",
        ),
        pytest.param(
            [Operation("@repo/top.yaml", "@artifact/renamed.yaml")],
            {"renamed.yaml": "top"},
            id="plain-file-to-a-file-name",
        ),
        pytest.param(
            [Operation("@repo/top.yaml", "@artifact/dir/")],
            {"dir/top.yaml": "top"},
            id="plain-file-to-a-directory",
        ),
        pytest.param(
            [Operation("@repo/*/staging/*.yaml", "@artifact/")],
            {
                "apps/staging/kustomization.yaml": "staging",
                "apps/staging/values.yaml": "a: 1\nb: {c: 2, d: 3}\n",
            },
            id="other-globs-keep-the-full-path",
        ),
        pytest.param(
            [Operation("@repo/apps/**", "@artifact/", exclude=("*.md", "production/**"))],
            {
                "base/podinfo/release.yaml": "release",
                "staging/kustomization.yaml": "staging",
                "staging/values.yaml": "a: 1\nb: {c: 2, d: 3}\n",
            },
            id="exclude-by-name-and-relative-to-the-pattern",
        ),
        pytest.param(
            [
                Operation("@repo/apps/staging/values.yaml", "@artifact/values.yaml"),
                Operation(
                    "@repo/apps/production/values.yaml", "@artifact/values.yaml", strategy="Merge"
                ),
            ],
            {"values.yaml": "a: 1\nb:\n  c: 20\n  d: 3\ne: 5\n"},
            id="merge-like-helm-values",
        ),
        pytest.param(
            [
                Operation("@repo/apps/staging/values.yaml", "@artifact/values.yaml"),
                Operation("@repo/apps/production/values.yaml", "@artifact/values.yaml"),
            ],
            {"values.yaml": "b: {c: 20}\ne: 5\n"},
            id="later-operations-overwrite",
        ),
        pytest.param(
            [Operation("@repo/charts/*.tgz", "@artifact/charts/", strategy="Extract")],
            {"charts/app/Chart.yaml": "name: app"},
            id="extract-tarballs",
        ),
        pytest.param(
            [Operation("@repo/missing/**", "@artifact/", optional=True)],
            {},
            id="optional-matches-nothing",
        ),
    ],
)
def test_copy_operations_follow_flux(
    tmp_path: Path, operations: list[Operation], expected: dict[str, str]
) -> None:
    assert _copy(tmp_path, *operations) == expected


@pytest.mark.parametrize(
    ("operation", "message"),
    [
        pytest.param(Operation("@repo/missing/**", "@artifact/"), "no files match", id="no-match"),
        pytest.param(Operation("@repo/missing.yaml", "@artifact/"), "does not exist", id="absent"),
        pytest.param(
            Operation("@other/x", "@artifact/"), "alias 'other' is not in", id="unknown-alias"
        ),
        pytest.param(
            Operation("@repo/top.yaml", "@artifact/../escape"), "stay within", id="escape"
        ),
        pytest.param(
            Operation("@repo/top.yaml", "@artifact/x", strategy="Extract"),
            "needs a .tar.gz",
            id="extract-not-a-tarball",
        ),
        pytest.param(
            Operation("@repo/apps/**", "@artifact/", exclude=("**",)),
            "were excluded",
            id="all-excluded",
        ),
    ],
)
def test_bad_operations_name_the_problem(
    tmp_path: Path, operation: Operation, message: str
) -> None:
    with pytest.raises(CopyError, match=message):
        _copy(tmp_path, operation)


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        pytest.param("**/*.md", "a/b/c.md", True, id="star-star-crosses"),
        pytest.param("**/*.md", "c.md", True, id="star-star-matches-none"),
        pytest.param("*.md", "a/c.md", False, id="star-stays-in-segment"),
        pytest.param("a/**", "a/b/c", True, id="trailing-star-star"),
        pytest.param("{a,b}/*.yaml", "b/x.yaml", True, id="alternatives"),
        pytest.param("[!x]*.yaml", "x1.yaml", False, id="negated-class"),
    ],
)
def test_doublestar_matching(pattern: str, path: str, matches: bool) -> None:
    assert bool(doublestar_regex(pattern).match(path)) is matches


@pytest.mark.parametrize(
    ("to", "expected"),
    [
        pytest.param("@artifact/", ".", id="root"),
        pytest.param("@artifact/a/b/", "a/b", id="dir"),
        pytest.param("@artifact/./a", "a", id="dot"),
    ],
)
def test_destinations(to: str, expected: str) -> None:
    assert parse_destination(to) == expected


def test_content_hash_is_go_dirhash_with_adler32(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "y").write_text("two")
    (tmp_path / "a").write_text("one")
    lines = f"{zlib.adler32(b'one'):x}  name/a\n{zlib.adler32(b'two'):x}  name/b/y\n"
    assert content_hash(tmp_path, "name") == str(zlib.adler32(lines.encode()))
