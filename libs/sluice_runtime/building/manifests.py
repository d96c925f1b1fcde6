"""Reading YAML as Kubernetes does, and kustomize's output as Kubernetes objects."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from sluice_api.kustomize import CommonMetadata
from sluice_runtime.building.tools import BuildError

try:
    from yaml import CSafeLoader as _BaseLoader
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml import SafeLoader as _BaseLoader  # type: ignore[assignment]


class ManifestLoader(_BaseLoader):
    """YAML as Kubernetes' Go decoder reads it into plain values.

    PyYAML's safe schema would turn `2024-01-01` into a date, `10:30` into
    630 (base 60) and a bare `=` into an error; Go keeps the first two as
    strings and knows nothing of the third. Everything else (YAML 1.1
    booleans, octal and hex numbers) matches.
    """


_DROPPED_TAGS = {
    "tag:yaml.org,2002:timestamp",
    "tag:yaml.org,2002:value",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
}
ManifestLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _DROPPED_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ManifestLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(
        r"""^(?:[-+]?0b[0-1_]+
        |[-+]?0[0-7_]+
        |[-+]?(?:0|[1-9][0-9_]*)
        |[-+]?0x[0-9a-fA-F_]+)$""",
        re.X,
    ),
    list("-+0123456789"),
)
ManifestLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
        |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def load_yaml(data: str | bytes) -> Any:
    """One YAML document as Kubernetes reads it (see ManifestLoader)."""
    return yaml.load(data, Loader=ManifestLoader)  # noqa: S506 - ManifestLoader is a SafeLoader


def load_yaml_all(data: str | bytes) -> list[Any]:
    """Every document of a YAML stream as Kubernetes reads it, empty ones as None."""
    return list(yaml.load_all(data, Loader=ManifestLoader))


def yaml_problem(error: yaml.YAMLError) -> str:
    """`yaml: line N: <problem>`, the shape of Go's YAML errors that kustomize prints."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        return f"yaml: line {error.problem_mark.line + 1}: {error.problem}"
    return f"yaml: {error}"


def set_common_metadata(objects: list[dict[str, Any]], common: CommonMetadata) -> None:
    """Set `commonMetadata` on each object's own metadata, overriding equal keys (as Flux)."""
    for obj in objects:
        meta = obj.setdefault("metadata", {})
        if common.labels:
            meta["labels"] = {**(meta.get("labels") or {}), **common.labels}
        if common.annotations:
            meta["annotations"] = {**(meta.get("annotations") or {}), **common.annotations}


def parse_output(output: bytes) -> list[dict[str, Any]]:
    try:
        documents = load_yaml_all(output)
    except yaml.YAMLError as error:
        raise BuildError(f"kustomize output is not valid YAML: {yaml_problem(error)}") from None
    objects: list[dict[str, Any]] = []
    for document in documents:
        if document is None:
            continue
        meta = document.get("metadata") if isinstance(document, dict) else None
        if (
            not isinstance(document, dict)
            or not document.get("apiVersion")
            or not document.get("kind")
            or not isinstance(meta, dict)
            or not meta.get("name")
        ):
            snippet = json.dumps(document, default=str)[:200]
            raise BuildError(
                f"failed to decode Kubernetes apiVersion, kind and name from: {snippet}"
            )
        objects.append(document)
    return objects
