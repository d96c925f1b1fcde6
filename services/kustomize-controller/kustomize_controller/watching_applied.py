"""The live resourceVersions of what Kustomizations applied, kept by watches.

A reconcile with nothing to do compares each object's live resourceVersion
with the one its last apply left (`sluice_runtime.ssa.remembering`). A LIST
per kind and namespace tells that at a few requests per reconcile; a
metadata-only watch per kind, cluster-wide, of the objects that carry
Flux's owner label, tells it at none. A kind is watched from the first
reconcile that asks for it; until its first LIST is in, that reconcile (and
any other) LISTs as before. Only names and resourceVersions are kept.

Reads use the controller's own identity (as discovery does) and only for the
local cluster; a watch that is refused (RBAC) or whose kind goes away stops,
and those reconciles LIST with the tenant's identity as before. A change
that reaches the watch a moment after a reconcile looked is seen by the next
one; what a reconcile writes is remembered from the API's own answer.

`on_change` is told of every change: the key of the Kustomization whose
object it is (from its owner labels), the object and its new
resourceVersion. It is what a health wait in progress waits on: a re-check
reads an object when this says it changed, rather than on a timer
(`health_checking`), and compares `versions` with its readings so that a
change told before the wait began is not lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from contextvars import Context

import structlog

from sluice_api.kustomize import NAME_LABEL, NAMESPACE_LABEL
from sluice_api.meta import ObjectId
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import ApiError, ApiUnavailable, Gone, NotFound
from sluice_runtime.kube.resources import ResourceType

log = structlog.get_logger(__name__)

RETRY = 2.0


class _Kind:
    def __init__(self) -> None:
        self.synced = False
        self.stopped = False
        self.versions: dict[str, dict[str, str]] = {}
        """namespace ("" when cluster-scoped) -> name -> resourceVersion."""

    def set(self, meta: Mapping[str, object], deleted: bool = False) -> None:
        namespace = str(meta.get("namespace") or "")
        name = str(meta.get("name") or "")
        names = self.versions.setdefault(namespace, {})
        if deleted:
            names.pop(name, None)
        else:
            names[name] = str(meta.get("resourceVersion") or "")


class AppliedWatch:
    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._kinds: dict[ResourceType, _Kind] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.on_change: Callable[[str, ObjectId, str], None] | None = None

    def versions(self, rt: ResourceType, namespace: str) -> Mapping[str, str] | None:
        kind = self._kinds.get(rt)
        if kind is None:
            kind = self._kinds[rt] = _Kind()
            # A fresh context: the watch is the controller's, not the reconcile's
            # that first asked (its log fields and request attribution stay out).
            self._tasks.append(
                asyncio.get_running_loop().create_task(
                    self._run(rt, kind), name=f"applied-watch-{rt.plural}", context=Context()
                )
            )
            return None
        if not kind.synced or kind.stopped:
            return None
        return kind.versions.get(namespace, {})

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _changed(self, rt: ResourceType, meta: Mapping[str, object]) -> None:
        labels = meta.get("labels")
        if self.on_change is None or not isinstance(labels, dict):
            return
        owner, owner_namespace = labels.get(NAME_LABEL), labels.get(NAMESPACE_LABEL)
        if owner and owner_namespace:
            namespace = str(meta.get("namespace") or "") if rt.namespaced else ""
            oid = ObjectId(rt.group, rt.kind, namespace, str(meta.get("name") or ""))
            self.on_change(
                f"{owner_namespace}/{owner}", oid, str(meta.get("resourceVersion") or "")
            )

    async def _run(self, rt: ResourceType, kind: _Kind) -> None:
        while True:
            try:
                listed = await self.client.list(
                    rt, label_selector=NAME_LABEL, page_size=5000, metadata_only=True
                )
                kind.versions = {}
                for item in listed.items:
                    kind.set(item.get("metadata") or {})
                kind.synced = True
                version = listed.resource_version
                while True:
                    async for event in self.client.watch(
                        rt, resource_version=version, label_selector=NAME_LABEL, metadata_only=True
                    ):
                        meta = event.object.get("metadata") or {}
                        version = str(meta.get("resourceVersion") or version)
                        if event.type != "BOOKMARK":
                            kind.set(meta, deleted=event.type == "DELETED")
                            self._changed(rt, meta)
            except Gone:
                kind.synced = False  # relist
            except ApiUnavailable:
                kind.synced = False
                await asyncio.sleep(RETRY)
            except (NotFound, ApiError) as error:
                # Refused or no longer served: reconciles LIST as the tenant instead.
                log.info("not watching applied objects", kind=rt.kind, error=str(error))
                kind.stopped = True
                return
