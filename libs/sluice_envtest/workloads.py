"""Stand-ins for the kubelet and the deployment controller, for tests and benchmarks.

The local control plane has no kubelet, scheduler or controller-manager, so
a Deployment never reports progress by itself. This task does what those
would do for a rollout that succeeds: it sets `status.observedGeneration`
and the replica counts, and the `Available`/`Progressing` conditions, on
every Deployment (optionally only those it is told about) whose status lags
its spec. Tests that want an unhealthy Deployment simply leave it out.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

from sluice_api.meta import format_time
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import KubeError
from sluice_runtime.kube.resources import ResourceType

DEPLOYMENT = ResourceType("apps", "v1", "deployments", "Deployment")


def _now() -> str:
    return format_time(datetime.now(UTC), fraction="none")


def rolled_out_status(obj: dict[str, Any]) -> dict[str, Any]:
    replicas = int((obj.get("spec") or {}).get("replicas", 1))
    now = _now()
    return {
        "observedGeneration": obj["metadata"].get("generation", 1),
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "conditions": [
            {
                "type": "Available",
                "status": "True",
                "reason": "MinimumReplicasAvailable",
                "message": "Deployment has minimum availability.",
                "lastUpdateTime": now,
                "lastTransitionTime": now,
            },
            {
                "type": "Progressing",
                "status": "True",
                "reason": "NewReplicaSetAvailable",
                "message": "ReplicaSet has successfully progressed.",
                "lastUpdateTime": now,
                "lastTransitionTime": now,
            },
        ],
    }


async def roll_out(client: KubeClient, namespace: str, name: str) -> None:
    """Make one Deployment report a finished rollout of its current generation."""
    obj = await client.get(DEPLOYMENT, name, namespace)
    await client.merge_patch(
        DEPLOYMENT,
        name,
        {"status": rolled_out_status(obj)},
        namespace=namespace,
        subresource="status",
    )


@contextlib.asynccontextmanager
async def simulated_rollouts(
    client: KubeClient,
    *,
    namespace: str | None = None,
    accept: Callable[[dict[str, Any]], bool] = lambda obj: True,
    interval: float = 0.2,
) -> AsyncIterator[None]:
    """While active, every accepted Deployment that lags is rolled out."""

    async def loop() -> None:
        while True:
            try:
                listed = await client.list(DEPLOYMENT, namespace=namespace)
                for obj in listed.items:
                    status = obj.get("status") or {}
                    if status.get("observedGeneration") == obj["metadata"].get("generation"):
                        continue
                    if not accept(obj):
                        continue
                    meta = obj["metadata"]
                    with contextlib.suppress(KubeError):
                        await client.merge_patch(
                            DEPLOYMENT,
                            meta["name"],
                            {"status": rolled_out_status(obj)},
                            namespace=meta["namespace"],
                            subresource="status",
                        )
            except KubeError:
                pass
            await asyncio.sleep(interval)

    task = asyncio.get_running_loop().create_task(loop(), name="simulated-rollouts")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
