"""Names of API resources, and the URL paths that reach them.

The rest of the runtime talks about resources as `ResourceType` values rather
than generated client classes, so one informer, one apply helper and one
status writer serve every kind, ours and Kubernetes' alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    from sluice_api.meta import ObjectId


@dataclass(frozen=True, slots=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def path(
        self,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [root]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{quote(namespace, safe='')}")
        parts.append(self.plural)
        if name is not None:
            parts.append(quote(name, safe=""))
            if subresource:
                parts.append(subresource)
        return "/".join(parts)

    @classmethod
    def of_model(cls, model: Any) -> ResourceType:
        """The resource a sluice_api model class is served as (its storage version)."""
        return cls(
            group=model.GROUP,
            version=model.VERSION,
            plural=model.PLURAL,
            kind=model.KIND,
            namespaced=model.NAMESPACED,
        )


@dataclass(frozen=True, slots=True, order=True)
class ObjectRef:
    """One object and the resource that serves it, resolved once.

    What the apply plans is what it applies, records in the inventory and
    waits for: the REST mapping found at planning travels with the identity,
    so no later step resolves it again.
    """

    id: ObjectId
    rt: ResourceType

    @classmethod
    def to(cls, rt: ResourceType, name: str, namespace: str | None = None) -> ObjectRef:
        """`name` served by `rt`; a cluster-scoped resource drops the namespace."""
        # Imported on use: a module that only names resources (as the CLI's list
        # of controllers does) loads no API models; importing sluice_api loads all.
        from sluice_api.meta import ObjectId

        namespace = (namespace or "") if rt.namespaced else ""
        return cls(ObjectId(rt.group, rt.kind, namespace, name), rt)

    @property
    def name(self) -> str:
        return self.id.name

    @property
    def namespace(self) -> str | None:
        """The namespace of a request: None for cluster-scoped objects."""
        return self.id.namespace or None

    @property
    def version(self) -> str:
        return self.rt.version

    @property
    def display(self) -> str:
        return self.id.display

    def __str__(self) -> str:
        return self.display


def object_key(obj: dict[str, Any]) -> str:
    """`namespace/name` (or `name` for cluster-scoped objects), the queue's key."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name', '')}" if namespace else str(meta.get("name", ""))


def split_key(key: str) -> tuple[str | None, str]:
    namespace, _, name = key.rpartition("/")
    return (namespace or None), name


SECRET = ResourceType("", "v1", "secrets", "Secret")
CONFIG_MAP = ResourceType("", "v1", "configmaps", "ConfigMap")
NAMESPACE = ResourceType("", "v1", "namespaces", "Namespace", namespaced=False)
EVENT = ResourceType("", "v1", "events", "Event")
SERVICE_ACCOUNT = ResourceType("", "v1", "serviceaccounts", "ServiceAccount")
LEASE = ResourceType("coordination.k8s.io", "v1", "leases", "Lease")
CRD = ResourceType(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
    namespaced=False,
)  # fmt: skip
