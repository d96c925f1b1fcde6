"""Keeping the build inside the artifact: every path a kustomization file makes
kustomize read is checked before the build, so that a reference leaving the
artifact or a remote base gets a precise message rather than kustomize's
"permission denied"; and the files SOPS must decrypt are found the same way.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sluice_runtime.building.manifests import ManifestLoader, yaml_problem
from sluice_runtime.building.tools import BuildError, Sandbox

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
"""The names kustomize recognizes, in the order it looks for them."""


def kustomization_file(directory: Path) -> Path | None:
    """The kustomization file kustomize would read in `directory`, if any."""
    for name in KUSTOMIZATION_FILES:
        candidate = directory / name
        if candidate.is_file():
            return candidate
    return None


def relative(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix() or "."
    except ValueError:
        return path.name


MAX_KUSTOMIZATION_FILE = 4 << 20
"""Bytes a kustomization file may have; it is parsed twice in this process before the build."""


@dataclass(frozen=True, slots=True)
class Reference:
    """One path a kustomization file makes kustomize read, as kustomize will read it."""

    field: str
    """The kustomization field it is listed in (`resources`, `secretGenerator`, ...)."""
    path: str
    inline: bool = False
    """It may be an inline document rather than a path (a multi-line plugin config or patch)."""


@dataclass(frozen=True, slots=True)
class KustomizationFile:
    """A kustomization file as read before the build: its values, and every path it names."""

    document: dict[str, Any]
    references: tuple[Reference, ...]


def read_kustomization(root: Path, kfile: Path) -> KustomizationFile:
    """Read `kfile` strictly enough that its paths are the ones kustomize will read.

    kustomize decodes the file with Go's YAML and JSON libraries, which differ
    from PyYAML where it matters here: `!!binary` is decoded into the string a
    path is read from; keys match fields case-insensitively, with Unicode
    folding (U+017F, the long s, then "ecretGenerator" is `secretGenerator`);
    merge keys and aliases copy entries where no key names them. So every tag,
    alias and merge key is refused, a key spelled like a path field in another
    case is refused, and every path entry must be a one-line string without
    control characters or surrounding spaces (kustomize cleans a newline in a
    path like any other character: `x\\n/../../token` leaves the artifact).
    """
    name = relative(root, kfile)
    if not Path(os.path.realpath(kfile)).is_relative_to(root):
        raise BuildError(f"'{name}' points outside the artifact")
    data = kfile.read_bytes()
    if len(data) > MAX_KUSTOMIZATION_FILE:
        raise BuildError(
            f"{name}: kustomization files over {MAX_KUSTOMIZATION_FILE >> 20} MiB are refused"
        )
    try:
        _refuse_tags_and_aliases(data, name)
        loader = ManifestLoader(data)
        try:
            node = loader.get_single_node()
            if node is None:
                return KustomizationFile({}, ())
            if not isinstance(node, yaml.MappingNode):
                raise BuildError(f"kustomize build failed: {name} is not a mapping")
            # Before constructing: the constructor flattens merge keys in the node itself.
            references = tuple(_references(node, name))
            document = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as error:
        raise BuildError(f"kustomize build failed: {name}: {yaml_problem(error)}") from None
    return KustomizationFile(document, references)


def _refuse_tags_and_aliases(data: bytes, name: str) -> None:
    for event in yaml.parse(data, Loader=ManifestLoader):
        line = event.start_mark.line + 1 if event.start_mark is not None else 0
        if isinstance(event, yaml.AliasEvent):
            raise BuildError(
                f"{name}: line {line}: aliases (*{event.anchor}) are refused in kustomization "
                "files: write the entries out"
            )
        tag = getattr(event, "tag", None)
        if tag is not None:
            raise BuildError(
                f"{name}: line {line}: YAML tags ({tag}) are refused in kustomization files"
            )


_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_GIT_SHORTHAND = re.compile(r"^(?:git@|git::|gh:)")
_REMOTE_QUERY = re.compile(r"[?&](?:ref|version|submodules|timeout)=")
_HOST_PREFIX = re.compile(r"^[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+(?::\d+)?/")


def is_remote(entry: str) -> bool:
    """Whether `entry` looks like something kustomize fetches (a URL or a git repository).

    kustomize tries an entry as a local path first, so callers ask this only
    of entries that name nothing in the artifact.
    """
    return bool(
        _SCHEME.match(entry)
        or _GIT_SHORTHAND.match(entry)
        or _REMOTE_QUERY.search(entry)
        or _HOST_PREFIX.match(entry)
    )


def within(path: str, root: Path) -> bool:
    top = str(root)
    return path == top or path.startswith(top.rstrip(os.sep) + os.sep)


def resolve(root: Path, base: Path, entry: str, where: str) -> tuple[str, bool]:
    """Where kustomize reads `entry` listed in a kustomization in `base`, and whether
    something is there; refuses what leaves the artifact.

    kustomize joins the entry onto its (symlink-free) base and cleans the
    result lexically, as Go's filepath.Join does, before the system follows
    any symlink in it: `link/../../x` is `../x` whatever `link` points at.
    So the lexical path must stay inside, and so must the file it opens.
    """
    if "\0" in entry:
        raise BuildError(f"{where}: an entry contains a NUL character")
    if entry.startswith("file:"):
        raise BuildError(f"{where}: '{entry}': file URLs are not allowed")
    if os.path.isabs(entry):
        raise BuildError(f"{where}: '{entry}' is an absolute path outside the artifact")
    lexical = os.path.normpath(os.path.join(base, entry))
    if not within(lexical, root):
        raise BuildError(f"{where}: '{_shown(entry)}' points outside the artifact")
    exists = os.path.lexists(lexical)
    if exists and not within(os.path.realpath(lexical), root):
        raise BuildError(f"{where}: '{_shown(entry)}' points outside the artifact")
    return lexical, exists


def inside(root: Path, base: Path, entry: str, where: str) -> Path:
    """The file or directory a local `entry` names, inside the artifact (see `resolve`)."""
    lexical, _ = resolve(root, base, entry, where)
    return Path(os.path.realpath(lexical))


def _shown(entry: str) -> str:
    shown = entry.encode("unicode_escape").decode("ascii")
    return shown if len(shown) <= 200 else shown[:200] + "…"


_PLUGIN_FIELDS = ("generators", "transformers", "validators")
"""Fields whose entries are plugin configs (inline or by file) that kustomize runs."""
_DIRECTORY_FIELDS = ("resources", "bases", "components", *_PLUGIN_FIELDS)
_LIST_FIELDS = (*_DIRECTORY_FIELDS, "crds", "configurations", "patchesStrategicMerge")
_INLINE_FIELDS = ("patchesStrategicMerge", *_PLUGIN_FIELDS)
"""Fields whose entries may be inline documents instead of paths."""
_PATH_ITEM_FIELDS = ("patches", "patchesJson6902", "replacements")
_GENERATOR_FIELDS = ("configMapGenerator", "secretGenerator")
_GENERATOR_KEYS = ("files", "envs", "env")
_TOP_FIELDS = (*_LIST_FIELDS, *_PATH_ITEM_FIELDS, *_GENERATOR_FIELDS, "openapi")
_STR = "tag:yaml.org,2002:str"


def _fields(node: yaml.Node, known: tuple[str, ...], where: str) -> Iterator[tuple[str, yaml.Node]]:
    """The (field, value) pairs of a mapping node whose key kustomize reads as one of `known`.

    Go's JSON decoder matches keys case-insensitively, so a key that folds
    to a known field but is spelled otherwise is refused rather than missed.
    """
    if not isinstance(node, yaml.MappingNode):
        return
    folded = {field.casefold(): field for field in known}
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode):
            continue
        if key.value == "<<":
            raise BuildError(
                f"{where}: line {key.start_mark.line + 1}: merge keys (<<) are refused in "
                "kustomization files: write the entries out"
            )
        if key.value in known:
            yield key.value, value
        elif key.value.casefold() in folded:
            field = folded[key.value.casefold()]
            raise BuildError(
                f"{where}: '{_shown(key.value)}': kustomize reads this key as '{field}' "
                f"(keys match case-insensitively); spell it '{field}'"
            )


def _items(node: yaml.Node) -> list[yaml.Node]:
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _entry(node: yaml.Node, where: str, *, inline: bool) -> tuple[str, bool]:
    """The string of a path entry, refused unless kustomize reads it as this process does."""
    line = node.start_mark.line + 1
    if not isinstance(node, yaml.ScalarNode) or node.tag != _STR:
        raise BuildError(f"{where}: line {line}: entries must be strings")
    value = str(node.value)
    if inline and ("\n" in value or node.style in ("|", ">")):
        return value, True  # an inline document; still judged as the path kustomize tries first
    if node.style in ("|", ">") or node.start_mark.line != node.end_mark.line:
        raise BuildError(f"{where}: line {line}: a path must be written on one line")
    if any(unicodedata.category(c)[0] in "CZ" and c != " " for c in value):
        raise BuildError(
            f"{where}: line {line}: '{_shown(value)}' contains a control or separator character"
        )
    if value != value.strip(" "):
        raise BuildError(f"{where}: line {line}: '{_shown(value)}' has leading or trailing spaces")
    return value, False


def _references(document: yaml.MappingNode, name: str) -> Iterator[Reference]:
    """Every path the kustomization `document` makes kustomize read."""
    for field, value in _fields(document, _TOP_FIELDS, name):
        where = f"{name} {field}"
        if field in _LIST_FIELDS:
            for item in _items(value):
                path, inline = _entry(item, where, inline=field in _INLINE_FIELDS)
                yield Reference(field, path, inline)
        elif field in _PATH_ITEM_FIELDS:
            for item in _items(value):
                for _, path_node in _fields(item, ("path",), where):
                    yield Reference(field, _entry(path_node, where, inline=False)[0])
        elif field in _GENERATOR_FIELDS:
            for generator in _items(value):
                for key, sources in _fields(generator, _GENERATOR_KEYS, where):
                    for source in [sources] if key == "env" else _items(sources):
                        path = _entry(source, f"{where} {key}", inline=False)[0]
                        if key == "files" and "=" in path:
                            # `key=path` names the data key after something other than the file.
                            path = path.split("=", 1)[1]
                        yield Reference(field, path)
        else:  # openapi
            for _, path_node in _fields(value, ("path",), where):
                yield Reference(field, _entry(path_node, where, inline=False)[0])


def walk(
    root: Path,
    directory: Path,
    visit: Callable[[Path, Path, KustomizationFile], Iterable[Path]],
) -> None:
    """Call `visit(directory, kustomization file, its contents)` on every kustomization
    reachable from `directory`, once each, depth first; `visit` returns the
    directories its document references, to be visited next. A directory without
    a kustomization file is passed over: kustomize reports it."""
    pending = [directory]
    seen: set[Path] = set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        kfile = kustomization_file(current)
        if kfile is not None:
            pending.extend(visit(current, kfile, read_kustomization(root, kfile)))


def check_references(
    root: Path,
    directory: Path,
    *,
    allow_remote_bases: bool,
    refusing_plugins: Sandbox | None = None,
) -> None:
    """Refuse references that leave the artifact, and remote ones unless allowed.

    Follows every kustomization reachable from `directory`, so a base or
    component several levels down is held to the same rules; kustomization
    files the build never reads are not judged. With `refusing_plugins` (a
    sandbox that does not confine both files and TCP), any plugin config is
    refused: its fields are kustomize's to interpret, and only confinement
    keeps them in bounds.
    """

    def check(current: Path, kfile: Path, read: KustomizationFile) -> list[Path]:
        name = relative(root, kfile)
        follow = []
        for ref in read.references:
            where = f"{name} {ref.field}"
            if refusing_plugins is not None and ref.field in _PLUGIN_FIELDS:
                raise BuildError(
                    f"{where}: plugin configs are refused because builds "
                    f"cannot be confined here ({refusing_plugins.describe()})"
                )
            lexical, exists = resolve(root, current, ref.path, where)
            if not exists and not ref.inline and is_remote(ref.path):
                if not allow_remote_bases:
                    raise BuildError(
                        f"{where}: remote reference '{_shown(ref.path)}' is not allowed; "
                        "only files inside the artifact can be built"
                    )
                continue
            # Only what exists is looked at: an inline document is no file name (and
            # may be longer than one may be).
            if exists and ref.field in _DIRECTORY_FIELDS:
                target = Path(os.path.realpath(lexical))
                if target.is_dir():
                    follow.append(target)
        return follow

    walk(root, directory, check)


_DECRYPTED_FIELDS = ("resources", "bases", *_GENERATOR_FIELDS)
"""Where Flux decrypts: Secret manifests among the resources, secretGenerator inputs
(configMapGenerator inputs too, as the same files may feed both)."""


def decryptable_files(root: Path, directory: Path) -> list[Path]:
    """Every local file that a resources or generator entry reachable from `directory` reads.

    Runs after the reference check, so every path is inside `root`.
    """
    files: list[Path] = []

    def collect(current: Path, kfile: Path, read: KustomizationFile) -> list[Path]:
        follow = []
        for ref in read.references:
            lexical, exists = resolve(root, current, ref.path, ref.field)
            if not exists:
                continue
            target = Path(os.path.realpath(lexical))
            if ref.field in _DIRECTORY_FIELDS and target.is_dir():
                follow.append(target)
            elif ref.field in _DECRYPTED_FIELDS and target.is_file():
                files.append(target)
        return follow

    walk(root, directory, collect)
    return files
