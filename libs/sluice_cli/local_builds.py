"""The controller's build of a Kustomization, run on a local directory.

`sluice build` and `sluice diff` answer "what would the controller apply if
this directory were the source?". They take the Kustomization's spec (from
the cluster, or from a file), build the directory with the very function the
kustomize-controller uses (`sluice_runtime.building`: the spec's
transformations, the same kustomize, the same sandbox), substitute
variables from the cluster's ConfigMaps and Secrets (`sluice_runtime.
substituting`) and add the owner labels the controller's apply adds.

The directory plays the part of the artifact's `spec.path`: it is the root
of the build, as in `flux build kustomization --path`.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any, TypeVar

import yaml

from sluice_api import Kustomization
from sluice_api.kustomize import NAME_LABEL, NAMESPACE_LABEL
from sluice_api.meta import Resource
from sluice_cli.kinds import KUSTOMIZATION
from sluice_cli.terminal import ERROR, Failure
from sluice_runtime import building, substituting
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import ResourceType

R = TypeVar("R", bound=Resource[Any, Any])

FIELD_MANAGER = "kustomize-controller"
"""The kustomize-controller's field manager: a dry-run under any other name
would see conflicts the controller never has."""


async def load_kustomization(
    client: KubeClient | None, namespace: str, name: str, file: Path | None
) -> Kustomization:
    """The Kustomization from `file` when given, else from the cluster."""
    return await load_resource(
        Kustomization, KUSTOMIZATION.rt, client, namespace, name, file, flag="--kustomization-file"
    )


async def load_resource(
    model: type[R],
    rt: ResourceType,
    client: KubeClient | None,
    namespace: str,
    name: str,
    file: Path | None,
    *,
    flag: str,
) -> R:
    """The `model` object `name` from `file` (given as `flag`) when given, else from the cluster."""
    kind = model.KIND
    if file is not None:
        try:
            documents = [d for d in yaml.safe_load_all(file.read_text()) if d]
        except (OSError, yaml.YAMLError) as error:
            raise Failure(f"{flag} {file}: {error}", ERROR) from None
        for document in documents:
            meta = document.get("metadata") or {}
            if document.get("kind") == kind and meta.get("name") == name:
                document.setdefault("metadata", {}).setdefault("namespace", namespace)
                try:
                    return model.from_obj(document)
                except ValueError as error:  # pydantic's ValidationError
                    reason = " ".join(str(error).split())
                    raise Failure(f"{flag} {file}: {reason}", ERROR) from None
        raise Failure(f"{flag} {file} has no {kind} named {name}", ERROR)
    assert client is not None
    try:
        obj = await client.get(rt, name, namespace)
    except NotFound:
        raise Failure(
            f"{kind} {namespace}/{name} not found; pass {flag} to build one that is not in "
            "the cluster"
        ) from None
    return model.from_obj(obj)


async def build_local(
    client: KubeClient | None, ks: Kustomization, path: Path
) -> list[dict[str, Any]]:
    """The objects the controller would apply for `ks` if `path` held its source.

    Without a client (`--dry-run`), variables come only from `postBuild.substitute`.
    """
    if not path.is_dir():
        raise Failure(f"--path {path} is not a directory", ERROR)
    try:
        kustomize = building.find_kustomize()
    except building.KustomizeUnavailable as error:
        raise Failure(str(error), ERROR) from None
    spec = ks.spec.model_copy(update={"path": "./"})
    with tempfile.TemporaryDirectory(prefix="sluice-build-") as scratch:
        # The build edits the kustomization file in place: never the user's.
        root = Path(scratch) / "source"
        await asyncio.to_thread(shutil.copytree, path, root, symlinks=True)
        try:
            objects = await building.build(root, spec, kustomize=kustomize)
        except building.BuildError as error:
            raise Failure(f"kustomize build failed: {error}", ERROR) from None
    post_build = ks.spec.post_build
    if post_build is not None and substituting.post_build_enabled(post_build):
        try:
            if client is None:
                variables = {
                    k: v.replace("\n", "") for k, v in (post_build.substitute or {}).items()
                }
            else:
                variables = await substituting.collect(client, ks.namespace, post_build)
            objects = substituting.substitute(objects, variables)
        except substituting.SubstitutionError as error:
            raise Failure(f"post-build substitution failed: {error}", ERROR) from None
    labels = owner_labels(ks)
    for obj in objects:
        meta = obj.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
    return objects


def owner_labels(ks: Kustomization) -> dict[str, str]:
    """The labels the controller's apply puts on every object it owns."""
    return {NAME_LABEL: ks.metadata.name, NAMESPACE_LABEL: ks.namespace}


def dump_all(objects: list[JSON]) -> str:
    """A YAML stream as `kustomize build` prints it: `---` between documents."""
    return "---\n".join(yaml.safe_dump(obj, sort_keys=False) for obj in objects)
