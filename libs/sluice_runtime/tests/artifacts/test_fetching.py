"""Downloading, verifying and unpacking artifacts, against the real file server."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import socket
import stat
import tarfile
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sluice_runtime.artifacts.fetching import (
    ArtifactDigestMismatch,
    ArtifactFetchError,
    UnsafeArchive,
    extract_tarball,
    fetch_artifact,
)
from sluice_runtime.artifacts.ignoring import IgnoreRules

if TYPE_CHECKING:
    from .conftest import Served

WriteTree = Callable[..., Path]  # the `write_tree` fixture
MiB = 1 << 20


def _snapshot(root: Path) -> dict[str, tuple[str, str | bytes, int]]:
    """Relative path → (kind, content or link target, mode)."""
    result: dict[str, tuple[str, str | bytes, int]] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            result[rel] = ("link", os.readlink(path), 0)
        elif stat.S_ISDIR(info.st_mode):
            result[rel] = ("dir", b"", stat.S_IMODE(info.st_mode))
        else:
            result[rel] = ("file", path.read_bytes(), stat.S_IMODE(info.st_mode))
    return result


async def test_fetch_unpacks_what_was_archived(
    served: Served, tmp_path: Path, write_tree: WriteTree
) -> None:
    tree = write_tree(
        tmp_path / "repo",
        {
            "apps/deploy.yaml": "kind: Deployment\n",
            "apps/link.yaml": "->deploy.yaml",
            "bin/run.sh": "#!/bin/sh\n",
            "big.bin": os.urandom(2 * MiB),
            ".git/HEAD": "ref",
        },
    )
    (tree / "bin/run.sh").chmod(0o700)
    rel = served.storage.relative_path("GitRepository", "ns", "repo", "abc.tar.gz")
    artifact = served.storage.write_archive(rel, tree, IgnoreRules(spec_ignore=None))

    dest = tmp_path / "out"
    await fetch_artifact(
        served.session, url=served.storage.url(rel), digest=artifact.digest, dest=dest
    )
    got = _snapshot(dest)
    assert ".git" not in got
    assert got["apps/link.yaml"] == ("link", "deploy.yaml", 0)
    assert got["bin/run.sh"] == ("file", b"#!/bin/sh\n", 0o755)
    assert got["apps/deploy.yaml"] == ("file", b"kind: Deployment\n", 0o644)
    assert got["big.bin"][1] == (tree / "big.bin").read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["out", "repo", "storage"], "download not cleaned up"


@pytest.mark.parametrize("algorithm", ["sha384", "sha512"])
async def test_other_digest_algorithms(served: Served, tmp_path: Path, algorithm: str) -> None:
    data = _tarball([_file("a.yaml", b"a")])
    rel = served.storage.write_bytes("bucket/ns/b/x.tar.gz", data).path
    digest = f"{algorithm}:{hashlib.new(algorithm, data).hexdigest()}"
    await fetch_artifact(
        served.session, url=served.storage.url(rel), digest=digest, dest=tmp_path / "out"
    )
    assert (tmp_path / "out" / "a.yaml").read_bytes() == b"a"


async def test_digest_mismatch_extracts_nothing(served: Served, tmp_path: Path) -> None:
    rel = served.storage.write_bytes("bucket/ns/b/x.tar.gz", _tarball([_file("a", b"a")])).path
    wrong = "sha256:" + hashlib.sha256(b"something else").hexdigest()
    with pytest.raises(ArtifactDigestMismatch) as raised:
        await fetch_artifact(
            served.session, url=served.storage.url(rel), digest=wrong, dest=tmp_path / "out"
        )
    assert raised.value.expected == wrong
    assert raised.value.actual == served.storage.digest(rel)
    assert not (tmp_path / "out").exists()
    assert sorted(os.listdir(tmp_path)) == ["storage"]


@pytest.mark.parametrize(
    "digest",
    [
        pytest.param("", id="empty"),
        pytest.param("abc", id="no-algorithm"),
        pytest.param("md5:" + "0" * 32, id="md5"),
        pytest.param("sha256:" + "0" * 63, id="short"),
        pytest.param("sha256:" + "G" * 64, id="not-hex"),
    ],
)
async def test_malformed_digest(served: Served, tmp_path: Path, digest: str) -> None:
    with pytest.raises(ValueError, match="invalid artifact digest"):
        await fetch_artifact(
            served.session, url=f"{served.base_url}/x", digest=digest, dest=tmp_path / "out"
        )


async def test_http_error_status(served: Served, tmp_path: Path) -> None:
    url = f"{served.base_url}/gitrepository/ns/repo/missing.tar.gz"
    with pytest.raises(ArtifactFetchError, match="not found") as raised:
        await fetch_artifact(
            served.session, url=url, digest="sha256:" + "0" * 64, dest=tmp_path / "o"
        )
    assert raised.value.status == 404
    assert url in str(raised.value)


async def test_connection_refused(served: Served, tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/x.tar.gz"
    with pytest.raises(ArtifactFetchError) as raised:
        await fetch_artifact(
            served.session, url=url, digest="sha256:" + "0" * 64, dest=tmp_path / "o"
        )
    assert raised.value.status is None
    assert url in str(raised.value)


async def test_download_above_the_limit_is_aborted(served: Served, tmp_path: Path) -> None:
    artifact = served.storage.write_bytes("bucket/ns/b/big.tar.gz", os.urandom(2 * MiB))
    with pytest.raises(ArtifactFetchError, match="limit"):
        await fetch_artifact(
            served.session,
            url=served.storage.url(artifact.path),
            digest=artifact.digest,
            dest=tmp_path / "out",
            max_size=MiB,
        )
    assert sorted(os.listdir(tmp_path)) == ["storage"]


# Hostile archives


def _file(name: str, data: bytes = b"x", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    return info, data


def _dir(name: str) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    return info, b""


def _link(name: str, target: str, *, hard: bool = False) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
    info.linkname = target
    return info, b""


def _special(name: str, kind: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.devmajor, info.devminor = 1, 3
    return info, b""


def _tarball(entries: list[tuple[tarfile.TarInfo, bytes]], *, compress: bool = True) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return gzip.compress(raw.getvalue()) if compress else raw.getvalue()


OUTSIDE = "/tmp/sluice-tar-slip-canary"  # also checked by absolute-path cases

HOSTILE = [
    pytest.param([_file("../evil")], "'..'", id="dotdot"),
    pytest.param([_file("a/../../evil")], "'..'", id="dotdot-nested"),
    pytest.param([_file("./../evil")], "'..'", id="dot-dotdot"),
    pytest.param([_file(OUTSIDE)], "absolute", id="absolute"),
    pytest.param([_link("l", "/tmp")], "absolute", id="symlink-absolute"),
    pytest.param(
        [_link("l", "/tmp"), _file("l/sluice-tar-slip-canary")],
        "absolute|below a link",
        id="symlink-absolute-then-write",
    ),
    pytest.param([_link("l", "../../../../../../tmp")], "outside", id="symlink-escape"),
    pytest.param(
        [_link("l", "../../../../../../tmp"), _file("l/sluice-tar-slip-canary")],
        "outside|below a link",
        id="symlink-escape-then-write",
    ),
    pytest.param(
        [_dir("sub"), _link("l", "sub"), _file("l/x")],
        "below a link",
        id="write-through-inside-symlink",
    ),
    pytest.param(
        [_dir("d"), _link("d/up", ".."), _link("x", "d/up/..")],
        "outside",
        id="symlink-chain-escape",
    ),
    pytest.param(
        [_link("x", "d/up/.."), _dir("d"), _link("d/up", "..")],
        "outside",
        id="symlink-chain-escape-reordered",
    ),
    pytest.param(
        [_dir("base"), _link("o/base", "../base"), _link("o/via", "base/../../x")],
        "outside",
        id="symlink-dotdot-after-link",
    ),
    pytest.param([_link("a", "b"), _link("b", "a")], "loop", id="symlink-loop"),
    pytest.param([_link("h", "/etc/passwd", hard=True)], "hard link", id="hardlink-absolute"),
    pytest.param(
        [_link("h", "../../../../etc/passwd", hard=True)], "hard link", id="hardlink-dotdot"
    ),
    pytest.param([_file("a"), _link("h", "a", hard=True)], "hard link", id="hardlink-inside"),
    pytest.param([_special("null", tarfile.CHRTYPE)], "only files", id="char-device"),
    pytest.param([_special("disk", tarfile.BLKTYPE)], "only files", id="block-device"),
    pytest.param([_special("fifo", tarfile.FIFOTYPE)], "only files", id="fifo"),
    pytest.param([_file("a"), _file("a")], "duplicate", id="duplicate"),
    pytest.param([_file("a"), _file("a/b")], "below a file", id="below-a-file"),
    pytest.param([_file("a/b"), _file("a")], "duplicate or conflicting", id="file-over-dir"),
    pytest.param([_file("big", bytes(2 * MiB))], "size", id="too-big"),
    pytest.param(
        [_file(f"f{i}", bytes(300 * 1024)) for i in range(4)], "size", id="too-big-in-total"
    ),
]


@pytest.mark.parametrize(("entries", "reason"), HOSTILE)
async def test_hostile_archives_are_refused(
    served: Served, tmp_path: Path, entries: list[tuple[tarfile.TarInfo, bytes]], reason: str
) -> None:
    artifact = served.storage.write_bytes("bucket/ns/evil/x.tar.gz", _tarball(entries))
    dest = tmp_path / "work" / "out"
    with pytest.raises(UnsafeArchive, match=reason):
        await fetch_artifact(
            served.session,
            url=served.storage.url(artifact.path),
            digest=artifact.digest,
            dest=dest,
            max_size=MiB,
        )
    assert not dest.exists(), "nothing may be unpacked from a refused archive"
    assert os.listdir(tmp_path / "work") == []
    assert not os.path.lexists(OUTSIDE)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param(_tarball([_file("a")], compress=False), "not a gzip", id="plain-tar"),
        pytest.param(
            gzip.compress(os.urandom(4096)), "not a valid gzip tarball", id="gzip-not-tar"
        ),
        pytest.param(
            gzip.compress(_tarball([_file("a", bytes(4096))], compress=False)[:1000]),
            "not a valid",
            id="truncated",
        ),
        pytest.param(b"\x1f\x8b" + os.urandom(100), "not a valid", id="corrupt-gzip"),
    ],
)
def test_what_is_not_a_gzip_tarball(tmp_path: Path, data: bytes, reason: str) -> None:
    (tmp_path / "a.tar.gz").write_bytes(data)
    with pytest.raises(UnsafeArchive, match=reason):
        extract_tarball(tmp_path / "a.tar.gz", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_gzip_bomb_stops_early(tmp_path: Path) -> None:
    # 64 MiB of tar headers and padding (no file content) in a small file:
    # the file-size sum never grows, the stream bound must catch it.
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("x")
        info.pax_headers = {"comment": "x" * (64 * MiB)}
        tar.addfile(info, io.BytesIO(b""))
    (tmp_path / "bomb.tar.gz").write_bytes(gzip.compress(raw.getvalue()))
    assert (tmp_path / "bomb.tar.gz").stat().st_size < MiB
    with pytest.raises(UnsafeArchive, match="size limit"):
        extract_tarball(tmp_path / "bomb.tar.gz", tmp_path / "out", max_size=MiB)


def _empty_files(count: int) -> bytes:
    """A .tar.gz of `count` empty files: 512 header bytes each, which gzip
    shrinks to a few bytes (two million of them fit in ~13 MB)."""
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    chunks = [
        compressor.compress(tarfile.TarInfo(f"f{i:07d}").tobuf(tarfile.USTAR_FORMAT))
        for i in range(count)
    ]
    chunks += [compressor.compress(b"\0" * 1024), compressor.flush()]
    return b"".join(chunks)


def test_too_many_entries_are_refused_in_bounded_memory(tmp_path: Path) -> None:
    (tmp_path / "many.tar.gz").write_bytes(_empty_files(20_000))
    tracemalloc.start()
    try:
        with pytest.raises(UnsafeArchive, match="more than the limit of 1000 entries"):
            extract_tarball(tmp_path / "many.tar.gz", tmp_path / "out", max_members=1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # What the first thousand entries need, not what twenty thousand would.
    assert peak < 4 * MiB, peak
    assert not (tmp_path / "out").exists(), "nothing is unpacked from a refused archive"


def test_the_entry_limit_counts_every_entry(tmp_path: Path) -> None:
    (tmp_path / "exact.tar.gz").write_bytes(_empty_files(1000))
    extract_tarball(tmp_path / "exact.tar.gz", tmp_path / "out", max_members=1000)
    assert len(list((tmp_path / "out").iterdir())) == 1000


async def test_fetch_passes_the_entry_limit(served: Served, tmp_path: Path) -> None:
    artifact = served.storage.write_bytes("bucket/ns/b/many.tar.gz", _empty_files(50))
    with pytest.raises(UnsafeArchive, match="more than the limit of 10 entries"):
        await fetch_artifact(
            served.session,
            url=served.storage.url(artifact.path),
            digest=artifact.digest,
            dest=tmp_path / "out",
            max_members=10,
        )
    assert not (tmp_path / "out").exists()


def test_flux_style_archives_with_a_root_entry(tmp_path: Path) -> None:
    (tmp_path / "a.tar.gz").write_bytes(
        _tarball([_dir("."), _dir("./apps"), _file("./apps/a.yaml", b"a", mode=0o600)])
    )
    extract_tarball(tmp_path / "a.tar.gz", tmp_path / "out")
    assert _snapshot(tmp_path / "out") == {
        "apps": ("dir", b"", 0o755),
        "apps/a.yaml": ("file", b"a", 0o644),
    }


def test_symlinks_that_stay_inside_are_unpacked(tmp_path: Path) -> None:
    (tmp_path / "a.tar.gz").write_bytes(
        _tarball([
            _dir("base"),
            _file("base/a.yaml", b"a"),
            _link("overlay/a.yaml", "../base/a.yaml"),
            _link("overlay/base", "../base"),
            _link("overlay/via", "base/../base/a.yaml"),  # base/.. is the root
        ])
    )  # fmt: skip
    extract_tarball(tmp_path / "a.tar.gz", tmp_path / "out")
    assert (tmp_path / "out/overlay/via").read_bytes() == b"a"
    assert (tmp_path / "out/overlay/base/a.yaml").read_bytes() == b"a"


@pytest.mark.parametrize(
    "prepare",
    [
        pytest.param(lambda out: (out.mkdir(), (out / "x").write_text("")), id="non-empty-dir"),
        pytest.param(lambda out: out.write_text(""), id="file"),
    ],
)
def test_dest_must_be_empty(tmp_path: Path, prepare: Callable[[Path], object]) -> None:
    (tmp_path / "a.tar.gz").write_bytes(_tarball([_file("a")]))
    prepare(tmp_path / "out")
    with pytest.raises(FileExistsError):
        extract_tarball(tmp_path / "a.tar.gz", tmp_path / "out")


def test_an_empty_dest_directory_is_fine(tmp_path: Path) -> None:
    (tmp_path / "a.tar.gz").write_bytes(_tarball([_file("a")]))
    (tmp_path / "out").mkdir()
    extract_tarball(tmp_path / "a.tar.gz", tmp_path / "out")
    assert (tmp_path / "out" / "a").read_bytes() == b"x"
