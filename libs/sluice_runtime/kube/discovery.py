"""From `apiVersion` + `kind` in a manifest to the resource URL that serves it.

Manifests name kinds; the API serves plural resources, some namespaced and
some not, and only the server knows which (CRDs add kinds at run time). The
mapper asks API discovery (`/api/v1`, `/apis/<group>/<version>`) and caches
each group-version's answer. A miss refreshes that group-version once before
failing, because a CRD applied earlier in the same run is served only after
it was cached as missing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import KubeError, NotFound
from sluice_runtime.kube.resources import ResourceType


class UnknownKind(KubeError):
    """The API server serves no such kind in that group-version (yet).

    `served` lists the apiVersions in which the server does serve the kind:
    then the manifest's version is the problem, not a missing CRD.
    """

    def __init__(self, api_version: str, kind: str, *, served: Sequence[str] = ()) -> None:
        self.api_version = api_version
        self.kind = kind
        self.served = list(served)
        super().__init__(_unknown_kind_message(api_version, kind, self.served))


def _unknown_kind_message(api_version: str, kind: str, served: Sequence[str]) -> str:
    # What to do goes in parentheses: callers join several failures with "; ".
    if served:
        return (
            f"the API server does not serve {kind} in '{api_version}' "
            f"(use a version it serves: {', '.join(served)})"
        )
    group, _ = split_api_version(api_version)
    # Groups without a dot are Kubernetes' own (core, apps, batch...): no CRD
    # can add to them, so "install its CRD" would send the reader astray.
    if "." not in group:
        return (
            f"the API server serves no kind '{kind}' in '{api_version}' (check kind and apiVersion)"
        )
    return (
        f"the API server serves no kind '{kind}' in '{api_version}' "
        "(install its CustomResourceDefinition first, or add it to the same set)"
    )


def split_api_version(api_version: str) -> tuple[str, str]:
    """`apps/v1` -> ("apps", "v1"); the core group's `v1` -> ("", "v1")."""
    group, _, version = api_version.rpartition("/")
    return group, version


class RestMapper:
    """Kinds to `ResourceType`s for one client, from API discovery, cached.

    Build one per identity: discovery is readable by every authenticated user,
    but an impersonating client's mapper keeps its requests under that user.
    """

    def __init__(self, client: KubeClient) -> None:
        self._client = client
        # group-version -> kind -> resource; a group-version the server does
        # not serve is cached as an empty mapping until the next miss.
        self._kinds: dict[str, dict[str, ResourceType]] = {}
        # group -> its versions, preferred first.
        self._versions: dict[str, list[str]] = {}
        # "" -> every served group-version, core first, each group's preferred first.
        self._groups: dict[str, list[str]] = {}
        # Fetch counters let concurrent misses share one refresh.
        self._fetches: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def invalidate(self) -> None:
        """Forget everything; the next lookups ask the server again."""
        self._kinds.clear()
        self._versions.clear()
        self._groups.clear()

    async def resource_for(self, api_version: str, kind: str) -> ResourceType:
        """The resource serving `kind` in `api_version`, or UnknownKind."""
        found = self._kinds.get(api_version, {}).get(kind)
        if found is not None:
            return found
        await self._refresh(api_version, self._fetch_group_version)
        found = self._kinds.get(api_version, {}).get(kind)
        if found is None:
            raise UnknownKind(api_version, kind, served=await self._served_in(api_version, kind))
        return found

    async def _served_in(self, api_version: str, kind: str) -> list[str]:
        """The other apiVersions of the group that serve `kind` (asked on a miss only)."""
        group, _ = split_api_version(api_version)
        try:
            await self._refresh(f"group:{group}", self._fetch_group)
            served = []
            for version in self._versions.get(group) or []:
                other = f"{group}/{version}" if group else version
                if other == api_version:
                    continue
                if other not in self._kinds:
                    await self._refresh(other, self._fetch_group_version)
                if kind in self._kinds.get(other, {}):
                    served.append(other)
        except KubeError:
            return []  # only a better message was at stake
        return served

    async def resource_for_kind(self, group: str, kind: str) -> ResourceType:
        """The resource serving `kind` in any version of `group`, preferred version first.

        Inventories record a version, but pruning must still work after the
        server stopped serving it; any served version reaches the same object.
        """
        for attempt in range(2):
            if attempt or group not in self._versions:
                await self._refresh(f"group:{group}", self._fetch_group)
            for version in self._versions.get(group) or []:
                api_version = f"{group}/{version}" if group else version
                with contextlib.suppress(UnknownKind):
                    return await self.resource_for(api_version, kind)
        raise UnknownKind(group or "v1", kind)

    async def resource_for_any_group(self, kind: str) -> ResourceType:
        """The resource serving `kind` in the first group that serves it: the core group,
        then the others in the server's discovery order (built-in groups first), each
        group's preferred version first.

        For references that name only a kind, such as v1beta1 health checks.
        """
        for attempt in range(2):
            if attempt or "" not in self._groups:
                await self._refresh("groups", self._fetch_groups)
            for api_version in self._groups.get("", []):
                if attempt or api_version not in self._kinds:
                    await self._refresh(api_version, self._fetch_group_version)
                found = self._kinds.get(api_version, {}).get(kind)
                if found is not None:
                    return found
        raise UnknownKind("", kind)

    # -- fetching ---------------------------------------------------------

    async def _refresh(self, key: str, fetch: Callable[[str], Awaitable[None]]) -> None:
        seen = self._fetches.get(key, 0)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            # Someone else refreshed while we waited: their answer is fresh.
            if self._fetches.get(key, 0) == seen:
                await fetch(key)
                self._fetches[key] = seen + 1

    async def _fetch_group_version(self, api_version: str) -> None:
        group, version = split_api_version(api_version)
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            answer = await self._client.request("GET", path)
        except NotFound:
            self._kinds[api_version] = {}
            return
        self._kinds[api_version] = _kinds_of(answer or {}, group=group, version=version)

    async def _fetch_group(self, key: str) -> None:
        group = key.removeprefix("group:")
        if not group:
            self._versions[group] = ["v1"]
            return
        try:
            answer = await self._client.request("GET", f"/apis/{group}")
        except NotFound:
            self._versions[group] = []
            return
        preferred = ((answer or {}).get("preferredVersion") or {}).get("version")
        versions = [v.get("version") for v in (answer or {}).get("versions") or []]
        ordered = [preferred] if preferred else []
        ordered += [v for v in versions if v and v != preferred]
        self._versions[group] = ordered

    async def _fetch_groups(self, key: str) -> None:
        answer = await self._client.request("GET", "/apis")
        ordered = ["v1"]
        for group in (answer or {}).get("groups") or []:
            preferred = (group.get("preferredVersion") or {}).get("groupVersion")
            versions = [str(v.get("groupVersion") or "") for v in group.get("versions") or []]
            ordered += [v for v in [preferred, *versions] if v and v not in ordered]
        self._groups[""] = ordered


def _kinds_of(answer: Mapping[str, Any], *, group: str, version: str) -> dict[str, ResourceType]:
    kinds: dict[str, ResourceType] = {}
    for resource in answer.get("resources") or []:
        name = str(resource.get("name") or "")
        kind = str(resource.get("kind") or "")
        # `deployments/status`, `pods/log`: subresources share their parent's kind.
        if not name or "/" in name or not kind:
            continue
        kinds.setdefault(
            kind,
            ResourceType(
                group=group,
                version=version,
                plural=name,
                kind=kind,
                namespaced=bool(resource.get("namespaced")),
            ),
        )
    return kinds
