"""Getting an artifact from the source-controller: download, verify, unpack.

Every consumer (kustomize, helm, the CLI) trusts an artifact only as far as
its digest: the file is downloaded to a temporary file, its digest is
compared with `status.artifact.digest`, and nothing is unpacked unless they
match. Unpacking then treats the tarball as hostile anyway (a compromised
store, or a source whose content an attacker controls): members may only
create regular files, directories and symlinks that stay inside the
destination. The whole archive is checked before anything is written, so a
refused archive leaves the destination untouched.

Limits: `max_size` bounds the download, the sum of the unpacked file sizes,
and (doubled, plus 1 MiB for headers) the decompressed tar stream, so a
gzip bomb stops after a bounded amount of work. `max_members` bounds the
number of entries: the check keeps one record per entry, and a few MiB of
empty files can hold millions of them. The tarball is read as a stream and
tarfile's own list of members is dropped as it goes, so memory grows with
the entries kept (at most `max_members`), never with the archive.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import hmac
import os
import re
import stat
import tarfile
import tempfile
import zlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

import aiohttp

from sluice_runtime import lanes
from sluice_runtime.describing import describe_http_status

MiB = 1 << 20
DEFAULT_MAX_SIZE = 100 * MiB
DEFAULT_MAX_MEMBERS = 100_000
"""Entries of one artifact; far above any repository of manifests (a Linux
kernel checkout has under 90k files), far below what exhausts memory."""
DEFAULT_TIMEOUT = 120.0

_DIGEST = re.compile(r"^(sha256|sha384|sha512):([0-9a-f]+)$")
_HEX_LENGTH = {"sha256": 64, "sha384": 96, "sha512": 128}
_MAX_LINK_FOLLOWS = 40  # as Linux's limit on symlinks in one lookup


class ArtifactError(Exception):
    """Any reason an artifact cannot be used; consumers catch this one."""


class ArtifactFetchError(ArtifactError):
    """The artifact could not be downloaded (HTTP status, connection, timeout, size)."""

    def __init__(self, url: str, message: str, *, status: int | None = None) -> None:
        super().__init__(f"fetching {url}: {message}")
        self.url = url
        self.status = status


class ArtifactDigestMismatch(ArtifactError):
    """The downloaded file is not the artifact the status announced."""

    def __init__(self, expected: str, actual: str) -> None:
        super().__init__(f"artifact digest mismatch: expected {expected}, got {actual}")
        self.expected = expected
        self.actual = actual


class UnsafeArchive(ArtifactError):
    """The tarball would write outside the destination, or is not one we unpack.

    `member` is the offending entry's name ("" when the archive as a whole is
    refused: not a gzip tar, or too big).
    """

    def __init__(self, member: str, reason: str) -> None:
        super().__init__(f"unsafe archive member {member!r}: {reason}" if member else reason)
        self.member = member
        self.reason = reason


async def fetch_artifact(
    session: aiohttp.ClientSession,
    *,
    url: str,
    digest: str,
    dest: Path,
    max_size: int = DEFAULT_MAX_SIZE,
    max_members: int = DEFAULT_MAX_MEMBERS,
    timeout: float = DEFAULT_TIMEOUT,
) -> None:
    """Download the artifact at `url`, check it against `digest`
    (`sha256:<hex>`, or sha384/sha512) and unpack it into `dest`, which must
    not exist or be an empty directory.

    Raises `ArtifactFetchError`, `ArtifactDigestMismatch` or `UnsafeArchive`;
    `ValueError` for a malformed `digest`.
    """
    algorithm, expected_hex = parse_digest(digest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Next to the destination: on the same volume, and inside whatever work
    # directory the caller removes, should this process die mid-download.
    fd, download = tempfile.mkstemp(prefix=".artifact-", suffix=".tar.gz", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            actual_hex = await _download(
                session, url=url, out=out, algorithm=algorithm, max_size=max_size, timeout=timeout
            )
        if not hmac.compare_digest(actual_hex, expected_hex):
            raise ArtifactDigestMismatch(digest, f"{algorithm}:{actual_hex}")
        await lanes.to_thread(
            extract_tarball, Path(download), dest, max_size=max_size, max_members=max_members
        )
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(download)


def parse_digest(digest: str) -> tuple[str, str]:
    """`sha256:<hex>` → ("sha256", "<hex>"), refusing anything malformed."""
    match = _DIGEST.match(digest)
    if not match or len(match[2]) != _HEX_LENGTH[match[1]]:
        raise ValueError(f"invalid artifact digest {digest!r}: want sha256:<64 hex digits>")
    return match[1], match[2]


async def _download(
    session: aiohttp.ClientSession,
    *,
    url: str,
    out: IO[bytes],
    algorithm: str,
    max_size: int,
    timeout: float,
) -> str:
    hasher = hashlib.new(algorithm)
    size = 0
    try:
        async with session.get(
            url,
            timeout=aiohttp.ClientTimeout(total=timeout),
            # The digest is over the stored bytes: a transparently
            # decompressed body would never match.
            headers={"Accept-Encoding": "identity", **lanes.request_headers()},
            auto_decompress=False,
        ) as response:
            if response.status != 200:
                raise ArtifactFetchError(
                    url, describe_http_status(response.status),
                    status=response.status,
                )  # fmt: skip
            if response.content_length is not None and response.content_length > max_size:
                raise ArtifactFetchError(
                    url, f"artifact is {response.content_length} bytes, limit is {max_size}"
                )
            async for chunk in response.content.iter_chunked(256 * 1024):
                size += len(chunk)
                if size > max_size:
                    raise ArtifactFetchError(url, f"artifact exceeds the limit of {max_size} bytes")
                hasher.update(chunk)
                await lanes.to_thread(out.write, chunk)
    except (aiohttp.ClientError, TimeoutError) as error:
        raise ArtifactFetchError(url, str(error) or type(error).__name__) from error
    return hasher.hexdigest()


# Unpacking


@dataclass(frozen=True)
class _Member:
    parts: tuple[str, ...]
    info: tarfile.TarInfo

    @property
    def name(self) -> str:
        return "/".join(self.parts)


def extract_tarball(
    path: Path,
    dest: Path,
    *,
    max_size: int = DEFAULT_MAX_SIZE,
    max_members: int = DEFAULT_MAX_MEMBERS,
) -> None:
    """Unpack the gzip tarball at `path` into `dest` (absent or an empty directory).

    Every member is checked first; `UnsafeArchive` means nothing was written.
    Only regular files (mode 0o644, or 0o755 if executable), directories
    (0o755) and symlinks that resolve inside `dest` are created; owners and
    times are not restored. Hard links, devices and FIFOs are refused, as are
    absolute names, `..` components, members below a symlink or a file,
    duplicate names, and symlinks that leave `dest` (even through other
    symlinks of the archive) or loop; so is an archive of more than
    `max_members` entries.
    """
    if dest.exists() and (not dest.is_dir() or dest.is_symlink() or any(dest.iterdir())):
        raise FileExistsError(f"cannot unpack into {dest}: not an empty directory")
    members = _check(path, dest, max_size=max_size, max_members=max_members)
    dest.mkdir(parents=True, exist_ok=True)
    _write(path, dest, members, max_size=max_size)


def _check(
    path: Path, dest: Path, *, max_size: int, max_members: int
) -> dict[tuple[str, ...], _Member]:
    members: dict[tuple[str, ...], _Member] = {}
    kinds: dict[tuple[str, ...], str] = {}  # "dir" (also implied ones), "file" or "link"
    total = 0
    count = 0
    with _open(path, max_size=max_size) as tar:
        for info in _stream(tar):
            count += 1
            if count > max_members:
                raise UnsafeArchive("", f"archive has more than the limit of {max_members} entries")
            _check_member(info, dest, members, kinds)
            if info.isreg():
                total += info.size
                if total > max_size:
                    raise UnsafeArchive(
                        info.name, f"unpacked size exceeds the limit of {max_size} bytes"
                    )
    links = {parts: m.info.linkname for parts, m in members.items() if m.info.issym()}
    for parts, linkname in links.items():
        reason = _link_escapes(links, parts, linkname)
        if reason:
            raise UnsafeArchive("/".join(parts), reason)
    return members


def _check_member(
    info: tarfile.TarInfo,
    dest: Path,
    members: dict[tuple[str, ...], _Member],
    kinds: dict[tuple[str, ...], str],
) -> None:
    parts = _parts(info)
    if not parts:
        if not info.isdir():
            raise UnsafeArchive(info.name, "the archive root must be a directory")
        return
    name = "/".join(parts)
    if info.islnk():
        raise UnsafeArchive(name, "hard links are not allowed")
    if info.issparse() or not (info.isreg() or info.isdir() or info.issym()):
        raise UnsafeArchive(name, "only files, directories and symlinks are allowed")
    # The standard library's own judgement, on top of ours.
    try:
        tarfile.data_filter(info, str(dest))
    except tarfile.FilterError as error:
        raise UnsafeArchive(name, str(error)) from None
    for depth in range(1, len(parts)):
        above = kinds.setdefault(parts[:depth], "dir")
        if above != "dir":
            raise UnsafeArchive(name, f"is below a {above} of the archive")
    kind = "dir" if info.isdir() else "link" if info.issym() else "file"
    if parts in kinds and not (kind == "dir" == kinds[parts]):
        raise UnsafeArchive(name, "duplicate or conflicting entry")
    kinds[parts] = kind
    members[parts] = _Member(parts, info)


def _write(
    path: Path, dest: Path, members: dict[tuple[str, ...], _Member], *, max_size: int
) -> None:
    with _open(path, max_size=max_size) as tar:
        for info in _stream(tar):
            parts = _parts(info)
            member = members.get(parts)
            if member is None:
                continue  # the root entry
            if member.info.type != info.type or member.info.size != info.size:
                raise UnsafeArchive(member.name, "archive changed while being unpacked")
            parent = _mkdirs(dest, parts[:-1])
            target = os.path.join(parent, parts[-1])
            if info.isdir():
                _mkdirs(dest, parts)
            elif info.issym():
                os.symlink(member.info.linkname, target)
            else:
                source = tar.extractfile(info)
                assert source is not None  # a regular file always has data
                mode = 0o755 if info.mode & 0o111 else 0o644
                # O_EXCL | O_NOFOLLOW: never write through anything already
                # there, least of all a symlink an earlier member created.
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
                with os.fdopen(fd, "wb") as out:
                    while chunk := source.read(MiB):
                        out.write(chunk)


def _stream(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The members of a stream-mode `tar`, one at a time.

    tarfile appends every member it reads to `tar.members`, even in stream
    mode, so iterating it holds the whole index in memory; dropping each one
    after use keeps memory flat however many entries the archive has.
    """
    while (info := tar.next()) is not None:
        tar.members.clear()  # type: ignore[attr-defined]  # set in __init__, not in typeshed
        yield info


