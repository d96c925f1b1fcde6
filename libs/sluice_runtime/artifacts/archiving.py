"""Deterministic tarballs: the same tree always gives the same bytes.

An artifact's digest is published in status and checked by every consumer,
and the source-controller compares it to decide whether anything changed,
so it must depend on the content alone: not on when the tree was checked
out, by whom, with which umask, or in which order the filesystem lists it.
Hence: entries sorted by name (byte order, depth first), mtime 0, uid/gid 0,
no user or group names, modes reduced to 0o644 / 0o755 (executable files and
directories), a gzip header without time or file name, and a fixed
compression level.

What goes in:

- Regular files that the `IgnoreRules` do not exclude. Ignored directories
  are not descended into.
- A directory entry for each directory that contains something included,
  before its contents; empty directories (or ones whose whole content is
  ignored) are left out, so the digest depends only on included files.
  (Flux also writes entries for empty directories and for the root; git
  checkouts have no empty directories, so the difference rarely shows.)
- Symlinks whose target exists, is a file or directory inside the tree and
  is not ignored, rewritten as the shortest relative link from the link's
  directory; the consumer's extractor can then check them without
  following anything. Other symlinks (pointing outside the tree, dangling,
  looping, or at an ignored path) are skipped silently: Flux skips every
  symlink, so a repository that has them already works without them.
- Nothing else: sockets, FIFOs and devices are skipped; hard links are
  stored as independent regular files.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sluice_runtime.artifacts.ignoring import IgnoreRules

CHUNK = 1 << 20
COMPRESS_LEVEL = 6

FILE_MODE = 0o644
EXEC_MODE = 0o755
DIR_MODE = 0o755
LINK_MODE = 0o777

DIGEST_ALGORITHMS = ("sha256", "sha384", "sha512")


@dataclass(frozen=True)
class _Entry:
    name: str  # relative POSIX path inside the archive
    kind: str  # "dir", "file" or "link"
    source: str  # absolute path on disk ("" for links)
    linkname: str = ""
    executable: bool = False


def build_tarball(src: Path, dest: Path, *, ignore: IgnoreRules | None) -> None:
    """Write a gzip tarball of the tree under `src` to `dest` (not atomically:
    `Storage.write_archive` adds that). `ignore=None` includes everything."""
    with dest.open("wb") as out:
        write_tarball(src, out, ignore=ignore)


class Sink(Protocol):
    """Where a tarball is streamed: a binary file, or a wrapper that hashes."""

    def write(self, data: bytes, /) -> object: ...
    def flush(self) -> object: ...


def write_tarball(src: Path, out: Sink, *, ignore: IgnoreRules | None) -> None:
    """Stream the gzip tarball of `src` into `out`, which is not closed."""
    root = os.path.realpath(src)
    if not os.path.isdir(root):
        raise NotADirectoryError(f"cannot archive {src}: not a directory")
    entries = _collect(root, "", ignore)
    # filename="" and mtime=0 keep the gzip header free of anything variable.
    with (
        gzip.GzipFile(
            filename="", mode="wb", fileobj=out, mtime=0, compresslevel=COMPRESS_LEVEL
        ) as compressed,
        tarfile.open(
            fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8"
        ) as tar,
    ):
        for entry in entries:
            _add(tar, entry)


def digest_file(path: Path | str, *, algorithm: str = "sha256") -> str:
    """`<algorithm>:<hex>` of the file's content, read in chunks."""
    if algorithm not in DIGEST_ALGORITHMS:
        raise ValueError(f"unsupported digest algorithm {algorithm!r}")
    hasher = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            hasher.update(chunk)
    return f"{algorithm}:{hasher.hexdigest()}"


def _collect(root: str, prefix: str, ignore: IgnoreRules | None) -> list[_Entry]:
    """Entries of the directory `root/prefix`, depth first, sorted by name."""
    directory = os.path.join(root, prefix)
    with os.scandir(directory) as it:
        children = sorted(it, key=lambda e: os.fsencode(e.name))
    entries: list[_Entry] = []
    for child in children:
        name = prefix + child.name
        info = child.stat(follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            if ignore is not None and ignore.ignored(name, is_dir=True):
                continue
            inner = _collect(root, name + "/", ignore)
            if inner:
                entries.append(_Entry(name=name, kind="dir", source=child.path))
                entries += inner
        elif stat.S_ISREG(info.st_mode):
            if ignore is not None and ignore.ignored(name, is_dir=False):
                continue
            executable = bool(info.st_mode & 0o111)
            entries.append(_Entry(name=name, kind="file", source=child.path, executable=executable))
        elif stat.S_ISLNK(info.st_mode):
            if ignore is not None and ignore.ignored(name, is_dir=False):
                continue
            linkname = _internal_link(root, directory, child.path, ignore)
            if linkname is not None:
                entries.append(_Entry(name=name, kind="link", source="", linkname=linkname))
    return entries


def _internal_link(root: str, directory: str, link: str, ignore: IgnoreRules | None) -> str | None:
    """The relative link to store for `link`, or None to leave it out."""
    target = os.path.realpath(link)
    if target == root or os.path.commonpath([root, target]) != root:
        return None
    try:
        info = os.stat(target)
    except OSError:  # dangling, or a loop
        return None
    is_dir = stat.S_ISDIR(info.st_mode)
    if not (is_dir or stat.S_ISREG(info.st_mode)):
        return None
    rel_target = os.path.relpath(target, root).replace(os.sep, "/")
    if ignore is not None and ignore.ignored(rel_target, is_dir=is_dir):
        return None
    # `directory` is a real path (the walk never passes through symlinks), so
    # the relative link resolves in the unpacked tree as it does here.
    return os.path.relpath(target, directory).replace(os.sep, "/")


def _add(tar: tarfile.TarFile, entry: _Entry) -> None:
    info = tarfile.TarInfo(entry.name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if entry.kind == "dir":
        info.type = tarfile.DIRTYPE
        info.mode = DIR_MODE
        tar.addfile(info)
    elif entry.kind == "link":
        info.type = tarfile.SYMTYPE
        info.mode = LINK_MODE
        info.linkname = entry.linkname
        tar.addfile(info)
    else:
        info.type = tarfile.REGTYPE
        info.mode = EXEC_MODE if entry.executable else FILE_MODE
        with open(entry.source, "rb") as f:
            # The size comes from the open file, so a file replaced between
            # the walk and now is archived consistently; one that shrinks
            # while being read makes tarfile fail rather than pad it.
            info.size = os.fstat(f.fileno()).st_size
            tar.addfile(info, f)
