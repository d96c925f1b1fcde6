"""Host names are looked up on threads of their own, never in the loop's default executor."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor

import aiohttp
import pytest

from sluice_runtime.git.advertising import (
    CONTENT_TYPE,
    AdvertisementError,
    close,
    list_refs,
)
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.kubeconfigs import Credentials
from sluice_runtime.kube.resources import NAMESPACE
from sluice_runtime.resolving import LookupResolver

A = "a" * 40


def pkt(line: str) -> bytes:
    return b"%04x" % (len(line) + 4) + line.encode()


ADVERTISEMENT = (
    pkt("# service=git-upload-pack\n") + b"0000" + pkt(f"{A} refs/heads/main\n") + b"0000"
)


NAMESPACE_JSON = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}})


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A smart HTTP Git server with one branch that is also an API server with
    one namespace: one answer per connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    body, kind = (
        (NAMESPACE_JSON.encode(), "application/json")
        if head.startswith(b"GET /api/")
        else (ADVERTISEMENT, CONTENT_TYPE)
    )
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: " + kind.encode() + b"\r\n"
        b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    )
    await writer.drain()
    writer.close()


async def anonymous_refs(url: str) -> dict[str, str]:
    return await list_refs(url, username=None, password=None, bearer_token=None, timeout=30)


def with_default_executor_blocked(scenario: Callable[[int], Awaitable[None]]) -> None:
    """Run `scenario(port)` on a loop of its own whose default executor's one
    thread is held by a call that returns only once the scenario is over: what a
    hung artifact write or a hung DNS server does to the shared pool."""
    release = threading.Event()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
        blocked = loop.run_in_executor(None, release.wait)
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        try:
            # A guard, not a measure: a lookup in the default executor waits forever.
            await asyncio.wait_for(scenario(server.sockets[0].getsockname()[1]), 60)
            assert not blocked.done(), "the default executor was free after all"
        finally:
            release.set()
            await close()
            server.close()

    asyncio.run(main())


def test_a_git_host_resolves_while_the_default_executor_is_saturated() -> None:
    async def scenario(port: int) -> None:
        assert await anonymous_refs(f"http://localhost:{port}/repo.git") == {"refs/heads/main": A}

    with_default_executor_blocked(scenario)


def test_a_session_with_the_resolver_connects_by_name_while_the_default_executor_is_busy() -> None:
    async def scenario(port: int) -> None:
        connector = aiohttp.TCPConnector(resolver=LookupResolver())
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.get(f"http://localhost:{port}/info/refs?service=git-upload-pack") as answer,
        ):
            assert await answer.read() == ADVERTISEMENT

    with_default_executor_blocked(scenario)


def test_a_cluster_named_in_a_tenant_kubeconfig_resolves_while_the_default_executor_is_busy() -> (
    None
):
    async def scenario(port: int) -> None:
        credentials = Credentials(server=f"http://localhost:{port}", token="t")
        client = await KubeClient.from_credentials(credentials, verify=False)
        try:
            assert (await client.get(NAMESPACE, "a"))["metadata"]["name"] == "a"
        finally:
            await client.close()

    with_default_executor_blocked(scenario)


async def test_a_failed_lookup_names_the_host() -> None:
    with pytest.raises(AdvertisementError) as raised:
        await anonymous_refs("http://no-such-host.invalid/repo.git")
    assert raised.value.message.startswith(
        "failed to list refs of no-such-host.invalid: cannot resolve host no-such-host.invalid: "
    ), raised.value.message
    await close()


async def test_a_lookup_that_does_not_finish_in_time_names_the_host_and_is_dropped() -> None:
    """The resolver's pool saturated: the lookup queued behind is given up at the
    resolver's timeout, with an error naming the host, and never runs later."""

    class Pool(ThreadPoolExecutor):
        submitted: list[Future[object]] = []

        def submit(
            self, fn: Callable[..., object], /, *args: object, **kwargs: object
        ) -> Future[object]:
            future = super().submit(fn, *args, **kwargs)
            self.submitted.append(future)
            return future

    pool = Pool(max_workers=1)
    release = threading.Event()
    holding = asyncio.get_running_loop().run_in_executor(pool, release.wait)
    try:
        with pytest.raises(OSError, match=r"lookup of host localhost timed out after 0\.1s"):
            await LookupResolver(timeout=0.1, executor=pool).resolve("localhost", 80)
    finally:
        release.set()
        await holding
    pool.shutdown(wait=True)
    lookup = pool.submitted[-1]
    assert lookup.cancelled(), "the lookup given up still ran once a thread was free"