def _mkdirs(dest: Path, parts: tuple[str, ...]) -> str:
    """Create `dest/parts...` one level at a time, refusing to pass through
    anything but real directories."""
    current = str(dest)
    for part in parts:
        current = os.path.join(current, part)
        try:
            os.mkdir(current, 0o755)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(current).st_mode):
                raise UnsafeArchive(current, "path component is not a directory") from None
    return current


def _parts(info: tarfile.TarInfo) -> tuple[str, ...]:
    name = info.name
    if "\0" in name:
        raise UnsafeArchive(name, "NUL in name")
    if name.startswith("/"):
        raise UnsafeArchive(name, "absolute path")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise UnsafeArchive(name, "'..' in path")
    return parts


def _link_escapes(
    links: dict[tuple[str, ...], str], link: tuple[str, ...], linkname: str
) -> str | None:
    """Resolve `link` the way the kernel will once everything is unpacked,
    following the archive's own symlinks; say why it is unsafe, or None.

    Checking the link text alone is not enough: with `d/up -> ..`, the link
    `x -> d/up/..` looks like `d` but resolves to the parent of `dest`.
    """
    if not linkname or linkname.startswith("/") or "\0" in linkname:
        return "symlink target is absolute or empty"
    position = list(link[:-1])  # real directories: members never sit below a link
    pending = deque(linkname.split("/"))
    follows = 0
    while pending:
        part = pending.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            if not position:
                return "symlink resolves outside the destination"
            position.pop()
            continue
        position.append(part)
        target = links.get(tuple(position))
        if target is not None:
            follows += 1
            if follows > _MAX_LINK_FOLLOWS:
                return "symlink loop"
            if target.startswith("/"):
                return "symlink resolves outside the destination"
            position.pop()
            pending.extendleft(reversed(target.split("/")))
    return None


@contextlib.contextmanager
def _open(path: Path, *, max_size: int) -> Iterator[tarfile.TarFile]:
    limit = 2 * max_size + MiB
    with path.open("rb") as raw:
        if raw.read(2) != b"\x1f\x8b":
            raise UnsafeArchive("", "not a gzip-compressed tarball")
        raw.seek(0)
        with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
            bounded = _Bounded(unzipped, limit)
            try:
                with tarfile.open(fileobj=bounded, mode="r|") as tar:  # type: ignore[call-overload]
                    yield tar
            except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:
                raise UnsafeArchive("", f"not a valid gzip tarball: {error}") from None


class _Readable(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


class _Bounded:
    """A read-only stream that refuses to yield more than `limit` bytes."""

    def __init__(self, f: _Readable, limit: int) -> None:
        self._f = f
        self._left = limit

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n if n >= 0 else self._left + 1)
        self._left -= len(data)
        if self._left < 0:
            raise UnsafeArchive("", "decompressed archive exceeds the size limit")
        return data
