"""A fault-injecting HTTP proxy on loopback, in front of a real git, registry or chart server.

The chaos suite needs source servers that misbehave the ways real ones do
(a hung load balancer, a reset connection, a body cut off mid-transfer, a
500 from a sick backend) while the bytes, when they do flow, stay exactly
what the real server sends. So this proxy forwards every request to the
real server and only then applies the fault the test has switched on:

- `Fault.NONE`: the upstream answer, unchanged.
- `Fault.ERROR`: `500 Internal Server Error`, the upstream not asked.
- `Fault.RESET`: the connection is reset (RST, SO_LINGER 0) before any byte.
- `Fault.TRUNCATE`: the upstream answer's headers, its declared length, and
  only the first half of its body; then the connection is cut. That is what
  a client sees when a transfer dies: the framing promises more bytes than
  arrive.
- `Fault.HANG`: not one byte until the fault is switched off (then the
  connection is cut), so only the client's own timeout ends the wait.

`only` (a regular expression over the path) narrows the fault to some
requests, e.g. the payloads (git packs, OCI blobs, chart tarballs) while
index.yaml, refs and manifests pass. Paths are routed by `route`, which
names the source a request belongs to (for per-source counts) and gives the
upstream path: `prefix_route` strips a first segment (`/app-3/repo.git` ->
`/repo.git`), `oci_route` the first segment after `/v2/`. The proxy runs on
its own thread and event loop, so a test that blocks its own loop (a
publish, a sleep) never stalls the traffic it is meant to observe.
"""

from __future__ import annotations

import asyncio
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import aiohttp
from aiohttp import web

from sluice_envtest.controlplane import free_port
from sluice_envtest.lifecycle import Startable
from sluice_envtest.processes import ServerError

# Hop-by-hop headers and those the proxy sets itself from the body it sends.
_DROPPED = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}
)


class Fault(StrEnum):
    NONE = "none"
    ERROR = "error"
    RESET = "reset"
    TRUNCATE = "truncate"
    HANG = "hang"


Route = Callable[[str], tuple[str, str]]


def prefix_route(path: str) -> tuple[str, str]:
    """`/<source>/<rest>` -> (`<source>`, `/<rest>`): each source its own URL prefix."""
    head, _, tail = path.lstrip("/").partition("/")
    return head, "/" + tail


def oci_route(path: str) -> tuple[str, str]:
    """`/v2/<source>/<repo>/...` -> (`<source>`, `/v2/<repo>/...`); `/v2/` itself passes."""
    if not path.startswith("/v2/") or path.count("/") < 3:
        return "", path
    head, _, tail = path.removeprefix("/v2/").partition("/")
    return head, "/v2/" + tail


def no_route(path: str) -> tuple[str, str]:
    return "", path


@dataclass(frozen=True)
class Seen:
    """One request the proxy took: when, for which source, and what it did to it."""

    at: float
    source: str
    method: str
    path: str
    fault: Fault
    peer: str = ""
    """The client's address and port: one per connection it opened."""


