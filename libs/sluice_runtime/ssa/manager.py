"""`ResourceManager`: one field manager's apply, dry-run, prune and health waits
over one client (which may impersonate a tenant) and its cluster's discovery.
"""

from __future__ import annotations

import asyncio

from sluice_runtime.kube.health import HealthReport, wait_for_health
from sluice_runtime.ssa.applying import Applier
from sluice_runtime.ssa.changeset import ChangeSet
from sluice_runtime.ssa.deleting import Deleter


class ResourceManager(Applier, Deleter):
    """Applies, dry-runs and prunes sets of objects with one field manager."""

    async def wait_for_set(
        self,
        changeset: ChangeSet,
        *,
        timeout: float,
        interval: float | None = None,
        cancel: asyncio.Event | None = None,
    ) -> HealthReport:
        """Wait for every applied (neither skipped nor deleted) object of `changeset`
        to be healthy, starting from the health the apply already showed."""
        refs = changeset.health_refs()
        return await wait_for_health(
            self.client,
            refs,
            timeout=timeout,
            interval=self.wait_interval if interval is None else interval,
            cancel=cancel,
            concurrency=self.concurrency,
            known=changeset.observed(refs),
        )
