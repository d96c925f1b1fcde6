"""CommitCache on disk: what counts as an entry, and what is evicted."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from source_controller.gitcache import CommitCache


def artifact(tmp_path: Path, name: str, data: bytes) -> tuple[Path, str]:
    path = tmp_path / name
    path.write_bytes(data)
    return path, "sha256:" + hashlib.sha256(data).hexdigest()


def put(cache: CommitCache, tmp_path: Path, key: str, data: bytes) -> None:
    path, digest = artifact(tmp_path, f"{key}.src", data)
    cache.put(key, path, digest=digest, size=len(data), message=f"commit {key}")


def drop_json(cache: CommitCache) -> None:
    # A crash after the tarball's rename, before the JSON's.
    (cache.root / "k.json").unlink()


def corrupt_tarball(cache: CommitCache) -> None:
    (cache.root / "k.tar.gz").write_bytes(b"tampered")


def truncate_json(cache: CommitCache) -> None:
    (cache.root / "k.json").write_text('{"digest": ')


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(drop_json, id="tarball-without-record"),
        pytest.param(corrupt_tarball, id="digest-mismatch"),
        pytest.param(truncate_json, id="half-written-record"),
    ],
)
def test_a_damaged_entry_is_never_used(
    tmp_path: Path, damage: Callable[[CommitCache], None]
) -> None:
    cache = CommitCache(tmp_path / "cache", max_size=1 << 20)
    put(cache, tmp_path, "k", b"tarball bytes")
    damage(cache)
    assert cache.lookup("k") is None
    assert (cache.hits, cache.misses) == (0, 1)


def test_an_intact_entry_is_found_with_its_message(tmp_path: Path) -> None:
    cache = CommitCache(tmp_path / "cache", max_size=1 << 20)
    put(cache, tmp_path, "k", b"tarball bytes")
    entry = cache.lookup("k")
    assert entry is not None
    assert entry.tarball.read_bytes() == b"tarball bytes"
    assert entry.message == "commit k"
    assert (cache.hits, cache.misses) == (1, 0)


def test_temporary_files_of_a_crash_are_removed_at_start(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    (root / ".k.1234.tmp").write_bytes(b"half")
    CommitCache(root, max_size=1 << 20)
    assert list(root.iterdir()) == []


@pytest.mark.parametrize(
    ("max_size", "used", "kept"),
    [
        pytest.param(250, "", ["b", "c"], id="oldest-goes-first"),
        pytest.param(250, "a", ["a", "c"], id="a-lookup-keeps-an-entry"),
        pytest.param(1000, "", ["a", "b", "c"], id="all-fit"),
        pytest.param(99, "", [], id="larger-than-the-bound-is-not-kept"),
        pytest.param(0, "", [], id="disabled"),
    ],
)
def test_eviction_is_least_recently_used_by_bytes(
    tmp_path: Path, max_size: int, used: str, kept: list[str]
) -> None:
    cache = CommitCache(tmp_path / "cache", max_size=max_size)
    for age, key in enumerate(("a", "b")):
        put(cache, tmp_path, key, key.encode() * 100)
        record = cache.root / f"{key}.json"
        if record.exists():
            # Distinct last uses, however coarse the filesystem's clock.
            os.utime(record, (1000 + age, 1000 + age))
    if used:
        assert cache.lookup(used) is not None
    put(cache, tmp_path, "c", b"c" * 100)
    found = [k for k in ("a", "b", "c") if cache.lookup(k) is not None]
    assert found == kept
