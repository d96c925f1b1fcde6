"""The artifact store: layout, URLs, atomic writes, the latest link, GC."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sluice_runtime.artifacts.archiving import digest_file
from sluice_runtime.artifacts.ignoring import IgnoreRules
from sluice_runtime.artifacts.storage import ArtifactTooLarge, Storage, StoragePathError

WriteTree = Callable[..., Path]  # the `write_tree` fixture


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def storage(tmp_path: Path) -> Storage:
    return Storage(
        tmp_path / "data", advertised_addr="source-controller.flux-system.svc.cluster.local."
    )


def test_layout_and_url(storage: Storage) -> None:
    rel = storage.relative_path("GitRepository", "flux-system", "podinfo", "abc.tar.gz")
    assert rel == "gitrepository/flux-system/podinfo/abc.tar.gz"
    assert storage.path(rel) == storage.root / "gitrepository/flux-system/podinfo/abc.tar.gz"
    assert storage.url(rel) == (
        "http://source-controller.flux-system.svc.cluster.local./"
        "gitrepository/flux-system/podinfo/abc.tar.gz"
    )


@pytest.mark.parametrize(
    ("addr", "url"),
    [
        pytest.param("host:9090", "http://host:9090/helmchart/ns/c/c-1.0.0+build.1.tgz", id="bare"),
        pytest.param(
            "https://host/", "https://host/helmchart/ns/c/c-1.0.0+build.1.tgz", id="scheme"
        ),
        pytest.param(
            "http://h/base", "http://h/base/helmchart/ns/c/c-1.0.0+build.1.tgz", id="prefix"
        ),
    ],
)
def test_url_with_and_without_scheme(tmp_path: Path, addr: str, url: str) -> None:
    storage = Storage(tmp_path, advertised_addr=addr)
    rel = storage.relative_path("HelmChart", "ns", "c", "c-1.0.0+build.1.tgz")
    assert storage.url(rel) == url


def test_url_escapes_what_a_url_path_cannot_hold(tmp_path: Path) -> None:
    storage = Storage(tmp_path, advertised_addr="h")
    assert storage.url("bucket/ns/b/a b#?.tar.gz") == "http://h/bucket/ns/b/a%20b%23%3F.tar.gz"


BAD_RELS = [
    pytest.param("", id="empty"),
    pytest.param("/etc/passwd", id="absolute"),
    pytest.param("../x", id="dotdot-first"),
    pytest.param("a/../../x", id="dotdot-middle"),
    pytest.param("a/./b", id="dot"),
    pytest.param("a//b", id="empty-component"),
    pytest.param("a/b/", id="trailing-slash"),
    pytest.param("a/b\0c", id="nul"),
    pytest.param("a\\..\\..\\x", id="backslash"),
    pytest.param("kind/ns/name/.hidden.tmp", id="hidden"),
]


@pytest.mark.parametrize("rel", BAD_RELS)
@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda s, rel: s.path(rel), id="path"),
        pytest.param(lambda s, rel: s.url(rel), id="url"),
        pytest.param(lambda s, rel: s.exists(rel), id="exists"),
        pytest.param(lambda s, rel: s.write_bytes(rel, b"x"), id="write_bytes"),
        pytest.param(lambda s, rel: s.digest(rel), id="digest"),
        pytest.param(lambda s, rel: s.set_latest(rel), id="set_latest"),
    ],
)
def test_paths_that_leave_the_root_are_refused(
    storage: Storage, rel: str, call: Callable[[Storage, str], object]
) -> None:
    with pytest.raises(StoragePathError):
        call(storage, rel)


@pytest.mark.parametrize(
    "parts",
    [
        pytest.param(("GitRepository", "..", "x", "f"), id="dotdot-namespace"),
        pytest.param(("GitRepository", "ns", "a/b", "f"), id="slash-in-name"),
        pytest.param(("GitRepository", "ns", "x", ""), id="empty-file"),
        pytest.param(("GitRepository", "ns", "x", "/etc/passwd"), id="absolute-file"),
        pytest.param(("GitRepository", "ns\0", "x", "f"), id="nul"),
    ],
)
def test_relative_path_refuses_bad_names(storage: Storage, parts: tuple[str, ...]) -> None:
    with pytest.raises(StoragePathError):
        storage.relative_path(*parts)


def test_a_symlinked_directory_cannot_lead_out(storage: Storage, tmp_path: Path) -> None:
    (storage.root / "gitrepository").mkdir()
    os.symlink(tmp_path, storage.root / "gitrepository" / "ns")
    with pytest.raises(StoragePathError):
        storage.write_bytes("gitrepository/ns/x/f", b"x")


def test_write_archive(storage: Storage, tmp_path: Path, write_tree: WriteTree) -> None:
    tree = write_tree(tmp_path / "repo", {"a.yaml": "a: 1\n", ".git/HEAD": "x"})
    rel = storage.relative_path("GitRepository", "ns", "repo", "0123abcd.tar.gz")
    artifact = storage.write_archive(rel, tree, IgnoreRules(spec_ignore=None))
    assert artifact.path == rel
    assert artifact.digest == digest_file(storage.path(rel)) == storage.digest(rel)
    assert artifact.size == storage.path(rel).stat().st_size
    assert storage.exists(rel)
    assert storage.path(rel).stat().st_mode & 0o777 == 0o644
    assert os.listdir(storage.path(rel).parent) == ["0123abcd.tar.gz"]


def test_write_file_and_bytes(storage: Storage, tmp_path: Path) -> None:
    (tmp_path / "layer").write_bytes(b"layer" * 100_000)
    copied = storage.write_file("ocirepository/ns/o/layer.tar.gz", tmp_path / "layer")
    assert copied.digest == digest_file(tmp_path / "layer")
    assert copied.size == 500_000
    written = storage.write_bytes("helmrepository/ns/h/index-1.yaml", b"entries: {}\n")
    assert storage.path(written.path).read_bytes() == b"entries: {}\n"


def test_a_failed_write_leaves_the_old_file_and_no_temp(storage: Storage, tmp_path: Path) -> None:
    rel = "gitrepository/ns/repo/a.tar.gz"
    storage.write_bytes(rel, b"old")
    with pytest.raises(NotADirectoryError):
        storage.write_archive(rel, tmp_path / "missing", None)
    assert storage.path(rel).read_bytes() == b"old"
    assert os.listdir(storage.path(rel).parent) == ["a.tar.gz"]


@pytest.mark.parametrize("how", ["archive", "file"])
def test_a_write_over_max_size_stores_nothing(
    storage: Storage, tmp_path: Path, write_tree: WriteTree, how: str
) -> None:
    rel = "gitrepository/ns/repo/b.tar.gz"
    storage.write_bytes("gitrepository/ns/repo/a.tar.gz", b"old")
    noise = os.urandom(256 * 1024)  # incompressible: the tarball is as big
    tree = write_tree(tmp_path / "repo", {"noise.bin": noise})
    (tmp_path / "layer").write_bytes(noise)

    def write() -> object:
        if how == "archive":
            return storage.write_archive(rel, tree, None, max_size=64 * 1024)
        return storage.write_file(rel, tmp_path / "layer", max_size=64 * 1024)

    with pytest.raises(ArtifactTooLarge, match="limit of 65536 bytes"):
        write()
    assert os.listdir(storage.path(rel).parent) == ["a.tar.gz"]
    assert storage.write_file(rel, tmp_path / "layer", max_size=len(noise)).size == len(noise)


def test_readers_never_see_a_partial_file(storage: Storage) -> None:
    rel = "gitrepository/ns/repo/a.tar.gz"
    versions = [bytes([n]) * (4 << 20) for n in range(3)]
    storage.write_bytes(rel, versions[0])
    stop = threading.Event()
    seen: list[bytes] = []
    errors: list[str] = []

    def read() -> None:
        while not stop.is_set():
            data = storage.path(rel).read_bytes()
            if data not in versions:
                errors.append(f"partial read of {len(data)} bytes")
            seen.append(data[:1])

    readers = [threading.Thread(target=read) for _ in range(3)]
    for reader in readers:
        reader.start()
    try:
        for n in range(30):
            storage.write_bytes(rel, versions[n % 3])
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert not errors
    assert len(set(seen)) > 1


def test_set_latest(storage: Storage) -> None:
    first = storage.write_bytes("gitrepository/ns/repo/a.tar.gz", b"a").path
    second = storage.write_bytes("gitrepository/ns/repo/b.tar.gz", b"b").path
    link = storage.set_latest(first)
    assert link == "gitrepository/ns/repo/latest.tar.gz"
    assert os.readlink(storage.path(link)) == "a.tar.gz"
    storage.set_latest(second)
    assert storage.path(link).read_bytes() == b"b"
    assert not storage.exists(link), "a link is not an artifact"
    assert sorted(os.listdir(storage.path(link).parent)) == [
        "a.tar.gz",
        "b.tar.gz",
        "latest.tar.gz",
    ]
    assert storage.url(link).endswith("/gitrepository/ns/repo/latest.tar.gz")
    with pytest.raises(FileNotFoundError):
        storage.set_latest("gitrepository/ns/repo/missing.tar.gz")
    with pytest.raises(StoragePathError):
        storage.set_latest(first, link_name="../escape")


NOW = 1_000_000.0


@pytest.mark.parametrize(
    ("files", "records", "ttl", "keep", "latest", "survivors"),
    [
        pytest.param(
            {"a": 500, "b": 400, "c": 300, "d": 200}, 2, 60, [], None, {"c", "d"},
            id="newest-n",
        ),
        pytest.param(
            {"a": 500, "b": 30, "c": 20, "d": 10}, 1, 60, [], None, {"b", "c", "d"},
            id="young-files-kept",
        ),
        pytest.param(
            {"a": 500, "b": 400, "c": 300}, 1, 60, ["a"], None, {"a", "c"},
            id="keep-by-name",
        ),
        pytest.param(
            {"a": 500, "b": 400, "c": 300}, 1, 60, ["gitrepository/ns/repo/a"], None, {"a", "c"},
            id="keep-by-path",
        ),
        pytest.param(
            {"a": 500, "b": 400, "c": 300}, 1, 60, ["gitrepository/other/repo/a"], None, {"c"},
            id="keep-of-another-object-ignored",
        ),
        pytest.param(
            {"a": 500, "b": 400, "c": 300}, 1, 60, [], "a", {"a", "c", "latest.tar.gz"},
            id="latest-target-protected",
        ),
        pytest.param(
            {"a": 500, "b": 400}, 0, 60, [], None, set(),
            id="zero-records",
        ),
        pytest.param(
            {"a": 500, ".a.0123.tmp": 500, ".b.4567.tmp": 5}, 2, 60, [], None,
            {"a", ".b.4567.tmp"},
            id="old-temp-files-removed",
        ),
    ],
)  # fmt: skip
def test_garbage_collect(
    tmp_path: Path,
    files: dict[str, int],
    records: int,
    ttl: float,
    keep: list[str],
    latest: str | None,
    survivors: set[str],
) -> None:
    storage = Storage(
        tmp_path, advertised_addr="h", retention_records=records, retention_ttl=ttl,
        clock=FakeClock(NOW),
    )  # fmt: skip
    directory = storage.path("gitrepository/ns/repo/x").parent
    directory.mkdir(parents=True)
    for name, age in files.items():
        (directory / name).write_bytes(name.encode())
        os.utime(directory / name, (NOW - age, NOW - age))
    if latest:
        storage.set_latest(f"gitrepository/ns/repo/{latest}")
    deleted = storage.garbage_collect("GitRepository", "ns", "repo", keep=keep)
    assert set(os.listdir(directory)) == survivors
    assert sorted(deleted) == sorted(f"gitrepository/ns/repo/{n}" for n in set(files) - survivors)


def test_garbage_collect_of_an_unknown_object(storage: Storage) -> None:
    assert storage.garbage_collect("GitRepository", "ns", "nothing", keep=[]) == []


def test_garbage_collect_uses_the_real_clock_by_default(storage: Storage) -> None:
    for name in "abcd":
        storage.write_bytes(f"gitrepository/ns/repo/{name}", b"")
    old = time.time() - 3600
    for name in "ab":
        os.utime(storage.path(f"gitrepository/ns/repo/{name}"), (old, old))
    storage.retention_records = 0
    assert sorted(storage.garbage_collect("GitRepository", "ns", "repo", keep=[])) == [
        "gitrepository/ns/repo/a",
        "gitrepository/ns/repo/b",
    ]


def test_remove_all(storage: Storage) -> None:
    storage.write_bytes("gitrepository/ns/one/a", b"")
    storage.set_latest("gitrepository/ns/one/a", link_name="latest")
    storage.write_bytes("gitrepository/ns/two/a", b"")
    storage.remove_all("GitRepository", "ns", "one")
    assert os.listdir(storage.root / "gitrepository" / "ns") == ["two"]
    storage.remove_all("GitRepository", "ns", "two")
    assert os.listdir(storage.root) == []
    storage.remove_all("GitRepository", "ns", "two")  # already gone: fine


def _write_linked(storage: Storage, src: Path) -> str:
    written = storage.write_file("ocirepository/ns/app/b.tar.gz", src, linked=True)
    storage.set_latest(written.path)
    return written.path


def _write_unlinked(storage: Storage, src: Path) -> str:
    return storage.write_file("ocirepository/ns/app/b.tar.gz", src).path


def _write_unlinked_then_link(storage: Storage, src: Path) -> str:
    written = storage.write_file("ocirepository/ns/app/b.tar.gz", src)
    storage.set_latest(written.path)
    return written.path


@pytest.mark.parametrize(
    ("write", "directory_fsyncs"),
    [
        # A source's artifact: the link's directory fsync makes both renames durable.
        pytest.param(_write_linked, 1, id="linked-then-latest"),
        pytest.param(_write_unlinked, 1, id="unlinked"),
        pytest.param(_write_unlinked_then_link, 2, id="unlinked-then-latest"),
    ],
)
def test_every_rename_is_durable_before_the_write_returns(
    storage: Storage,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write: Callable[[Storage, Path], str],
    directory_fsyncs: int,
) -> None:
    """What a node crash may leave: an artifact's bytes are on disk before its name
    is, and every name (the artifact's, the `latest` link's) is on disk before the
    caller goes on to name it in status; never an fsync more than that takes."""
    storage.write_bytes("ocirepository/ns/app/a.tar.gz", b"old")
    src = tmp_path / "layer"
    src.write_bytes(b"new artifact")
    calls: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: str | Path, dst: str | Path) -> None:
        calls.append(("rename", f"{src} {dst}"))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    rel = write(storage, src)
    monkeypatch.undo()

    directory = str(storage.path(rel).parent)
    for i, (call, what) in enumerate(calls):
        if call != "rename":
            continue
        temp, dest = what.split(" ")
        assert ("fsync", temp) in calls[:i] or dest.endswith("latest.tar.gz"), calls
        assert ("fsync", directory) in calls[i + 1 :], f"rename of {dest} not made durable"
    assert calls.count(("fsync", directory)) == directory_fsyncs, calls
    assert storage.path(rel).read_bytes() == b"new artifact"
