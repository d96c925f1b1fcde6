"""Host name lookups for our aiohttp clients, on threads of their own.

aiohttp's default resolver (`ThreadedResolver`) calls `getaddrinfo` through
`loop.getaddrinfo`, that is in the event loop's default executor: the pool
that also writes artifacts and runs the rest of a controller's blocking
work. A DNS server that stops answering holds each lookup for the resolver
library's full timeout (seconds per attempt, per server), so a few Git or
Helm hosts named by users could occupy every thread of that pool and stall
reconciles that never asked for a name. `LookupResolver` runs lookups in a
small pool of their own (`LOOKUP_THREADS`), gives each one up after
`timeout` seconds with an error naming the host, and a lookup given up
before a thread took it never runs.

Every aiohttp session of ours that connects to a host a user or an operator
named makes its connector with `connector()`, the Kubernetes clients' too
(`kube.connecting` remakes kubernetes-asyncio's session): a tenant's
kubeconfig names the server of a remote cluster.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

LOOKUP_THREADS = 4
"""Lookups at once, per process: more wait in the pool's queue, each under its timeout."""

LOOKUP_TIMEOUT = 30.0
"""Seconds a lookup may take, queued or running: aiohttp's default for a
socket connect, the step that follows it."""

_LOOKUPS = ThreadPoolExecutor(max_workers=LOOKUP_THREADS, thread_name_prefix="sluice-lookup")
"""Threads start on the first lookup; a process that names no host has none."""

_NUMERIC = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
_NAME_NUMERIC = socket.NI_NUMERICHOST | socket.NI_NUMERICSERV


class UnresolvedHost(OSError):
    """A host name that did not resolve, or not in time; `host` names it.

    An OSError, so aiohttp reports it as it reports a DNS failure
    (`ClientConnectorError`, with this message in brackets).
    """

    def __init__(self, host: str, code: int | None, message: str) -> None:
        super().__init__(code, message)
        self.host = host


class LookupResolver(AbstractResolver):
    """`getaddrinfo` on the lookup pool, under `timeout`; results as aiohttp's own resolver's."""

    def __init__(self, *, timeout: float = LOOKUP_TIMEOUT, executor: Executor = _LOOKUPS) -> None:
        self._timeout = timeout
        self._executor = executor

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        infos = await self._run(
            host, socket.getaddrinfo, host, port, family, socket.SOCK_STREAM, 0,
            socket.AI_ADDRCONFIG,
        )  # fmt: skip
        found: list[ResolveResult] = []
        for af, _, proto, _, address in infos:
            if af == socket.AF_INET6:
                if len(address) < 4:
                    continue  # a Python built without IPv6
                if address[3]:
                    # A link-local address's scope id travels in its text form.
                    numeric, service = await self._run(
                        host, socket.getnameinfo, address, _NAME_NUMERIC
                    )
                    address = (numeric, int(service))
            found.append(
                ResolveResult(
                    hostname=host,
                    host=str(address[0]),
                    port=int(address[1]),
                    family=af,
                    proto=proto,
                    flags=_NUMERIC,
                )
            )
        return found

    async def _run(self, host: str, call: Any, *args: Any) -> Any:
        """`call(*args)` in the pool; given up while still queued, it never runs."""
        work = self._executor.submit(call, *args)
        try:
            async with asyncio.timeout(self._timeout):
                return await asyncio.wrap_future(work)
        except TimeoutError:
            raise UnresolvedHost(
                host, errno.ETIMEDOUT, f"lookup of host {host} timed out after {self._timeout}s"
            ) from None
        except socket.gaierror as error:
            raise UnresolvedHost(
                host, error.errno, f"cannot resolve host {host}: {error.strerror}"
            ) from None
        finally:
            # Now, not on the loop's next turn as asyncio would: a thread freed
            # meanwhile would start it. A lookup already running cannot be stopped.
            work.cancel()

    async def close(self) -> None:
        """Nothing to close: the pool is the process's, shared by every session."""


def connector(*, lookup_timeout: float = LOOKUP_TIMEOUT, **options: Any) -> aiohttp.TCPConnector:
    """A TCPConnector (`options` as aiohttp's) that looks host names up with `LookupResolver`."""
    return aiohttp.TCPConnector(resolver=LookupResolver(timeout=lookup_timeout), **options)
