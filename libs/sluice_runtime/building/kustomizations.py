"""The kustomization file a build reads: generated when missing, with the spec merged in.

Before the build the spec is merged into the kustomization file as Flux's
generator does it, after generating one that lists every manifest when the
directory has none.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from sluice_api.kustomize import KustomizationSpec
from sluice_runtime.building.manifests import load_yaml_all
from sluice_runtime.building.references import (
    is_remote,
    kustomization_file,
    read_kustomization,
    relative,
    resolve,
)
from sluice_runtime.building.tools import BuildError


def resolve_path(root: Path, path: str | None) -> Path:
    given = path or "./"
    # Flux joins spec.path onto the artifact root, so "/apps" means "<root>/apps".
    candidate = Path(os.path.realpath(root / given.lstrip("/")))
    if not candidate.is_relative_to(root):
        raise BuildError(f"path '{given}' is outside the artifact")
    if not candidate.exists():
        raise BuildError(f"path '{given}' not found in the artifact")
    if not candidate.is_dir():
        raise BuildError(f"path '{given}' is not a directory")
    return candidate


# -- generating a kustomization.yaml for plain manifests ----------------------


def generate(root: Path, directory: Path) -> Path:
    """List every manifest below `directory` in a new kustomization.yaml.

    Flux's rules: files ending in .yaml or .yml, in lexical order, depth
    first; a subdirectory with its own kustomization file is listed as a
    directory and not entered. Sluice also leaves out YAML files in which no
    document has an apiVersion or kind (CI configs, Helm values), where Flux
    fails; a file that does not parse is listed, so kustomize reports the
    syntax error with its file and line.
    """
    resources = list(scan(root, directory, directory))
    document = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": resources,
    }
    kfile = directory / "kustomization.yaml"
    kfile.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    return kfile


def scan(root: Path, base: Path, current: Path) -> Iterator[str]:
    with os.scandir(current) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    for entry in entries:
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            if kustomization_file(path) is not None:
                yield path.relative_to(base).as_posix()
            else:
                yield from scan(root, base, path)
        elif entry.name.endswith((".yaml", ".yml")) and entry.is_file():
            if not Path(os.path.realpath(path)).is_relative_to(root):
                raise BuildError(f"'{relative(root, path)}' points outside the artifact")
            if has_manifests(path):
                yield path.relative_to(base).as_posix()


def has_manifests(path: Path) -> bool:
    try:
        # Bytes, so that PyYAML honours a UTF-16 byte order mark as kustomize does.
        documents = load_yaml_all(path.read_bytes())
    except yaml.YAMLError:
        return True
    return any(
        isinstance(doc, dict) and ("apiVersion" in doc or "kind" in doc) for doc in documents
    )


# -- merging the spec into the kustomization file -----------------------------
def list_field(document: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = document.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BuildError(f"kustomize build failed: {where}: '{key}' must be a list")
    return list(value)


def spec_patches(spec: KustomizationSpec) -> list[dict[str, Any]]:
    """`patches`, then v1beta1/v1beta2's `patchesStrategicMerge` and `patchesJson6902`,
    as kustomize `patches` entries (kustomize tells the two kinds apart by content)."""
    entries: list[dict[str, Any]] = []
    for patch in spec.patches or []:
        entry: dict[str, Any] = {"patch": patch.patch}
        if patch.target is not None:
            entry["target"] = patch.target.model_dump(by_alias=True, exclude_none=True)
        entries.append(entry)
    for document in spec.patches_strategic_merge or []:
        entries.append({"patch": yaml.safe_dump(document, sort_keys=False)})
    for json_patch in spec.patches_json6902 or []:
        operations = [op.model_dump(by_alias=True, exclude_unset=True) for op in json_patch.patch]
        entries.append(
            {
                "patch": yaml.safe_dump(operations, sort_keys=False),
                "target": json_patch.target.model_dump(by_alias=True, exclude_none=True),
            }
        )
    return entries


def merge(root: Path, directory: Path, kfile: Path, spec: KustomizationSpec) -> None:
    """Apply the spec's kustomize fields to the kustomization file, as Flux's generator does."""
    document = read_kustomization(root, kfile).document
    where = relative(root, kfile)
    changed = False
    if spec.target_namespace:
        document["namespace"] = spec.target_namespace
        changed = True
    if spec.name_prefix:
        document["namePrefix"] = spec.name_prefix
        changed = True
    if spec.name_suffix:
        document["nameSuffix"] = spec.name_suffix
        changed = True
    if spec.build_metadata:
        options = list_field(document, "buildMetadata", where)
        document["buildMetadata"] = options + [o for o in spec.build_metadata if o not in options]
        changed = True
    patches = spec_patches(spec)
    if patches:
        document["patches"] = list_field(document, "patches", where) + patches
        changed = True
    if spec.images:
        images = list_field(document, "images", where)
        for image in spec.images:
            entry = image.model_dump(by_alias=True, exclude_none=True)
            # Flux replaces the file's entry for the same image rather than adding a second.
            same = [
                i
                for i, e in enumerate(images)
                if isinstance(e, dict) and e.get("name") == image.name
            ]
            if same:
                images[same[0]] = entry
            else:
                images.append(entry)
        document["images"] = images
        changed = True
    if spec.components:
        components = list_field(document, "components", where)
        for component in spec.components:
            _, exists = resolve(root, directory, component, "spec.components")
            if not exists and not is_remote(component):
                if spec.ignore_missing_components:
                    continue
                raise BuildError(
                    f"component '{component}' not found in the artifact "
                    f"(relative to '{relative(root, directory)}')"
                )
            components.append(component)
        document["components"] = components
        changed = True
    if changed:
        kfile.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
