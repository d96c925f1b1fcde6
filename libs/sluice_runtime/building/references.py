"""Keeping the build inside the artifact: every path a kustomization file makes
kustomize read is checked before the build, so that a reference leaving the
artifact or a remote base gets a precise message rather than kustomize's
"permission denied"; and the files SOPS must decrypt are found the same way.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from sluice_runtime.building.manifests import load_yaml, yaml_problem
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


def read_kustomization(root: Path, kfile: Path) -> dict[str, Any]:
    name = relative(root, kfile)
    if not Path(os.path.realpath(kfile)).is_relative_to(root):
        raise BuildError(f"'{name}' points outside the artifact")
    try:
        document = load_yaml(kfile.read_bytes())
    except yaml.YAMLError as error:
        raise BuildError(f"kustomize build failed: {name}: {yaml_problem(error)}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise BuildError(f"kustomize build failed: {name} is not a mapping")
    return document


_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_GIT_SHORTHAND = re.compile(r"^(?:git@|git::|gh:)")
_REMOTE_QUERY = re.compile(r"[?&](?:ref|version|submodules|timeout)=")
_HOST_PREFIX = re.compile(r"^[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+(?::\d+)?/")


def is_remote(entry: str, base: Path) -> bool:
    """Whether kustomize would fetch `entry` over the network (a URL or a git repository)."""
    if _SCHEME.match(entry) or _GIT_SHORTHAND.match(entry) or _REMOTE_QUERY.search(entry):
        return True
    # `github.com/org/repo/path` is a repository unless a local path of that name exists.
    return bool(_HOST_PREFIX.match(entry)) and not (base / entry).exists()


def inside(root: Path, base: Path, entry: str, where: str) -> Path:
    if entry.startswith("file:"):
        raise BuildError(f"{where}: '{entry}': file URLs are not allowed")
    if os.path.isabs(entry):
        raise BuildError(f"{where}: '{entry}' is an absolute path outside the artifact")
    resolved = Path(os.path.realpath(base / entry))
    if not resolved.is_relative_to(root):
        raise BuildError(f"{where}: '{entry}' points outside the artifact")
    return resolved


_PLUGIN_FIELDS = ("generators", "transformers", "validators")
"""Fields whose entries are plugin configs (inline or by file) that kustomize runs."""
_DIRECTORY_FIELDS = ("resources", "bases", "components", *_PLUGIN_FIELDS)
_FILE_FIELDS = ("crds", "configurations")
_PATH_ITEM_FIELDS = ("patches", "patchesJson6902", "replacements")
_GENERATOR_FIELDS = ("configMapGenerator", "secretGenerator")


def references(document: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Every (field, path) a kustomization file makes kustomize read."""

    def strings(value: Any) -> Iterator[str]:
        if isinstance(value, list):
            # Multi-line strings are inline documents, not paths.
            yield from (v for v in value if isinstance(v, str) and "\n" not in v)

    for field in (*_DIRECTORY_FIELDS, *_FILE_FIELDS, "patchesStrategicMerge"):
        for entry in strings(document.get(field)):
            yield field, entry
    for field in _PATH_ITEM_FIELDS:
        for item in document.get(field) or []:
            if isinstance(item, dict) and isinstance(item.get("path"), str):
                yield field, item["path"]
    for field in _GENERATOR_FIELDS:
        for generator in document.get(field) or []:
            if not isinstance(generator, dict):
                continue
            for source in strings(generator.get("files")):
                # `key=path` names the data key after something other than the file.
                yield field, source.split("=", 1)[1] if "=" in source else source
            yield from ((field, env) for env in strings(generator.get("envs")))
            if isinstance(generator.get("env"), str):
                yield field, generator["env"]
    openapi = document.get("openapi")
    if isinstance(openapi, dict) and isinstance(openapi.get("path"), str):
        yield "openapi", openapi["path"]


def walk(
    root: Path,
    directory: Path,
    visit: Callable[[Path, Path, dict[str, Any]], Iterable[Path]],
) -> None:
    """Call `visit(directory, kustomization file, document)` on every kustomization
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
    root: Path, directory: Path, *, allow_remote_bases: bool, refuse_plugins: bool = False
) -> None:
    """Refuse references that leave the artifact, and remote ones unless allowed.

    Follows every kustomization reachable from `directory`, so a base or
    component several levels down is held to the same rules; kustomization
    files the build never reads are not judged. With `refuse_plugins`
    (builds not confined), any plugin config is refused: its fields are
    kustomize's to interpret, and only confinement keeps them in bounds.
    """

    def check(current: Path, kfile: Path, document: dict[str, Any]) -> list[Path]:
        name = relative(root, kfile)
        if refuse_plugins:
            for field in _PLUGIN_FIELDS:
                if document.get(field):
                    raise BuildError(
                        f"{name} {field}: plugin configs are refused because builds "
                        f"cannot be confined here ({Sandbox.REFUSE_PLUGINS.describe()})"
                    )
        follow = []
        for field, entry in references(document):
            where = f"{name} {field}"
            if not entry.startswith("file:") and is_remote(entry, current):
                if not allow_remote_bases:
                    raise BuildError(
                        f"{where}: remote reference '{entry}' is not allowed; "
                        "only files inside the artifact can be built"
                    )
                continue
            target = inside(root, current, entry, where)
            if field in _DIRECTORY_FIELDS and target.is_dir():
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

    def collect(current: Path, kfile: Path, document: dict[str, Any]) -> list[Path]:
        follow = []
        for field, entry in references(document):
            if entry.startswith("file:") or is_remote(entry, current):
                continue
            target = Path(os.path.realpath(current / entry))
            if not target.is_relative_to(root):
                continue
            if field in _DIRECTORY_FIELDS and target.is_dir():
                follow.append(target)
            elif field in _DECRYPTED_FIELDS and target.is_file():
                files.append(target)
        return follow

    walk(root, directory, collect)
    return files
