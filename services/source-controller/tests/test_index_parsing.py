"""A HelmRepository's index is the tenant's YAML: parsed off the loop, within limits."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio

from sluice_envtest.chartrepo import ChartRepository
from sluice_envtest.harness import condition
from sluice_runtime.kube.resources import ResourceType

from .conftest import SourceController

HELMREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "helmrepositories", "HelmRepository")


def helmrepo(name: str, url: str) -> dict[str, Any]:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "HelmRepository",
        "metadata": {"name": name},
        "spec": {"url": url, "interval": "10m"},
    }


@pytest_asyncio.fixture(loop_scope="session")
async def repos(tmp_path: Path) -> AsyncIterator[tuple[ChartRepository, ChartRepository]]:
    large, small = ChartRepository(tmp_path / "large"), ChartRepository(tmp_path / "small")
    for repo in (large, small):
        await repo.start()
    try:
        yield large, small
    finally:
        for repo in (large, small):
            await repo.stop()


async def test_a_large_index_parses_off_the_loop_while_another_repository_reconciles(
    source_controller: SourceController, repos: tuple[ChartRepository, ChartRepository]
) -> None:
    sc = source_controller
    large, small = repos
    # 12 MB of one-byte scalars: seconds of parsing until the node limit (one per 12 bytes of
    # the 50 MiB size limit) refuses it; on the loop, every other source waited meanwhile.
    (large.charts / "index.yaml").write_bytes(
        b"apiVersion: v1\nentries:\n  x: [" + b"0," * 6_000_000 + b"]\n"
    )
    small.add("podinfo", "1.0.0")
    await sc.client.create(HELMREPO, helmrepo("large", large.url), namespace=sc.namespace)
    for _ in range(3000):  # until the controller has asked for the large index
        if large.requests["/index.yaml"]:
            break
        await asyncio.sleep(0.01)
    assert large.requests["/index.yaml"]
    await sc.client.create(HELMREPO, helmrepo("small", small.url), namespace=sc.namespace)
    await sc.wait_ready(HELMREPO, "small")
    # The order of events: the small index was stored while the large one still parsed.
    ready = condition(await sc.client.get(HELMREPO, "large", sc.namespace), "Ready") or {}
    assert ready.get("reason") != "IndexationFailed"
    obj = await sc.wait_failed(HELMREPO, "large", "IndexationFailed", timeout=120)
    message = condition(obj, "Ready")["message"]  # type: ignore[index]
    assert "index is too large: YAML expands to more than 4369066 nodes (the node limit" in message


async def test_an_index_over_its_node_limit_is_refused_naming_it(
    source_controller: SourceController, repos: tuple[ChartRepository, ChartRepository]
) -> None:
    sc = source_controller
    large, _ = repos
    # Nested aliases: 600 bytes that expand to 10^9 nodes.
    levels = "".join(
        f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]\n" for i in range(1, 10)
    )
    (large.charts / "index.yaml").write_text("apiVersion: v1\nentries: {}\nl0: &l0 lol\n" + levels)
    await sc.client.create(HELMREPO, helmrepo("laughs", large.url), namespace=sc.namespace)
    obj = await sc.wait_failed(HELMREPO, "laughs", "IndexationFailed")
    message = condition(obj, "Ready")["message"]  # type: ignore[index]
    assert "index is too large: YAML expands to more than 4369066 nodes (the node limit" in message
    assert "artifact" not in obj["status"]
