"""Tarballs whose bytes depend on the content alone."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from sluice_runtime.artifacts import archiving
from sluice_runtime.artifacts.archiving import build_tarball, digest_file
from sluice_runtime.artifacts.ignoring import IgnoreRules

WriteTree = Callable[..., Path]  # the `write_tree` fixture

CONTENT: dict[str, str | bytes] = {
    "apps/podinfo/deploy.yaml": "kind: Deployment\n",
    "apps/podinfo/kustomization.yaml": "resources: [deploy.yaml]\n",
    "bin/run.sh": "#!/bin/sh\necho hi\n",
    "README.md": "# repo\n",
    "ünïcode/ñame.yaml": "a: 1\n",
    "deep/" + "x" * 120 + "/" + "y" * 120 + ".yaml": "long: name\n",
    "data.bin": bytes(range(256)) * 1000,
}


def _members(path: Path) -> list[tarfile.TarInfo]:
    with tarfile.open(path, "r:gz") as tar:
        return tar.getmembers()


def _build(tree: Path, out: Path, ignore: IgnoreRules | None = None) -> str:
    build_tarball(tree, out, ignore=ignore)
    return digest_file(out)


def test_same_content_gives_the_same_bytes(tmp_path: Path, write_tree: WriteTree) -> None:
    first = write_tree(tmp_path / "one", CONTENT)
    (first / "bin/run.sh").chmod(0o755)
    (first / "README.md").chmod(0o600)

    # The same content written in reverse order, with other times, owners
    # and permission bits that do not change what the file is.
    second = tmp_path / "two"
    for rel, content in reversed(CONTENT.items()):
        write_tree(second, {rel: content})
    (second / "bin/run.sh").chmod(0o700)
    (second / "README.md").chmod(0o664)
    (second / "apps").chmod(0o700)
    for path in second.rglob("*"):
        os.utime(path, (1_000_000, 1_000_000), follow_symlinks=False)
        os.lchown(path, 1234, 5678)

    assert _build(first, tmp_path / "1.tar.gz") == _build(second, tmp_path / "2.tar.gz")
    assert (tmp_path / "1.tar.gz").read_bytes() == (tmp_path / "2.tar.gz").read_bytes()


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda root: (root / "README.md").write_text("# changed\n"), id="content"),
        pytest.param(lambda root: (root / "README.md").chmod(0o755), id="executable-bit"),
        pytest.param(lambda root: (root / "README.md").rename(root / "README"), id="rename"),
        pytest.param(lambda root: (root / "new.yaml").write_text(""), id="new-empty-file"),
    ],
)
def test_a_content_change_changes_the_digest(
    tmp_path: Path, write_tree: WriteTree, change: Callable[[Path], object]
) -> None:
    tree = write_tree(tmp_path / "repo", CONTENT)
    before = _build(tree, tmp_path / "before.tar.gz")
    change(tree)
    assert _build(tree, tmp_path / "after.tar.gz") != before


def test_headers_are_normalised(tmp_path: Path, write_tree: WriteTree) -> None:
    tree = write_tree(tmp_path / "repo", CONTENT)
    (tree / "bin/run.sh").chmod(0o750)
    (tree / "README.md").chmod(0o600)
    build_tarball(tree, tmp_path / "a.tar.gz", ignore=None)
    members = {m.name: m for m in _members(tmp_path / "a.tar.gz")}
    for member in members.values():
        assert (member.mtime, member.uid, member.gid, member.uname, member.gname) == (
            0,
            0,
            0,
            "",
            "",
        )
        assert member.pax_headers.keys() <= {"path"}  # only for the long name
    assert members["bin/run.sh"].mode == 0o755
    assert members["README.md"].mode == 0o644
    assert members["apps"].isdir() and members["apps"].mode == 0o755

    raw = (tmp_path / "a.tar.gz").read_bytes()
    assert raw[4:8] == b"\0\0\0\0", "gzip mtime"
    assert not raw[3] & 0x08, "gzip FNAME flag"


def test_entries_are_sorted_depth_first_and_directories_only_when_needed(
    tmp_path: Path, write_tree: WriteTree
) -> None:
    tree = write_tree(
        tmp_path / "repo",
        {
            "b.yaml": "",
            "a/z.yaml": "",
            "a.yaml": "",
            "a/b/c.yaml": "",
            "empty/": "",
            "only-ignored/x.png": b"",
        },
    )
    build_tarball(tree, tmp_path / "a.tar.gz", ignore=IgnoreRules(spec_ignore=None))
    assert [m.name for m in _members(tmp_path / "a.tar.gz")] == [
        "a",
        "a/b",
        "a/b/c.yaml",
        "a/z.yaml",
        "a.yaml",
        "b.yaml",
    ]


def test_ignore_rules_are_applied_and_ignored_dirs_not_entered(
    tmp_path: Path, write_tree: WriteTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = write_tree(
        tmp_path / "repo",
        {
            ".git/HEAD": "ref: refs/heads/main\n",
            ".gitignore": "*.log\n",
            ".github/workflows/ci.yml": "",
            "logo.png": b"\x89PNG",
            "apps/deploy.yaml": "",
            "apps/.sourceignore": "secret.yaml\n",
            "apps/secret.yaml": "",
            "apps/README.md": "",
        },
    )
    scanned: list[str] = []
    real_scandir = os.scandir

    def recording_scandir(path: str) -> object:
        scanned.append(os.path.relpath(path, os.path.realpath(tree)))
        return real_scandir(path)

    rules = IgnoreRules.load(tree, spec_ignore=None)
    monkeypatch.setattr(archiving.os, "scandir", recording_scandir)
    build_tarball(tree, tmp_path / "a.tar.gz", ignore=rules)
    monkeypatch.undo()

    names = [m.name for m in _members(tmp_path / "a.tar.gz")]
    assert names == ["apps", "apps/.sourceignore", "apps/README.md", "apps/deploy.yaml"]
    assert sorted(scanned) == [".", "apps"]


def test_no_rules_means_everything(tmp_path: Path, write_tree: WriteTree) -> None:
    tree = write_tree(tmp_path / "repo", {".git/HEAD": "", "logo.png": b""})
    build_tarball(tree, tmp_path / "a.tar.gz", ignore=None)
    assert [m.name for m in _members(tmp_path / "a.tar.gz")] == [".git", ".git/HEAD", "logo.png"]


def test_symlinks_inside_are_kept_relative_others_skipped(
    tmp_path: Path, write_tree: WriteTree
) -> None:
    write_tree(tmp_path / "outside", {"secret": "s3cr3t"})
    tree = write_tree(
        tmp_path / "repo",
        {
            "base/deploy.yaml": "kind: Deployment\n",
            "base/logo.png": b"",
            "overlay/relative.yaml": "->../base/deploy.yaml",
            "overlay/base": "->../base",
            "overlay/outside": "->../../outside/secret",
            "overlay/absolute-outside": f"->{tmp_path / 'outside' / 'secret'}",
            "overlay/dangling": "->../missing.yaml",
            "overlay/to-ignored": "->../base/logo.png",
            "overlay/loop": "->loop",
            "overlay/to-root": "->..",
        },
    )
    os.symlink(tree / "base" / "deploy.yaml", tree / "overlay" / "absolute-inside")
    build_tarball(tree, tmp_path / "a.tar.gz", ignore=IgnoreRules(spec_ignore=None))
    links = {m.name: m.linkname for m in _members(tmp_path / "a.tar.gz") if m.issym()}
    assert links == {
        "overlay/absolute-inside": "../base/deploy.yaml",
        "overlay/base": "../base",
        "overlay/relative.yaml": "../base/deploy.yaml",
    }
    with tarfile.open(tmp_path / "a.tar.gz", "r:gz") as tar:
        assert all(b"s3cr3t" not in (tar.extractfile(m) or io.BytesIO()).read() for m in tar)


def test_special_files_are_skipped(tmp_path: Path, write_tree: WriteTree) -> None:
    tree = write_tree(tmp_path / "repo", {"a.yaml": ""})
    os.mkfifo(tree / "fifo")
    build_tarball(tree, tmp_path / "a.tar.gz", ignore=None)
    assert [m.name for m in _members(tmp_path / "a.tar.gz")] == ["a.yaml"]


def test_src_must_be_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        build_tarball(tmp_path / "file", tmp_path / "a.tar.gz", ignore=None)


@pytest.mark.parametrize("algorithm", ["sha256", "sha384", "sha512"])
def test_digest_file(tmp_path: Path, algorithm: str) -> None:
    data = os.urandom(3 * (1 << 20) + 17)  # more than one chunk
    (tmp_path / "f").write_bytes(data)
    expected = f"{algorithm}:{hashlib.new(algorithm, data).hexdigest()}"
    assert digest_file(tmp_path / "f", algorithm=algorithm) == expected


def test_tarball_is_readable_by_gzip_and_tar(tmp_path: Path, write_tree: WriteTree) -> None:
    tree = write_tree(tmp_path / "repo", CONTENT)
    build_tarball(tree, tmp_path / "a.tar.gz", ignore=None)
    with tarfile.open(
        fileobj=io.BytesIO(gzip.decompress((tmp_path / "a.tar.gz").read_bytes()))
    ) as tar:
        data = tar.extractfile("data.bin")
        assert data is not None and data.read() == CONTENT["data.bin"]
        assert "ünïcode/ñame.yaml" in tar.getnames()
