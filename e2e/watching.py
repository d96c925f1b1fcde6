"""One kind in one namespace, followed over the API as `kubectl get -w` follows it.

The fleet's wait (`e2e.fleet.all_ready`) and the benchmarks' observer
(`e2e.bench.cluster.Watching`) both list once, watch from that list's
resourceVersion, resume the watch where a dropped stream left it and list
again only when the API answers 410 Gone. That loop lives here once, so a fix
to it (the relist that met a busy API and ended the watcher) reaches both.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import ApiUnavailable, Gone
from sluice_runtime.kube.resources import ResourceType

RETRY_AFTER = 0.2
"""Seconds before asking again an API that did not answer (list or watch)."""


@dataclass(frozen=True, slots=True)
class Listed:
    """Every object there is, from a list: what the follower held before is replaced."""

    objects: list[JSON]


@dataclass(frozen=True, slots=True)
class Changed:
    """One object changed (or, `deleted`, went away) after the last list."""

    object: JSON
    deleted: bool


async def follow(
    client: KubeClient, rt: ResourceType, namespace: str
) -> AsyncGenerator[Listed | Changed, None]:
    """A `Listed` first, then each change; another `Listed` after every relist.

    Runs until the caller stops iterating (close it with `aclosing` to end its
    watch at once). A caller that has seen enough after the first `Listed`
    stops there, having listed once and watched never. Bookmarks only move
    the version the watch resumes from; they are not yielded.
    """
    version = ""
    while True:
        try:
            # The list too: a relist after Gone that met an API too busy to
            # answer ended the benchmarks' watcher, the waits after it timed
            # out, and the ApiUnavailable surfaced at exit as a traceback.
            if not version:
                listed = await client.list(rt, namespace=namespace)
                version = listed.resource_version
                yield Listed(listed.items)
                continue
            events = client.watch(rt, namespace=namespace, resource_version=version)
            async with contextlib.aclosing(events):  # a caller that stops ends the watch now
                async for event in events:
                    version = event.object.get("metadata", {}).get("resourceVersion", version)
                    if event.type != "BOOKMARK":
                        yield Changed(event.object, deleted=event.type == "DELETED")
        except Gone:
            version = ""  # compacted past our version: list again
        except ApiUnavailable:
            await asyncio.sleep(RETRY_AFTER)
