"""The source-controller's artifact store: files under one root, served over HTTP.

Layout (the API's contract, which consumers and `status.artifact.path` rely
on): `<root>/<lowercase kind>/<namespace>/<name>/<file>`.

Readers are the file server and, through it, every consumer in the cluster,
so a file must never be seen half-written: each write goes to a temporary
file in the same directory, is fsynced and then renamed over the final name.
The `latest` link is swapped the same way. A rename is durable (its directory
fsynced) before the write returns, or, for a source's artifact, before the
`latest` link that follows it returns: one directory fsync covers both.
Temporary names start with "." and end in ".tmp"; artifact names never
start with "." (Kubernetes names cannot), so the file server refuses hidden
names and garbage collection can recognise leftovers from a crash.

Concurrency: there is no lock. One controller process writes (leader
election), and its queue hands an object to one worker at a time, so each
object directory has a single writer; readers need no lock thanks to the
renames. The only cross-object interaction, `remove_all` removing a
namespace directory just as another object's first write creates it, is
handled by retrying the directory creation.

Methods are synchronous (filesystem work); the controller calls them with
`asyncio.to_thread`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

from sluice_runtime import failpoints
from sluice_runtime.artifacts.archiving import digest_file, write_tarball
from sluice_runtime.artifacts.ignoring import IgnoreRules

FILE_MODE = 0o644
DIR_MODE = 0o755
TEMP_SUFFIX = ".tmp"

# RFC 3986 path characters that need no escaping; Flux builds artifact URLs
# without escaping, so for ordinary names ours are identical to its.
_URL_SAFE = "/:@!$&'()*+,;=-._~"


class ArtifactTooLarge(OSError):
    """A write went past its `max_size`; nothing was stored."""

    def __init__(self, rel: str, max_size: int) -> None:
        super().__init__(f"{rel}: artifact is larger than the limit of {max_size} bytes")
        self.max_size = max_size


class StoragePathError(ValueError):
    """A path or name that would leave the storage root, or is not allowed in it."""


@dataclass(frozen=True)
class ArtifactFile:
    """A file written to storage: `path` is relative to the root (the value for
    `status.artifact.path`), `digest` is `sha256:<hex>`, `size` in bytes."""

    path: str
    digest: str
    size: int


class Storage:
    def __init__(
        self,
        root: Path,
        *,
        advertised_addr: str,
        retention_records: int = 2,
        retention_ttl: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        # Everything below works on the resolved root, so a symlinked root
        # (a volume mount) does not confuse the escape checks.
        self.root = Path(os.path.realpath(root))
        self.advertised_addr = advertised_addr
        self.retention_records = retention_records
        self.retention_ttl = retention_ttl
        self._clock = clock

    # Paths and URLs

    def relative_path(self, kind: str, namespace: str, name: str, filename: str) -> str:
        for part in (kind, namespace, name, filename):
            _check_component(part)
        return f"{kind.lower()}/{namespace}/{name}/{filename}"

    def path(self, rel: str) -> Path:
        """The local path of `rel`, refusing anything that would leave the root."""
        parts = _split(rel)
        path = self.root.joinpath(*parts)
        # The lexical check above cannot see symlinked directories; the
        # store never creates any, but a tampered volume could hold some.
        parent = os.path.realpath(path.parent)
        if os.path.commonpath([self.root, parent]) != str(self.root):
            raise StoragePathError(f"{rel!r} resolves outside the storage root")
        return path

    def url(self, rel: str) -> str:
        """`http://<advertised_addr>/<rel>`; the address may carry its own scheme."""
        _split(rel)
        addr = self.advertised_addr.rstrip("/")
        base = addr if "://" in addr else f"http://{addr}"
        return f"{base}/{quote(rel, safe=_URL_SAFE)}"

    # Reading

    def exists(self, rel: str) -> bool:
        """Whether `rel` is a regular file (a `latest` link is not an artifact)."""
        try:
            return stat.S_ISREG(self.path(rel).lstat().st_mode)
        except FileNotFoundError:
            return False

    def digest(self, rel: str) -> str:
        return digest_file(self.path(rel))

    # Writing

    def write_archive(
        self,
        rel: str,
        src_dir: Path,
        ignore: IgnoreRules | None,
        *,
        max_size: int | None = None,
        linked: bool = False,
    ) -> ArtifactFile:
        """Archive `src_dir` (see `archiving`) as `rel`, atomically.

        With `max_size`, writing stops with `ArtifactTooLarge` as soon as the
        tarball grows past it, and `rel` is left as it was. `linked`: see `_write`.
        """
        return self._write(
            rel,
            lambda out: write_tarball(src_dir, out, ignore=ignore),
            max_size=max_size,
            linked=linked,
        )

    def write_bytes(self, rel: str, data: bytes) -> ArtifactFile:
        return self._write(rel, lambda out: out.write(data))

    def write_file(
        self, rel: str, src_path: Path, *, max_size: int | None = None, linked: bool = False
    ) -> ArtifactFile:
        """Copy `src_path` (an OCI layer, a Helm index) into storage as `rel`
        (`max_size` and `linked` as for `write_archive`)."""

        def copy(out: _Hashing) -> None:
            with src_path.open("rb") as src:
                while chunk := src.read(1 << 20):
                    out.write(chunk)

        return self._write(rel, copy, max_size=max_size, linked=linked)

    def set_latest(self, rel: str, link_name: str = "latest.tar.gz") -> str:
        """Point `<object dir>/<link_name>` at `rel`, atomically; return the
        link's relative path (its URL is the object's stable `status.url`)."""
        target = self.path(rel)
        _check_component(link_name)
        if link_name == target.name:
            raise StoragePathError(f"link {link_name!r} would replace its own target")
        if not stat.S_ISREG(target.lstat().st_mode):
            raise FileNotFoundError(f"{rel} is not a file in storage")
        link_rel = f"{rel.rpartition('/')[0]}/{link_name}"
        link = self.path(link_rel)
        temp = link.parent / f".{link_name}.{secrets.token_hex(8)}{TEMP_SUFFIX}"
        # A relative link in the same directory stays valid wherever the
        # volume is mounted, and the file server can check it stays inside.
        with _replacing(temp, link):
            os.symlink(target.name, temp)
        return link_rel

    # Cleaning up

    def garbage_collect(
        self, kind: str, namespace: str, name: str, *, keep: Iterable[str]
    ) -> list[str]:
        """Delete the object's old artifacts; return the deleted relative paths.

        Kept: the `keep` files (file names or relative paths), the newest
        `retention_records` files, files younger than `retention_ttl`, and
        whatever a link in the directory points to. Temporary files older
        than `retention_ttl` are leftovers of a crashed write and go too; a
        younger one could belong to a write in flight (during a leadership
        handover), so it waits for the next collection.
        """
        prefix, directory = self._object_dir(kind, namespace, name)
        try:
            listing = list(os.scandir(directory))
        except FileNotFoundError:
            return []
        now = self._clock()
        protected: set[str] = set()
        for k in keep:
            parent, _, filename = k.rpartition("/")
            if not parent or f"{parent}/" == prefix:
                protected.add(filename)
        artifacts: list[tuple[float, str]] = []
        garbage: list[str] = []
        for entry in listing:
            info = entry.stat(follow_symlinks=False)
            age = now - info.st_mtime
            if entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIX):
                if age >= self.retention_ttl:
                    garbage.append(entry.name)
            elif stat.S_ISLNK(info.st_mode):
                target = os.path.realpath(entry.path)
                if os.path.dirname(target) == str(directory):
                    protected.add(os.path.basename(target))
            elif stat.S_ISREG(info.st_mode):
                if age < self.retention_ttl:
                    protected.add(entry.name)
                artifacts.append((info.st_mtime, entry.name))
        artifacts.sort(reverse=True)
        protected.update(n for _, n in artifacts[: max(self.retention_records, 0)])
        garbage += sorted(n for _, n in artifacts if n not in protected)
        deleted: list[str] = []
        for filename in garbage:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / filename)
                deleted.append(prefix + filename)
        return deleted

    def remove_all(self, kind: str, namespace: str, name: str) -> None:
        """Delete everything stored for an object (it was deleted), and its
        namespace and kind directories if that left them empty."""
        _, directory = self._object_dir(kind, namespace, name)
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(directory)
        for parent in (directory.parent, directory.parent.parent):
            try:
                parent.rmdir()
            except OSError:  # not empty (other objects), or already gone
                break

    # Internals

    def _object_dir(self, kind: str, namespace: str, name: str) -> tuple[str, Path]:
        """("<kind>/<namespace>/<name>/", its local path)."""
        rel = self.relative_path(kind, namespace, name, "x")
        return rel[:-1], self.path(rel).parent

    def _write(
        self,
        rel: str,
        fill: Callable[[_Hashing], object],
        *,
        max_size: int | None = None,
        linked: bool = False,
    ) -> ArtifactFile:
        """Write `rel` through a temporary file, fsynced, renamed over `rel`.

        `linked`: the caller's next step is `set_latest(rel)`, before anything
        (status) names `rel`; the rename is then left to that link's directory
        fsync, which makes every entry of the directory durable, this rename
        included, so a second fsync of the same directory here adds nothing but
        a journal commit per artifact (issue 19). A crash in between leaves what
        a crash before the rename would: status naming the previous artifact,
        which is still there.
        """
        path = self.path(rel)
        fd, temp = self._temp_file(path)
        with _replacing(Path(temp), path, sync=not linked):
            with os.fdopen(fd, "wb") as raw:
                out = _Hashing(raw, rel=rel, max_size=max_size)
                fill(out)
                # Python's buffer not flushed yet: the file holds only what left it.
                failpoints.hit("storage.artifact.mid-write")
                raw.flush()
                os.fsync(raw.fileno())
            os.chmod(temp, FILE_MODE)
        return ArtifactFile(path=rel, digest=f"sha256:{out.hasher.hexdigest()}", size=out.size)

    def _temp_file(self, path: Path) -> tuple[int, str]:
        for _ in range(3):
            path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            try:
                return _mkstemp(path)
            except FileNotFoundError:
                continue  # `remove_all` of a sibling removed the namespace dir
        return _mkstemp(path)


class _Hashing:
    """Passes writes through to a file, hashing and counting them on the way,
    so an artifact's digest costs no second read."""

    def __init__(self, raw: BinaryIO, *, rel: str = "", max_size: int | None = None) -> None:
        self.raw = raw
        self.rel = rel
        self.max_size = max_size
        self.hasher = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes, /) -> int:
        self.hasher.update(data)
        self.size += len(data)
        if self.max_size is not None and self.size > self.max_size:
            # Raised from inside the stream: the tarball stops being built
            # here, and `_replacing` removes the temporary file.
            raise ArtifactTooLarge(self.rel, self.max_size)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


def _mkstemp(path: Path) -> tuple[int, str]:
    temp = str(path.parent / f".{path.name}.{secrets.token_hex(8)}{TEMP_SUFFIX}")
    return os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), temp


@contextlib.contextmanager
def _replacing(temp: Path, dest: Path, *, sync: bool = True) -> Iterator[None]:
    """The body makes `temp`; then it atomically takes `dest`'s place, durably unless
    not `sync`. On any failure `temp` is removed and `dest` is left as it was."""
    try:
        yield
        os.replace(temp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    if sync:
        _fsync_dir(dest.parent)


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable, so a node crash does not bring back
    # the old file (or no file) after the status already names the new one.
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_component(part: str) -> None:
    if not part or part in (".", "..") or any(c in part for c in "/\\\0"):
        raise StoragePathError(f"{part!r} is not a valid path component")
    if part.startswith("."):
        raise StoragePathError(f"{part!r}: names starting with '.' are reserved for temp files")


def _split(rel: str) -> list[str]:
    if not rel or rel.startswith("/"):
        raise StoragePathError(f"{rel!r} is not a relative storage path")
    parts = rel.split("/")
    for part in parts:
        _check_component(part)
    return parts
