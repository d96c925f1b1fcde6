"""Pure rules over manifests: is the set well-formed, what is sent, in which
stage, and did anything drift.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sluice_api.meta import ObjectId
from sluice_runtime.kube.client import JSON
from sluice_runtime.ssa.errors import ValidationFailed
from sluice_runtime.ssa.policy import metadata

SERVER_METADATA = (
    "managedFields",
    "resourceVersion",
    "generation",
    "uid",
    "creationTimestamp",
    "selfLink",
)
"""Metadata the API server owns: never part of what we apply."""


def validate(objects: Sequence[Mapping[str, Any]]) -> None:
    """Every object has apiVersion, kind and metadata.name, and appears once;
    raises ValidationFailed naming every problem."""
    errors: list[str] = []
    seen: set[ObjectId] = set()
    for index, obj in enumerate(objects, start=1):
        if not isinstance(obj, Mapping):
            errors.append(f"object #{index} is not a mapping")
            continue
        oid = ObjectId.of(obj)
        where = f"{oid.kind or '<no kind>'}/{oid.name or '<no name>'} (object #{index})"
        missing = [
            what
            for what, value in (
                ("apiVersion", obj.get("apiVersion")),
                ("kind", obj.get("kind")),
                ("metadata.name", metadata(obj).get("name")),
            )
            if not isinstance(value, str) or not value
        ]
        if missing:
            errors.append(f"{where}: {', '.join(missing)} not set")
            continue
        if oid in seen:
            errors.append(f"{oid.display} is defined more than once")
        seen.add(oid)
    if errors:
        raise ValidationFailed(errors)


def desired(obj: Mapping[str, Any], *, owner_labels: Mapping[str, str], namespaced: bool) -> JSON:
    """What is applied for `obj`: a copy with the owner labels, without what the
    server owns (status, server metadata, a cluster-scoped object's namespace)."""
    result: JSON = copy.deepcopy(dict(obj))
    meta = result.setdefault("metadata", {})
    if not namespaced:
        # Cluster-scoped: the API ignores a namespace; the inventory must too.
        meta.pop("namespace", None)
    meta["labels"] = {**(meta.get("labels") or {}), **owner_labels}
    # The API rejects or overwrites these on apply; they are not intent.
    for key in SERVER_METADATA:
        meta.pop(key, None)
    # Status is written by controllers through its own endpoint, never applied.
    result.pop("status", None)
    set_protocol_defaults(result)
    return result


def _comparable(obj: Mapping[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    meta = metadata(obj)
    rest = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    return (meta.get("labels") or {}, meta.get("annotations") or {}, rest)


def has_drifted(existing: Mapping[str, Any], dry_run: Mapping[str, Any]) -> bool:
    """Would applying change the live object?

    Only what an apply owns counts: labels, annotations and everything outside
    metadata and status. Status, managedFields, resourceVersion, generation,
    uid and timestamps are the server's and other controllers'; what servers
    put there differs between versions, so comparing them would make the
    answer depend on the server.
    """
    return _comparable(existing) != _comparable(dry_run)


def is_cluster_definition(obj: Mapping[str, Any]) -> bool:
    """Flux's first stage: what other objects need to exist before they can be applied."""
    api_version = str(obj.get("apiVersion") or "")
    kind = obj.get("kind")
    return (
        (kind == "CustomResourceDefinition" and api_version.startswith("apiextensions.k8s.io/"))
        or (kind == "Namespace" and api_version == "v1")
        or (kind == "ClusterRole" and api_version.startswith("rbac.authorization.k8s.io/"))
    )


def is_class_definition(obj: Mapping[str, Any]) -> bool:
    """StorageClass, IngressClass, PriorityClass...: referenced by name from other objects."""
    return str(obj.get("kind") or "").endswith("Class")


def stage_of(obj: Mapping[str, Any]) -> int:
    """0: cluster definitions, 1: class definitions, 2: everything else."""
    if is_cluster_definition(obj):
        return 0
    if is_class_definition(obj):
        return 1
    return 2


def prune_stage_of(oid: ObjectId) -> int:
    """Pruning runs the other way: Namespaces and CRDs last, so what lives in them
    (or is served by them) goes first."""
    if oid.kind == "Namespace" and oid.group == "":
        return 2
    if oid.kind == "CustomResourceDefinition" and oid.group == "apiextensions.k8s.io":
        return 1
    return 0


def _pod_specs(obj: Mapping[str, Any]) -> list[Any]:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return []
    if obj.get("kind") == "Pod":
        return [spec]
    if obj.get("kind") == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    return [((spec.get("template") or {}).get("spec")) or {}]


def set_protocol_defaults(obj: JSON) -> None:
    """Write the default `protocol: TCP` into Service and container ports.

    Kubernetes before 1.22 rejects a server-side apply whose port list omits
    `protocol`, a key of that list (structured-merge-diff issue 130); TCP is
    what the API would default it to anyway.
    """
    ports: list[Any] = []
    if obj.get("kind") == "Service" and obj.get("apiVersion") == "v1":
        ports += (obj.get("spec") or {}).get("ports") or []
    for pod in _pod_specs(obj):
        if not isinstance(pod, Mapping):
            continue
        for container in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
            if isinstance(container, Mapping):
                ports += container.get("ports") or []
    for port in ports:
        if isinstance(port, dict) and not port.get("protocol"):
            port["protocol"] = "TCP"


def crd_kinds(objects: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """(apiVersion, kind) -> CRD name, for every custom kind the set defines."""
    defined: dict[tuple[str, str], str] = {}
    for obj in objects:
        if obj.get("kind") != "CustomResourceDefinition":
            continue
        spec = obj.get("spec") or {}
        group = spec.get("group") or ""
        kind = (spec.get("names") or {}).get("kind") or ""
        versions = [v.get("name") for v in spec.get("versions") or [] if isinstance(v, dict)]
        if spec.get("version"):  # apiextensions v1beta1
            versions.append(spec["version"])
        for version in versions:
            defined[(f"{group}/{version}", kind)] = metadata(obj).get("name") or ""
    return defined


def namespaces(objects: Iterable[Mapping[str, Any]]) -> set[str]:
    """The Namespaces the set creates."""
    return {
        str(metadata(o).get("name"))
        for o in objects
        if o.get("kind") == "Namespace" and o.get("apiVersion") == "v1"
    }
