"""The verbs that write: create, replace, patches, server-side apply, delete.

A base of `KubeClient`, kept apart so the client's module holds the
connection and the reads; every verb here goes through `request`.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any, Literal

from sluice_api.meta import JSON
from sluice_runtime.kube.resources import ResourceType

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


class WriteVerbs:
    """create, replace, merge_patch, json_patch, apply and delete over `request`."""

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
        accept: str = "application/json",
    ) -> Any:
        raise NotImplementedError

    async def create(self, rt: ResourceType, obj: JSON, namespace: str | None = None) -> JSON:
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        result: JSON = await self.request("POST", rt.path(namespace=ns), body=obj)
        return result

    async def replace(self, rt: ResourceType, obj: JSON) -> JSON:
        meta = obj["metadata"]
        result: JSON = await self.request(
            "PUT", rt.path(namespace=meta.get("namespace"), name=meta["name"]), body=obj
        )
        return result

    async def merge_patch(
        self,
        rt: ResourceType,
        name: str,
        patch: JSON,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> JSON:
        result: JSON = await self.request(
            "PATCH",
            rt.path(namespace=namespace, name=name, subresource=subresource),
            body=patch,
            content_type=MERGE_PATCH,
        )
        return result

    async def json_patch(
        self,
        rt: ResourceType,
        name: str,
        operations: builtins.list[JSON],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> JSON:
        result: JSON = await self.request(
            "PATCH",
            rt.path(namespace=namespace, name=name, subresource=subresource),
            body=operations,
            content_type=JSON_PATCH,
        )
        return result

    async def apply(
        self,
        rt: ResourceType,
        obj: JSON,
        *,
        field_manager: str,
        force: bool = False,
        dry_run: bool = False,
    ) -> JSON:
        """Server-side apply; `obj` is the complete intent of `field_manager`."""
        meta = obj["metadata"]
        query = [("fieldManager", field_manager)]
        if force:
            query.append(("force", "true"))
        if dry_run:
            query.append(("dryRun", "All"))
        result: JSON = await self.request(
            "PATCH",
            rt.path(namespace=meta.get("namespace"), name=meta["name"]),
            query=query,
            body=obj,
            content_type=APPLY_PATCH,
        )
        return result

    async def delete(
        self,
        rt: ResourceType,
        name: str,
        *,
        namespace: str | None = None,
        propagation: Literal["Background", "Foreground", "Orphan"] = "Background",
        precondition_uid: str | None = None,
        precondition_resource_version: str | None = None,
    ) -> JSON | None:
        """Delete; with preconditions, only that object (uid) as it was then
        (resourceVersion): otherwise the server answers 409 Conflict."""
        body: JSON = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": propagation,
        }
        preconditions = {}
        if precondition_uid:
            preconditions["uid"] = precondition_uid
        if precondition_resource_version:
            preconditions["resourceVersion"] = precondition_resource_version
        if preconditions:
            body["preconditions"] = preconditions
        result: JSON | None = await self.request(
            "DELETE", rt.path(namespace=namespace, name=name), body=body
        )
        return result
