"""One writer of an object's status for the length of one reconcile.

As Flux's `SerialPatcher`: every write is a merge patch from what this
patcher last wrote (at first, what the cache held), so a mid-reconcile
`progress` and the final write never repeat each other's changes, and a
status that did not change costs no request.
"""

from __future__ import annotations

import structlog

from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import KubeError, NotFound
from sluice_runtime.kube.patching import merge_patch
from sluice_runtime.kube.resources import ResourceType

log = structlog.get_logger(__name__)


class StatusPatcher:
    def __init__(self, client: KubeClient, rt: ResourceType, raw: JSON) -> None:
        self._client = client
        self._rt = rt
        self._name = str(raw["metadata"]["name"])
        self._namespace: str | None = raw["metadata"].get("namespace")
        self.base: JSON = raw.get("status") or {}
        """The status as this patcher last saw it written."""

    async def write(self, new: JSON) -> bool:
        """Patch status from `base` to `new`; False when the write failed (the
        base then stays what the server has)."""
        patch = merge_patch(self.base, new)
        if not patch:
            return True
        try:
            await self._client.merge_patch(
                self._rt,
                self._name,
                {"status": patch},
                namespace=self._namespace,
                subresource="status",
            )
        except NotFound:
            pass  # deleted while we worked: nothing left to tell
        except KubeError as error:
            log.warning("status update failed", error=str(error))
            return False
        self.base = new
        return True
