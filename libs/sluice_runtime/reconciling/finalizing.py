"""Adding the finalizer of a first reconcile, before the steps or beside them.

The finalizer is the promise that a deleted object's work is undone (its
artifacts removed, its applied objects pruned), so nothing the steps do may
be *published* before it is in place. For a kind whose steps only produce
what `finalize` removes (a source's artifact in storage), the patch need not
hold the steps up: it is sent alongside them, and the status write waits
for its answer. Under load that patch is a round trip of the API server's
queue, close to half a source reconcile's wall time (issue 19).

If the patch fails, the object never carried the finalizer, so a deletion
would not come back to us: the runner calls `finalize` itself for what the
steps stored, and the status stays unwritten.
"""

from __future__ import annotations

import asyncio
from typing import Literal

import structlog

from sluice_api.meta import FINALIZER
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import KubeError, NotFound
from sluice_runtime.kube.patching import add_finalizer_ops
from sluice_runtime.kube.resources import ResourceType

log = structlog.get_logger(__name__)

Added = Literal["added", "gone", "failed"]
"""In place; the object is gone (deleted before the patch); or the patch failed."""


def needed(meta: JSON) -> bool:
    return FINALIZER not in (meta.get("finalizers") or [])


async def add_finalizer(client: KubeClient, rt: ResourceType, meta: JSON) -> Added:
    try:
        await client.json_patch(
            rt,
            meta["name"],
            add_finalizer_ops(meta.get("finalizers"), FINALIZER),
            namespace=meta.get("namespace"),
        )
    except NotFound:
        return "gone"
    except KubeError as error:
        log.info("adding finalizer failed, retrying", error=str(error))
        return "failed"
    return "added"


class FinalizerInFlight:
    """The finalizer patch sent beside the steps; `added()` is its answer, awaited
    by every status write (any number of times: the task keeps its result)."""

    def __init__(self, client: KubeClient, rt: ResourceType, meta: JSON) -> None:
        self._task = asyncio.create_task(
            add_finalizer(client, rt, meta), name=f"finalizer {meta.get('name', '')}"
        )

    async def added(self) -> Added:
        # Shielded: a status write cancelled mid-wait must not cancel the patch,
        # whose answer the runner still reads.
        return await asyncio.shield(self._task)

    def cancel(self) -> None:
        """Called when the reconcile ends without reading the answer (cancelled)."""
        if not self._task.done():
            self._task.cancel()
