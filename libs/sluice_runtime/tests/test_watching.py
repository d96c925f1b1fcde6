"""Informer resumption: dropped connections and expired watches lose no event.

The informer talks to the API server through a TCP proxy the test can cut,
which is what a load balancer timeout or an API server restart looks like
from the controller's side.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest_asyncio
import yaml

from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.informing.watching import Change, Informer
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import NotFound

from .conftest import GITREPO, eventually, gitrepo


class CuttableProxy:
    """A loopback TCP proxy whose connections the test can sever at will."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.accepting = True
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def cut(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.accepting:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update({writer, up_writer})

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))


@pytest_asyncio.fixture(loop_scope="session")
async def proxied(
    cluster: Cluster, tmp_path: Path
) -> AsyncIterator[tuple[CuttableProxy, KubeClient]]:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    server = config["clusters"][0]["cluster"]["server"]
    host, port = server.removeprefix("https://").rsplit(":", 1)
    proxy = CuttableProxy(host, int(port))
    await proxy.start()
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    client = await KubeClient.connect(kubeconfig=str(path), qps=0)
    yield proxy, client
    await client.close()
    await proxy.stop()


@dataclass
class Calls:
    """An InformerObserver that counts lists and watches."""

    lists: int = 0
    watches: int = 0

    def listed(self) -> None:
        self.lists += 1

    def watched(self) -> None:
        self.watches += 1


def journal_of(informer: Informer) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []

    def record(change: Change) -> None:
        seen.append((change.kind, change.key))

    informer.add_handler(record)
    return seen


async def test_a_dropped_watch_resumes_without_losing_events(
    kube: KubeClient, namespace: str, proxied: tuple[CuttableProxy, KubeClient]
) -> None:
    proxy, client = proxied
    await kube.create(GITREPO, gitrepo("before", namespace))
    calls = Calls()
    informer = Informer(client, GITREPO, namespace=namespace, max_backoff=0.5, observer=calls)
    seen = journal_of(informer)
    await informer.start()
    try:
        await asyncio.wait_for(informer.synced.wait(), 10)
        assert ("added", f"{namespace}/before") in seen

        # Sever the watch and keep the informer out while the world changes.
        proxy.accepting = False
        proxy.cut()
        await kube.create(GITREPO, gitrepo("during", namespace))
        await kube.merge_patch(
            GITREPO, "before", {"spec": {"url": "https://example.com/changed"}}, namespace=namespace
        )
        await kube.create(GITREPO, gitrepo("short-lived", namespace))
        await kube.delete(GITREPO, "short-lived", namespace=namespace)
        await asyncio.sleep(0.5)
        proxy.accepting = True

        await eventually(
            lambda: ("deleted", f"{namespace}/short-lived") in seen, message="resumed watch"
        )
        assert ("added", f"{namespace}/during") in seen
        assert ("updated", f"{namespace}/before") in seen
        before = informer.store.get(f"{namespace}/before")
        assert before is not None and before["spec"]["url"] == "https://example.com/changed"
        assert calls.lists == 1, "resuming from the last version needs no relist"
        assert calls.watches >= 2
    finally:
        await informer.stop()


async def test_an_expired_watch_relists_and_notices_deletions(
    kube: KubeClient, namespace: str, proxied: tuple[CuttableProxy, KubeClient]
) -> None:
    proxy, client = proxied
    for name in ("keep", "vanish"):
        await kube.create(GITREPO, gitrepo(name, namespace))
    calls = Calls()
    informer = Informer(client, GITREPO, namespace=namespace, max_backoff=0.5, observer=calls)
    seen = journal_of(informer)
    await informer.start()
    try:
        await asyncio.wait_for(informer.synced.wait(), 10)
        proxy.accepting = False
        proxy.cut()
        await kube.delete(GITREPO, "vanish", namespace=namespace)
        await kube.create(GITREPO, gitrepo("fresh", namespace))
        # Pretend we were away so long that our version left the watch cache:
        # the API server answers 410 Gone and only a relist can catch up.
        informer._resource_version = "1"
        await asyncio.sleep(0.3)
        proxy.accepting = True

        await eventually(lambda: calls.lists >= 2, message="relist after 410 Gone")
        await eventually(lambda: ("deleted", f"{namespace}/vanish") in seen)
        assert ("added", f"{namespace}/fresh") in seen
        assert sorted(informer.store.list_keys()) == [f"{namespace}/fresh", f"{namespace}/keep"]
        with contextlib.suppress(NotFound):
            await kube.get(GITREPO, "vanish", namespace)
            raise AssertionError("object should be gone")
    finally:
        await informer.stop()


async def test_cached_objects_leave_out_managed_fields_and_share_keys(
    kube: KubeClient, namespace: str
) -> None:
    """What the store keeps, listed or watched, is the object without its managedFields,
    its keys shared with every other cached object."""
    await kube.create(GITREPO, gitrepo("listed", namespace))
    informer = Informer(kube, GITREPO, namespace=namespace)
    await informer.start()
    try:
        await asyncio.wait_for(informer.synced.wait(), 10)
        await kube.create(GITREPO, gitrepo("watched", namespace))
        await kube.merge_patch(
            GITREPO, "listed", {"spec": {"url": "https://example.com/changed"}}, namespace=namespace
        )
        await eventually(lambda: f"{namespace}/watched" in informer.store)
        await eventually(
            lambda: (
                (informer.store.get(f"{namespace}/listed") or {})["spec"]["url"]
                == "https://example.com/changed"
            )
        )
        for name in ("listed", "watched"):
            live = await kube.get(GITREPO, name, namespace)
            assert live["metadata"]["managedFields"], "the API server does record them"
            cached = informer.store.get(f"{namespace}/{name}")
            assert cached is not None
            assert "managedFields" not in cached["metadata"]
            assert cached["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]
        # Decoded from separate events, yet their keys are the same string objects.
        listed, watched = (informer.store.get(f"{namespace}/{n}") for n in ("listed", "watched"))
        assert listed is not None and watched is not None
        shared = {id(k) for k in listed["spec"]} & {id(k) for k in watched["spec"]}
        assert len(shared) == len(watched["spec"]) > 0
    finally:
        await informer.stop()
