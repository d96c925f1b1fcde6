"""The benchmarks' readiness clock: one list, then a watch (fleet.watch_ready)."""

from __future__ import annotations

import asyncio
import re

import pytest

from e2e.fleet import watch_ready
from sluice_api.meta import FINALIZER
from sluice_runtime.kube.attributing import Request
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import ResourceType

OCIREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "ocirepositories", "OCIRepository")


async def made(kube: KubeClient, namespace: str, name: str) -> None:
    await kube.create(
        OCIREPO,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "OCIRepository",
            "metadata": {"name": name, "finalizers": [FINALIZER]},
            "spec": {"url": "oci://registry.example/app", "interval": "10m"},
        },
        namespace=namespace,
    )


async def marked_ready(kube: KubeClient, namespace: str, name: str) -> None:
    ready = {
        "type": "Ready", "status": "True", "reason": "Succeeded", "message": "stored",
        "observedGeneration": 1, "lastTransitionTime": "2026-11-24T00:00:00Z",
    }  # fmt: skip
    await kube.merge_patch(
        OCIREPO,
        name,
        {"status": {"observedGeneration": 1, "conditions": [ready]}},
        namespace=namespace,
        subresource="status",
    )


async def test_ready_objects_are_counted_from_the_list_and_the_watch(
    kube: KubeClient, namespace: str
) -> None:
    """One object Ready before the clock starts (seen by the list), two after it
    (seen by the watch); one never Ready, so three is the count that ends it."""
    for name in ("a", "b", "c", "never"):
        await made(kube, namespace, name)
    await marked_ready(kube, namespace, "a")

    async def later() -> None:
        await asyncio.sleep(0.5)
        await marked_ready(kube, namespace, "b")
        await marked_ready(kube, namespace, "c")

    lists: list[str] = []

    class Lists:
        def requested(self, request: Request) -> None:
            if request.verb == "list" and request.path.endswith("/ocirepositories"):
                lists.append(request.path)

    marking = asyncio.create_task(later())
    stop = kube.observe(Lists())
    try:
        await watch_ready(kube, OCIREPO, namespace, 3, limit=60)
    finally:
        stop()
    await marking
    assert len(lists) == 1, "one list, then the watch: not a poll"
    with pytest.raises(
        RuntimeError, match=re.escape("OCIRepositorys not ready after 1s, e.g. never")
    ):
        await watch_ready(kube, OCIREPO, namespace, 4, limit=1)
