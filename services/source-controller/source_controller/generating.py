"""The copy operations of an ArtifactGenerator: files of source trees into a staging tree.

Flux's source-watcher semantics, which users' generators are written for:

- `from: "@alias/<pattern>"` without glob characters names one file or
  directory, copied like `cp -r`: a directory lands as `<to>/<its name>/`,
  a file as `<to>` itself unless `to` ends with `/` or is an existing
  directory.
- A glob is matched as Go's `fs.Glob` matches: segment by segment, `*` never
  crossing `/`, and `**` no more than `*` (so `dir/**` selects the entries
  of `dir`, each then copied whole: the whole tree). A pattern ending in
  `/**` drops that directory prefix from the destination; other matches keep
  their full path under `to`.
- `exclude` patterns are doublestar globs (`**` crosses directories), tried
  against the path in the source and relative to the pattern's literal
  prefix; one without `/` also against the file name.
- `strategy: Merge` merges a YAML file into an existing one as Helm merges
  values; `Extract` unpacks the matched `.tar.gz`/`.tgz` files into `to`
  (with doublestar matching).
- Later operations overwrite earlier files.

Patterns come from tenants: they are matched with RE2 (linear time), and a
destination may never leave the staging tree. Symlinks of a source tree
(which the extractor kept only when they resolve inside it) are copied as
the files they point to; symlinked directories are not followed.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import yaml

from sluice_runtime import yamlloading
from sluice_runtime.artifacts.fetching import ArtifactError, extract_tarball
from sluice_runtime.helming import merge_values
from source_controller.globbing import CopyError as CopyError
from source_controller.globbing import (
    Excluder,
    check_pattern,
    doublestar_glob,
    go_glob,
    has_glob,
    is_tarball,
    literal_root,
)


@dataclass(frozen=True)
class Operation:
    """One copy operation, as in the spec."""

    source: str
    to: str
    exclude: tuple[str, ...] = ()
    strategy: str = "Overwrite"
    optional: bool = False


@dataclass
class Budget:
    """How much a generated artifact may hold before copying stops."""

    max_size: int
    max_files: int
    size: int = 0
    files: int = 0

    def spend(self, size: int) -> None:
        self.size += size
        self.files += 1
        if self.size > self.max_size:
            raise CopyError(f"the artifact is larger than {self.max_size} bytes")
        if self.files > self.max_files:
            raise CopyError(f"the artifact has more than {self.max_files} files")


def parse_source(source: str) -> tuple[str, str]:
    """`@alias/pattern` → (alias, pattern)."""
    if not source.startswith("@") or "/" not in source:
        raise CopyError(f"source '{source}' is not of the form '@alias/pattern'")
    alias, pattern = source[1:].split("/", 1)
    return alias, pattern


def parse_destination(to: str) -> str:
    """`@artifact/path` → the relative path ('.' for the root); never outside it."""
    if not to.startswith("@artifact/"):
        raise CopyError(f"destination '{to}' must start with '@artifact/'")
    rel = to.removeprefix("@artifact/")
    if not rel:
        return "."
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if rel.startswith("/") or ".." in parts or "\\" in rel or "\x00" in rel:
        raise CopyError(f"destination '{to}' must stay within the artifact")
    return "/".join(parts) or "."


@dataclass
class Copier:
    """Applies copy operations from source trees (by alias) into `staging`."""

    sources: dict[str, Path]
    staging: Path
    budget: Budget

    def apply(self, operation: Operation) -> None:
        try:
            self._apply(operation)
        except CopyError as error:
            raise CopyError(
                f"copy from '{operation.source}' to '{operation.to}': {error}"
            ) from None

    def _apply(self, op: Operation) -> None:
        alias, pattern = parse_source(op.source)
        check_pattern(pattern, "pattern")
        dest = parse_destination(op.to)
        root = self.sources.get(alias)
        if root is None:
            raise CopyError(f"source alias '{alias}' is not in spec.sources")
        excluder = Excluder(op.exclude)
        if not has_glob(pattern):
            self._single(op, root, pattern, dest, excluder)
            return
        if op.strategy == "Extract":
            matches = doublestar_glob(root, pattern)
        else:
            matches = go_glob(root, pattern)
        if not matches:
            if op.optional:
                return
            raise CopyError(f"no files match pattern '{pattern}' in source '{alias}'")
        base = literal_root(pattern)
        kept = [m for m in matches if m not in (".", "..") and not excluder.excluded(m, base)]
        if not kept:
            if op.optional:
                return
            raise CopyError(f"all files matching '{pattern}' in source '{alias}' were excluded")
        for match in kept:
            if op.strategy == "Extract":
                if is_tarball(match) and (root / match).is_file():
                    self._extract(root / match, dest)
                continue
            self._copy(op, root, match, _glob_destination(pattern, match, dest), excluder, base)

    def _single(self, op: Operation, root: Path, path: str, dest: str, excluder: Excluder) -> None:
        path = posixpath.normpath(path)
        if path.startswith("..") or path.startswith("/"):
            raise CopyError(f"source path '{path}' leaves the source")
        source = root / path
        if not os.path.lexists(source):
            if op.optional:
                return
            raise CopyError(f"source '{path}' does not exist")
        if source.is_dir() and not source.is_symlink():
            if op.strategy == "Extract":
                raise CopyError(f"the Extract strategy needs a tarball, '{path}' is a directory")
            target = posixpath.join(dest, posixpath.basename(path))
            self._copy_dir(op, root, path, target, excluder, path)
            return
        if excluder.excluded(path, "."):
            return
        if op.strategy == "Extract":
            if not is_tarball(path):
                raise CopyError(f"the Extract strategy needs a .tar.gz or .tgz file, got '{path}'")
            self._extract(source, dest)
            return
        if op.to.endswith("/") or (self.staging / dest).is_dir():
            dest = posixpath.join(dest, posixpath.basename(path))
        self._copy_file(op, root / path, dest)

    def _copy(
        self, op: Operation, root: Path, path: str, dest: str, excluder: Excluder, base: str
    ) -> None:
        source = root / path
        if source.is_dir() and not source.is_symlink():
            self._copy_dir(op, root, path, dest, excluder, base)
        elif source.is_file():
            self._copy_file(op, source, dest)

    def _copy_dir(
        self, op: Operation, root: Path, path: str, dest: str, excluder: Excluder, base: str
    ) -> None:
        self._target(dest).mkdir(parents=True, exist_ok=True)
        for directory, dirs, files in os.walk(root / path):
            rel_dir = Path(directory).relative_to(root).as_posix()
            keep = []
            for name in sorted(dirs):
                rel = _join(rel_dir, name)
                if (Path(directory) / name).is_symlink() or excluder.excluded(rel, base):
                    continue
                keep.append(name)
                self._target(_under(dest, path, rel)).mkdir(parents=True, exist_ok=True)
            dirs[:] = keep
            for name in sorted(files):
                rel = _join(rel_dir, name)
                if excluder.excluded(rel, base) or not (Path(directory) / name).is_file():
                    continue
                self._copy_file(op, Path(directory) / name, _under(dest, path, rel))

    def _copy_file(self, op: Operation, source: Path, dest: str) -> None:
        target = self._target(dest)
        if target.is_dir():
            raise CopyError(f"'{dest}' is a directory in the artifact")
        target.parent.mkdir(parents=True, exist_ok=True)
        if op.strategy == "Merge" and target.is_file():
            merged = merge_yaml(target.read_bytes(), source.read_bytes(), what=dest)
            self.budget.spend(len(merged))
            target.write_bytes(merged)
            return
        self.budget.spend(source.stat().st_size)
        shutil.copyfile(source, target)

    def _extract(self, tarball: Path, dest: str) -> None:
        with tempfile.TemporaryDirectory(dir=self.staging.parent) as work:
            unpacked = Path(work) / "x"
            try:
                extract_tarball(
                    tarball,
                    unpacked,
                    max_size=self.budget.max_size - self.budget.size,
                    max_members=self.budget.max_files - self.budget.files,
                )
            except (ArtifactError, OSError) as error:
                raise CopyError(f"cannot extract '{tarball.name}': {error}") from None
            op = Operation(source="", to="")
            self._copy_dir(op, unpacked, ".", dest, Excluder(()), ".")

    def _target(self, dest: str) -> Path:
        target = (self.staging / dest).resolve()
        staging = self.staging.resolve()
        if target != staging and staging not in target.parents:
            raise CopyError(f"destination '{dest}' leaves the artifact")
        return target


def _join(directory: str, name: str) -> str:
    return name if directory in (".", "") else f"{directory}/{name}"


def _under(dest: str, path: str, rel: str) -> str:
    """Where `rel` (below the copied directory `path`) lands under `dest`."""
    inner = rel if path in (".", "") else posixpath.relpath(rel, path)
    return posixpath.normpath(posixpath.join(dest, inner))


def _glob_destination(pattern: str, match: str, dest: str) -> str:
    if pattern.endswith("/**"):
        prefix = pattern.removesuffix("/**")
        if match.startswith(prefix + "/"):
            return posixpath.normpath(posixpath.join(dest, match.removeprefix(prefix + "/")))
    return posixpath.normpath(posixpath.join(dest, match))


def merge_yaml(base: bytes, override: bytes, *, what: str) -> bytes:
    """`override` merged into `base` as Helm merges values files: maps recursively."""
    try:
        old = yamlloading.load(base, limits=yamlloading.VALUES_LIMITS) or {}
        new = yamlloading.load(override, limits=yamlloading.VALUES_LIMITS) or {}
    except yamlloading.YAMLError as error:
        raise CopyError(f"cannot merge '{what}': not YAML ({error})") from None
    if not isinstance(old, dict) or not isinstance(new, dict):
        raise CopyError(f"cannot merge '{what}': both files must hold a YAML map")
    return yaml.safe_dump(merge_values(old, new), sort_keys=True).encode()


def content_hash(root: Path, prefix: str) -> str:
    """Flux's file name for a generated artifact: golang.org/x/mod's dirhash over
    `<prefix>/<path>` names with Adler-32 (per file, then over the lines), in decimal."""
    names = []
    for directory, _, files in os.walk(root):
        for name in files:
            path = Path(directory) / name
            names.append((f"{prefix}/{path.relative_to(root).as_posix()}", path))
    total = zlib.adler32(b"")
    for name, path in sorted(names):
        if "\n" in name:
            raise CopyError("file names with newlines are not supported")
        line = f"{zlib.adler32(path.read_bytes()):x}  {name}\n".encode()
        total = zlib.adler32(line, total)
    return str(total)
