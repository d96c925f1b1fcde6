"""`dependsOn`: whether a Kustomization or HelmRelease may go ahead, decided from the cache.

Pure functions over cached objects, so the rules are unit-tested without a
cluster: each dependency must exist, be Ready for its current generation,
and, when it reconciles the same source, have applied the revision this one
is about to apply. A cycle is found by walking the graph from this object;
it is reported once as a cycle rather than waited on forever.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sluice_api.meta import JSON
from sluice_runtime.conditions import is_ready
from sluice_runtime.informing.watching import Index, Store
from sluice_runtime.reconciling.errors import Stalling, Waiting

Lookup = Callable[[str], JSON | None]


class DependencyNotReady(Exception):
    pass


class DependencyCycle(Exception):
    pass


@dataclass(frozen=True)
class SourceKey:
    kind: str
    namespace: str
    name: str


def dependency_keys(obj: JSON) -> list[str]:
    namespace = obj["metadata"].get("namespace", "")
    keys = []
    for dep in (obj.get("spec") or {}).get("dependsOn") or []:
        keys.append(f"{dep.get('namespace') or namespace}/{dep['name']}")
    return keys


def source_of(obj: JSON) -> SourceKey:
    ref = obj["spec"]["sourceRef"]
    return SourceKey(
        kind=ref["kind"],
        namespace=ref.get("namespace") or obj["metadata"].get("namespace", ""),
        name=ref["name"],
    )


def find_cycle(key: str, lookup: Lookup) -> list[str] | None:
    """The dependency path from `key` back to itself, if there is one."""
    path: list[str] = []
    seen: set[str] = set()

    def walk(current: str) -> list[str] | None:
        obj = lookup(current)
        if obj is None:
            return None
        for dep in dependency_keys(obj):
            if dep == key:
                return [*path, current, dep]
            if dep in seen:
                continue
            seen.add(dep)
            path.append(current)
            found = walk(dep)
            path.pop()
            if found:
                return found
        return None

    return walk(key)


def check(obj: JSON, lookup: Lookup, *, source_revision: str | None) -> None:
    """Raise DependencyCycle or DependencyNotReady naming the dependency at fault."""
    key = f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
    cycle = find_cycle(key, lookup)
    if cycle:
        raise DependencyCycle(f"dependency cycle detected: {' -> '.join(cycle)}")
    own_source = source_of(obj) if source_revision is not None else None
    for dep_key in dependency_keys(obj):
        dep = lookup(dep_key)
        if dep is None:
            raise DependencyNotReady(f"dependency '{dep_key}' not found")
        if not is_ready(dep):
            raise DependencyNotReady(f"dependency '{dep_key}' is not ready")
        if (
            source_revision is not None
            and source_of(dep) == own_source
            and (dep.get("status") or {}).get("lastAppliedRevision") != source_revision
        ):
            raise DependencyNotReady(
                f"dependency '{dep_key}' has not applied revision '{source_revision}' yet"
            )


DEPENDS_ON = Index("spec.dependsOn", dependency_keys)


def dependents(changed_key: str, store: Store) -> list[str]:
    """Keys of the objects in `store` (of one kind) that depend on `changed_key`."""
    return store.referencing(DEPENDS_ON, changed_key)


def _source_refs(obj: JSON) -> list[str]:
    ref = (obj.get("spec") or {}).get("sourceRef")
    if not isinstance(ref, dict) or not ref.get("name"):
        return []
    namespace = ref.get("namespace") or obj["metadata"].get("namespace", "")
    return [source_ref(str(ref.get("kind")), namespace, ref["name"])]


def source_ref(kind: str, namespace: str, name: str) -> str:
    """A source as `SOURCE_REF` indexes it."""
    return f"{kind}/{namespace}/{name}"


SOURCE_REF = Index("spec.sourceRef", _source_refs)
"""Objects by the source they name (`Kind/namespace/name`; a missing
namespace is the object's own)."""


DEPENDENCY_NOT_READY = "DependencyNotReady"


def require_ready(
    obj: JSON, lookup: Lookup, *, source_revision: str | None, requeue_after: float
) -> None:
    """`check` as a reconcile step sees it: a cycle stalls (it never resolves by
    waiting), a dependency not yet ready waits `requeue_after` seconds."""
    try:
        check(obj, lookup, source_revision=source_revision)
    except DependencyCycle as error:
        raise Stalling(DEPENDENCY_NOT_READY, str(error)) from None
    except DependencyNotReady as error:
        raise Waiting(
            DEPENDENCY_NOT_READY,
            f"{error}, retrying in {requeue_after:g}s",
            requeue_after=requeue_after,
        ) from None
