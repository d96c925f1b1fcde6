"""Building plain manifests without kustomize, with kustomize's result.

A directory with no kustomization file anywhere below it, built for a spec
that asks kustomize for nothing, is what kustomize would make of the
kustomization.yaml that `kustomizations.generate` writes: every manifest
file's documents, as they are, in kustomize's legacy order. Reading them in
Python gives the same objects without a process; kustomize's own cost grows
faster than the object count (57 s for 5,000 ConfigMaps, on two cores).

The result must be the one kustomize gives, so anything this module is not
sure about makes it answer None and the build goes to kustomize, which then
produces its own objects or its own error message: YAML that kustomize would
read differently or refuse (anchors, aliases, explicit tags, directives,
duplicate keys, byte order marks, carriage returns, syntax errors), documents
that are not plain objects (`...List` kinds, no name, Kustomization kinds,
kustomize's own annotations), duplicate object IDs, output near the
`max_output` cap, and a `targetNamespace` over any kind whose namespace
kustomize sets anywhere but in its own metadata. The differential tests
(tests/test_building_plain.py) build a table of trees both ways.

Only files inside the artifact are read: a manifest whose real path leaves
it is refused with the message the generated kustomization would have got.
"""

from __future__ import annotations

import os
import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from sluice_api.kustomize import KustomizationSpec
from sluice_runtime.building.kustomizations import has_manifests
from sluice_runtime.building.manifests import ManifestLoader
from sluice_runtime.building.references import kustomization_file, relative
from sluice_runtime.building.tools import BuildError

NOT_FOR_KUSTOMIZE = frozenset(
    {
        "source_ref", "path", "interval", "retry_interval", "timeout", "prune",
        "deletion_policy", "force", "wait", "suspend", "depends_on", "health_checks",
        "health_check_exprs", "ignore_missing_components", "common_metadata", "post_build",
        "decryption", "service_account_name", "kube_config", "drift_ignore_rules", "ignore",
        "gates", "validation", "target_namespace",
    }
)  # fmt: skip
"""Spec fields that `kustomizations.merge` never writes into the kustomization
(`target_namespace` is handled here for the kinds of NAMESPACED_KINDS; a
decryption's files are decrypted by the caller, which then uses kustomize).
Any other field, including one added later, sends the build to kustomize."""

NAMESPACED_KINDS = frozenset(
    {
        ("v1", "ConfigMap"), ("v1", "Secret"), ("v1", "Service"), ("v1", "ServiceAccount"),
        ("v1", "PersistentVolumeClaim"), ("apps/v1", "Deployment"),
        ("apps/v1", "StatefulSet"), ("apps/v1", "DaemonSet"), ("batch/v1", "Job"),
        ("batch/v1", "CronJob"), ("networking.k8s.io/v1", "Ingress"),
        ("networking.k8s.io/v1", "NetworkPolicy"), ("policy/v1", "PodDisruptionBudget"),
        ("autoscaling/v2", "HorizontalPodAutoscaler"), ("rbac.authorization.k8s.io/v1", "Role"),
    }
)  # fmt: skip
"""Kinds on which kustomize's namespace transformer sets only metadata.namespace
(not, say, a RoleBinding's subjects or a webhook's service reference)."""

# kustomize's legacy order (its SortOrderTransformer's default lists).
_ORDER_FIRST = (
    "Namespace", "ResourceQuota", "StorageClass", "CustomResourceDefinition", "ServiceAccount",
    "PodSecurityPolicy", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding",
    "ConfigMap", "Secret", "Endpoints", "Service", "LimitRange", "PriorityClass",
    "PersistentVolume", "PersistentVolumeClaim", "Deployment", "StatefulSet", "CronJob",
    "PodDisruptionBudget",
)  # fmt: skip
_ORDER_LAST = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
_TYPE_ORDER = {kind: i - len(_ORDER_FIRST) for i, kind in enumerate(_ORDER_FIRST)} | {
    kind: 1 + i for i, kind in enumerate(_ORDER_LAST)
}
_NOT_NAMESPACEABLE = frozenset(
    {
        "APIService", "CSIDriver", "CSINode", "CertificateSigningRequest", "Cluster",
        "ClusterRole", "ClusterRoleBinding", "ComponentStatus", "CustomResourceDefinition",
        "MutatingWebhookConfiguration", "Namespace", "Node", "PersistentVolume",
        "PodSecurityPolicy", "PriorityClass", "RuntimeClass", "SelfSubjectAccessReview",
        "SelfSubjectRulesReview", "StorageClass", "SubjectAccessReview", "TokenReview",
        "ValidatingWebhookConfiguration", "VolumeAttachment",
    }
)  # fmt: skip
"""Kinds kustomize treats as cluster-scoped when it compares object IDs."""

