"""Finished GitRepository tarballs, shared by GitRepositories that resolve to the same commit.

Many GitRepositories often point at one repository and branch (a fleet of
apps in one monorepo, Flux's own benchmark): each used to clone the same
commit and build the same tarball. An entry here is that tarball, keyed by
the URL, the commit and the content config checksum (ignore, sparse
checkout: everything besides the commit that shapes the bytes), so a second
GitRepository copies it instead of cloning.

Access: an entry is only ever offered after the asking GitRepository's own
ls-remote, with its own credentials (or one of the same URL and credentials
it joined in flight), advertised the commit under one of the URL's refs.
Git serves any advertised commit to whoever received the advertisement, so
that tenant could have fetched exactly this content
itself; wrong credentials fail at that ls-remote, before the cache is read.
What an ls-remote cannot prove is not cached: a pinned commit no ref points
at, submodules (other URLs, other credentials), includes (other objects'
artifacts) and verification (it needs the commit's signature).

On disk under `<storage root>/.cache/git/` (hidden names: the file server
refuses them, so entries are never downloadable): `<key>.tar.gz` and then
`<key>.json` (digest, size, commit message), each written to a temporary
name and renamed. An entry counts only once its JSON exists and the
tarball's digest matches it, so a crash mid-write leaves nothing usable.
Bounded by bytes; the least recently used entries go first.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.metrics import Counter

from sluice_runtime.artifacts.archiving import digest_file
from sluice_runtime.observing import metrics

DEFAULT_MAX_SIZE = 256 << 20


@dataclass(frozen=True)
class Entry:
    tarball: Path
    digest: str
    size: int
    message: str


class CommitCache:
    def __init__(self, root: Path, *, max_size: int = DEFAULT_MAX_SIZE) -> None:
        self.root = root
        self.max_size = max_size
        self.hits = 0
        self.misses = 0
        self._locks: dict[str, asyncio.Lock] = {}
        self._counter: Counter | None = None
        if max_size > 0:
            root.mkdir(parents=True, exist_ok=True)
            # Leftovers of a crash: never entries, only space.
            for leftover in root.glob(".*.tmp"):
                leftover.unlink(missing_ok=True)

    @staticmethod
    def key(url: str, commit: str, content_checksum: str) -> str:
        encoded = json.dumps([url, commit, content_checksum]).encode()
        return hashlib.sha256(encoded).hexdigest()

    @contextlib.asynccontextmanager
    async def building(self, key: str) -> AsyncIterator[None]:
        """One reconcile at a time per key: the others wait, then find the entry."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and self._locks.get(key) is lock:
                del self._locks[key]

    def lookup(self, key: str) -> Entry | None:
        """The entry, digest verified; None (and the entry dropped) when unusable."""
        if self.max_size <= 0:
            return None
        meta, tarball = self._paths(key)
        try:
            recorded = json.loads(meta.read_text())
            entry = Entry(tarball, str(recorded["digest"]), int(recorded["size"]), recorded["msg"])
            if digest_file(tarball) != entry.digest:
                raise ValueError("digest mismatch")
        except FileNotFoundError:
            self._count("miss")
            return None
        except (OSError, ValueError, KeyError, TypeError):
            self._drop(key)
            self._count("miss")
            return None
        # Its mtime is its last use: eviction goes by it.
        with contextlib.suppress(OSError):
            os.utime(meta)
        self._count("hit")
        return entry

    def put(self, key: str, artifact: Path, *, digest: str, size: int, message: str) -> None:
        """Remember `artifact` (an immutable storage file: linked, not copied)."""
        if self.max_size <= 0 or size > self.max_size:
            return
        meta, tarball = self._paths(key)
        temp = self.root / f".{key}.{secrets.token_hex(4)}.tmp"
        try:
            try:
                os.link(artifact, temp)
            except OSError:
                temp.write_bytes(artifact.read_bytes())
            os.replace(temp, tarball)
            record = {"digest": digest, "size": size, "msg": message}
            temp.write_text(json.dumps(record))
            os.replace(temp, meta)
        finally:
            temp.unlink(missing_ok=True)
        self._evict()

    def _evict(self) -> None:
        entries = []
        for meta in self.root.glob("*.json"):
            tarball = meta.with_suffix(".tar.gz")
            with contextlib.suppress(OSError):
                entries.append((meta.stat().st_mtime, meta, tarball, tarball.stat().st_size))
        total = sum(size for *_, size in entries)
        for _, meta, tarball, size in sorted(entries, key=lambda e: e[0]):
            if total <= self.max_size:
                break
            meta.unlink(missing_ok=True)
            tarball.unlink(missing_ok=True)
            total -= size

    def _drop(self, key: str) -> None:
        for path in self._paths(key):
            path.unlink(missing_ok=True)

    def _paths(self, key: str) -> tuple[Path, Path]:
        return self.root / f"{key}.json", self.root / f"{key}.tar.gz"

    def _count(self, result: str) -> None:
        if result == "hit":
            self.hits += 1
        else:
            self.misses += 1
        if self._counter is None:
            self._counter = metrics.meter("source-controller").create_counter(
                "sluice_git_artifact_cache_total",
                description="GitRepository artifacts looked up in the commit cache, by result",
            )
        self._counter.add(1, {"result": result})