class FaultyProxy(Startable):
    """http://127.0.0.1:PORT forwarding to `upstream` (an http URL), faults switched by `set`."""

    def __init__(self, upstream: str, *, route: Route = no_route, port: int | None = None):
        self.upstream = upstream.rstrip("/")
        self.route = route
        self.port = port or free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.host}"
        self._fault = Fault.NONE
        self._only: re.Pattern[str] | None = None
        self._seen: list[Seen] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._cleared: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread: threading.Thread | None = None

    # -- the test's side ---------------------------------------------------

    def set(self, fault: Fault, *, only: str | None = None) -> None:
        """Apply `fault` from now on to requests whose path matches `only` (all if None)."""
        with self._lock:
            self._fault = fault
            self._only = re.compile(only) if only else None
        # Hung requests end when their fault does, so a phase leaves nothing behind.
        if self._loop is not None and self._cleared is not None:
            self._loop.call_soon_threadsafe(self._release)

    def seen(self, *, since: float = 0.0, until: float = float("inf")) -> list[Seen]:
        with self._lock:
            return [s for s in self._seen if since <= s.at < until]

    def counts(
        self, *, since: float = 0.0, until: float = float("inf"), path: str = ""
    ) -> dict[str, int]:
        """Requests per source in the window whose path matches `path`."""
        wanted = re.compile(path)
        counted: dict[str, int] = {}
        for entry in self.seen(since=since, until=until):
            if wanted.search(entry.path):
                counted[entry.source] = counted.get(entry.source, 0) + 1
        return counted

    def attempts(
        self, *, since: float = 0.0, until: float = float("inf"), gap: float = 0.25
    ) -> dict[str, int]:
        """Failed fetch attempts per source in the window, counted by the requests the fault hit.

        An attempt ends at its first failed request, however many passed
        before it (git reads the refs, then asks for a pack; a manifest comes
        before its blob, and under load seconds apart), so each faulted
        request is one attempt, except that an HTTP client may resend a GET
        at once on a reset: faulted requests less than `gap` apart are one.
        """
        last: dict[str, float] = {}
        counted: dict[str, int] = {}
        for entry in self.seen(since=since, until=until):
            if entry.fault is Fault.NONE:
                continue
            previous = last.get(entry.source)
            if previous is None or entry.at - previous >= gap:
                counted[entry.source] = counted.get(entry.source, 0) + 1
            last[entry.source] = entry.at
        return counted

    # -- lifecycle ---------------------------------------------------------

    def start(self, *, timeout: float = 10.0) -> None:
        self._thread = threading.Thread(
            target=self._serve, name=f"faulty-proxy-{self.port}", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(timeout) or self._failure is not None:
            failure = ServerError(f"proxy on {self.url} did not start: {self._failure}")
            self.stop()
            raise failure

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._loop = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _serve(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as error:  # reported by start()
            self._failure = error
        finally:
            self._ready.set()

    async def _main(self) -> None:
        app = web.Application(client_max_size=0)
        app.router.add_route("*", "/{path:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, auto_decompress=False, handle_signals=False)
        await runner.setup()
        # Bytes pass as the upstream sends them (gzip included): the client
        # must see exactly the real server's answer.
        self._session = aiohttp.ClientSession(
            auto_decompress=False, timeout=aiohttp.ClientTimeout(total=300)
        )
        try:
            await web.TCPSite(runner, "127.0.0.1", self.port).start()
            self._loop = asyncio.get_running_loop()
            self._stopping = asyncio.Event()
            self._cleared = asyncio.Event()
            self._ready.set()
            await self._stopping.wait()
        finally:
            self._release()
            await self._session.close()
            await runner.cleanup()

    def _release(self) -> None:
        if self._cleared is not None:
            self._cleared.set()
            self._cleared = asyncio.Event()

    # -- the proxy ---------------------------------------------------------

    def _fault_for(self, path: str) -> Fault:
        with self._lock:
            if self._only is not None and not self._only.search(path):
                return Fault.NONE
            return self._fault

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        source, upstream_path = self.route(request.path)
        fault = self._fault_for(upstream_path)
        with self._lock:
            self._seen.append(
                Seen(time.monotonic(), source, request.method, upstream_path, fault, _peer(request))
            )
        if fault is Fault.ERROR:
            return web.Response(status=500, text="injected fault: internal server error\n")
        if fault is Fault.RESET:
            _reset(request)
            return web.Response(status=500)  # never sent: the connection is gone
        if fault is Fault.HANG:
            assert self._cleared is not None
            await self._cleared.wait()
            _reset(request)
            return web.Response(status=500)
        return await self._forward(request, upstream_path, cut=fault is Fault.TRUNCATE)

    async def _forward(self, request: web.Request, path: str, *, cut: bool) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED}
        body = await request.read()
        target = self.upstream + path + (f"?{request.query_string}" if request.query_string else "")
        async with self._session.request(
            request.method, target, headers=headers, data=body or None, allow_redirects=False
        ) as answer:
            payload = await answer.read()
            out = {k: v for k, v in answer.headers.items() if k.lower() not in _DROPPED}
        response = web.StreamResponse(status=answer.status, reason=answer.reason, headers=out)
        # The declared length is always the whole body; a cut sends half of it.
        response.content_length = len(payload)
        await response.prepare(request)
        if not cut or len(payload) < 2:
            await response.write(payload)
            await response.write_eof()
            return response
        await response.write(payload[: len(payload) // 2])
        await asyncio.sleep(0.05)  # let the half reach the client before the cut
        _reset(request)
        return response


def _peer(request: web.Request) -> str:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return f"{peer[0]}:{peer[1]}" if peer else ""


def _reset(request: web.Request) -> None:
    """Cut the connection with an RST, as a crashed peer or a middlebox does."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
