"""`all_ready`: the fleet's wait, seen on a watch after one list (as `kubectl wait`)."""

from __future__ import annotations

import asyncio

import pytest

from e2e.fleet import all_ready
from sluice_runtime.kube.attributing import Request
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import CONFIG_MAP


def done(obj: JSON) -> bool:
    return (obj.get("data") or {}).get("state") == "done"


def config_map(name: str, state: str) -> JSON:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"state": state}}  # fmt: skip


async def test_objects_passing_before_and_after_the_wait_began_are_all_counted(
    kube: KubeClient, namespace: str
) -> None:
    await kube.create(CONFIG_MAP, config_map("early", "done"), namespace=namespace)
    await kube.create(CONFIG_MAP, config_map("late", "pending"), namespace=namespace)
    await kube.create(CONFIG_MAP, config_map("gone", "done"), namespace=namespace)
    lists: list[str] = []

    class Lists:
        def requested(self, request: Request) -> None:
            if request.verb == "list" and request.path.endswith("/configmaps"):
                lists.append(request.path)

    stop = kube.observe(Lists())
    waiting = asyncio.ensure_future(all_ready(kube, CONFIG_MAP, namespace, 3, check=done))
    await asyncio.sleep(0.5)
    # A passing object deleted no longer counts: three pass only once both below are done.
    await kube.delete(CONFIG_MAP, "gone", namespace=namespace)
    await kube.merge_patch(CONFIG_MAP, "late", {"data": {"state": "done"}}, namespace=namespace)
    await asyncio.sleep(0.5)
    assert not waiting.done()
    await kube.create(CONFIG_MAP, config_map("new", "done"), namespace=namespace)
    try:
        assert await asyncio.wait_for(waiting, 60) >= 0
    finally:
        stop()
    assert len(lists) == 1, "one list, then the watch: not a poll"


async def test_a_wait_past_its_limit_names_how_many_passed_and_one_that_did_not(
    kube: KubeClient, namespace: str
) -> None:
    await kube.create(CONFIG_MAP, config_map("ok", "done"), namespace=namespace)
    await kube.create(CONFIG_MAP, config_map("stuck", "pending"), namespace=namespace)
    with pytest.raises(RuntimeError, match=r"not ready after 1s \(1 of 2\), e\.g\. stuck"):
        await all_ready(kube, CONFIG_MAP, namespace, 2, limit=1, check=done)