# Where YAML could hold an anchor, alias or tag (after a space, a flow
# indicator or at a line's start), a directive, or a merge key; only files
# that match are parsed a second time, event by event, to be sure.
_MAYBE_SPECIAL = re.compile(rb"(?:^|[\s\[{,])[&*!]|^%|<<", re.M)
_KUSTOMIZE_ANNOTATIONS = ("config.kubernetes.io/", "kustomize.config.k8s.io/")


class _NotPlain(Exception):
    """Something kustomize should judge: the build goes to kustomize."""


class _StrictLoader(ManifestLoader):
    """ManifestLoader that keeps only what survives kustomize's round trip unchanged.

    kustomize reads YAML into Go values, writes them as JSON and that as
    YAML: keys come out sorted, `yes` and `1e3` (strings to YAML 1.2, a bool
    and a string to PyYAML) come out as "yes" and 1000, 1.0 as 1, a date as
    a timestamp. Keys are sorted here the same way (Go sorts by bytes, which
    is code point order); a scalar the two could read differently, a float,
    a non-string key or a key given twice (PyYAML keeps the last, kustomize
    refuses) sends the build to kustomize.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        keys = [key.value for key, _ in node.value if isinstance(key, yaml.ScalarNode)]
        if len(keys) != len(node.value) or len(keys) != len(set(keys)):
            raise _NotPlain
        mapping = super().construct_mapping(node, deep=deep)
        if not all(isinstance(key, str) for key in mapping):
            raise _NotPlain
        return dict(sorted(mapping.items()))


_BOOLEANS = frozenset({"true", "True", "TRUE", "false", "False", "FALSE"})
_SAFE_INT = 1 << 53  # kustomize's JSON numbers are float64: exact up to here
# Plain scalars Go parses as numbers (strconv's ParseInt base 0 and ParseFloat,
# hex floats and inf/nan words included) or dates, which PyYAML keeps as strings.
_GO_NUMBER = re.compile(
    r"[-+]?(?:inf|infinity|nan|[0-9_]*\.?[0-9_]*(?:e[-+]?[0-9_]+)?"
    r"|0x[0-9a-f_]*\.?[0-9a-f_]*(?:p[-+]?[0-9_]+)?|0[ob][0-9_]+)",
    re.I,
)
_GO_DATE = re.compile(r"[0-9]{4}-[0-9]")


def _bool(loader: _StrictLoader, node: yaml.ScalarNode) -> bool:
    if node.value not in _BOOLEANS:
        raise _NotPlain  # yes/no/on/off: a bool to PyYAML, a string to kustomize
    return bool(loader.construct_yaml_bool(node))


def _int(loader: _StrictLoader, node: yaml.ScalarNode) -> int:
    value = int(loader.construct_yaml_int(node))
    if abs(value) >= _SAFE_INT:
        raise _NotPlain
    return value


def _float(loader: _StrictLoader, node: yaml.ScalarNode) -> float:
    raise _NotPlain  # 1.0 comes back as 1, .inf not at all


def _str(loader: _StrictLoader, node: yaml.ScalarNode) -> str:
    value = str(loader.construct_yaml_str(node))
    if not node.style and (_GO_NUMBER.fullmatch(value) or _GO_DATE.match(value)):
        raise _NotPlain
    return value


_StrictLoader.add_constructor("tag:yaml.org,2002:bool", _bool)
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _float)
_StrictLoader.add_constructor("tag:yaml.org,2002:str", _str)


def needs_kustomize(spec: KustomizationSpec) -> bool:
    """Whether the spec asks for anything that kustomize does (prefix, patches, images...)."""
    for name in type(spec).model_fields:
        if name not in NOT_FOR_KUSTOMIZE and getattr(spec, name) not in (None, False, [], {}):
            return True
    return False


def build_plain(
    root: Path, directory: Path, spec: KustomizationSpec, *, max_output: int
) -> list[dict[str, Any]] | None:
    """The objects kustomize would build from `directory`, or None when kustomize must.

    `root` is the artifact's real path and `directory` a real path inside it.
    Raises BuildError for a manifest that points outside the artifact.
    """
    if needs_kustomize(spec) or kustomization_file(directory) is not None:
        return None
    try:
        objects: list[dict[str, Any]] = []
        budget = [max_output // 2]  # kustomize re-indents; stay well clear of its cap
        for path in _manifest_files(root, directory):
            objects.extend(_objects(path, budget))
        if spec.target_namespace:
            _set_namespace(objects, spec.target_namespace)
        return _sorted_unique(objects)
    except _NotPlain:
        return None


def _manifest_files(root: Path, current: Path) -> list[Path]:
    """The files `kustomizations.scan` would list, in its order; _NotPlain when it
    would list a directory (one with its own kustomization file)."""
    with os.scandir(current) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    found: list[Path] = []
    for entry in entries:
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            if kustomization_file(path) is not None:
                raise _NotPlain
            found.extend(_manifest_files(root, path))
        elif entry.name.endswith((".yaml", ".yml")) and entry.is_file():
            if not Path(os.path.realpath(path)).is_relative_to(root):
                raise BuildError(f"'{relative(root, path)}' points outside the artifact")
            found.append(path)
    return found


def _objects(path: Path, budget: list[int]) -> list[dict[str, Any]]:
    data = path.read_bytes()
    try:
        documents = _documents(data)
    except _NotPlain:
        # A file the generated kustomization leaves out (a CI config with
        # anchors, Helm values with `on:` keys) does not matter to kustomize.
        if has_manifests(path):
            raise
        return []
    # The generated kustomization leaves out files with no object at all
    # (`kustomizations.has_manifests`); a file with one must hold only objects.
    if not any(isinstance(d, dict) and ("apiVersion" in d or "kind" in d) for d in documents):
        return []
    budget[0] -= len(data)
    if budget[0] < 0:
        raise _NotPlain
    objects = [d for d in documents if d is not None]
    for obj in objects:
        _check_object(obj)
    return objects


def _documents(data: bytes) -> list[Any]:
    if b"\r" in data or data.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")):
        raise _NotPlain
    if _MAYBE_SPECIAL.search(data) and _has_special_syntax(data):
        raise _NotPlain
    try:
        return list(yaml.load_all(data, Loader=_StrictLoader))
    except yaml.YAMLError:
        raise _NotPlain from None


def _has_special_syntax(data: bytes) -> bool:
    try:
        for event in yaml.parse(data, Loader=ManifestLoader):
            if isinstance(event, yaml.AliasEvent):
                return True
            if isinstance(event, yaml.DocumentStartEvent) and (event.version or event.tags):
                return True  # a %YAML or %TAG directive
            if getattr(event, "anchor", None) or getattr(event, "tag", None):
                return True
            if isinstance(event, yaml.ScalarEvent) and event.value == "<<":
                return True
    except yaml.YAMLError:
        return True
    return False


def _check_object(obj: Any) -> None:
    if not isinstance(obj, dict):
        raise _NotPlain
    api_version, kind, meta = obj.get("apiVersion"), obj.get("kind"), obj.get("metadata")
    if not (isinstance(api_version, str) and api_version.count("/") <= 1 and api_version):
        raise _NotPlain
    if not (isinstance(kind, str) and kind) or kind.endswith("List"):
        raise _NotPlain
    if api_version.startswith("kustomize.config.k8s.io"):
        raise _NotPlain
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise _NotPlain
    if not isinstance(meta.get("namespace", ""), str):
        raise _NotPlain
    for field in ("labels", "annotations"):
        if field in meta and not (isinstance(meta[field], dict) and meta[field]):
            raise _NotPlain  # kustomize drops or rewrites empty and odd label maps
    annotations = meta.get("annotations") or {}
    if any(p in str(k) for k in annotations for p in _KUSTOMIZE_ANNOTATIONS):
        raise _NotPlain  # kustomize reads (internal.)config.kubernetes.io/* and removes some


def _set_namespace(objects: list[dict[str, Any]], namespace: str) -> None:
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) not in NAMESPACED_KINDS:
            raise _NotPlain
    for obj in objects:
        obj["metadata"] = dict(sorted({**obj["metadata"], "namespace": namespace}.items()))


def _sorted_unique(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """kustomize's legacy order; _NotPlain for two objects with one ID."""
    seen: set[tuple[str, str, str, str]] = set()
    keyed: list[tuple[tuple[int, str, str], dict[str, Any]]] = []
    for obj in objects:
        group, _, version = obj["apiVersion"].rpartition("/")
        kind, meta = obj["kind"], obj["metadata"]
        name, namespace = meta["name"], meta.get("namespace") or ""
        if kind in _NOT_NAMESPACEABLE:
            effective = "_non_namespaceable_"
        else:
            effective = namespace if namespace not in ("", "default") else "default"
        # Conservative: kustomize compares versions too; a clash without them is rare.
        identity = (group, kind, effective, name)
        if identity in seen:
            raise _NotPlain
        seen.add(identity)
        gvk = f"{group or '~G'}_{version or '~V'}_{kind}"
        keyed.append(((_TYPE_ORDER.get(kind, 0), gvk, f"{gvk}|{namespace or '~X'}|{name}"), obj))
    keyed.sort(key=lambda item: item[0])
    return [obj for _, obj in keyed]
