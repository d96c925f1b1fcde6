"""HTTP servers on the event loop (`serving`: webhooks, artifacts) and, off it, the
process's operational endpoints (`probing`: /healthz, /readyz, /metrics and, next
to the metrics, an operator's /debug/heap).

Kubelet probes and Prometheus scrape the operational endpoints; they stay up from
the moment the process starts until it stops, independent of leadership. They are
answered by a thread, not by the event loop that runs the reconciles: with 1,000
apps on a starved node the loop took seconds to reach a request (a /metrics of
4.7 s in the soak), past a kubelet probe's 1 s timeout, which would restart a
healthy controller. The loop publishes what the probes need on each heartbeat:

- /healthz is 200 while the loop's last heartbeat is younger than `stale_after`,
  so a wedged loop (a synchronous call that never returns) does fail liveness;
- /readyz is what `ready()` said on the last heartbeat: every informer has
  listed once and, with leader-only parts, the Lease is held.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from aiohttp import web

from sluice_runtime.observing.heaptracing import heap_answer
from sluice_runtime.observing.metrics import exposition_pieces


def split_addr(addr: str, *, default_host: str = "0.0.0.0") -> tuple[str, int]:  # noqa: S104
    """`:8080`, `127.0.0.1:8080` or `8080` → (host, port)."""
    host, _, port = addr.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"address {addr!r} has no port")
    return (host.strip("[]") or default_host), int(port)


@contextlib.asynccontextmanager
async def serving(app: web.Application, addr: str) -> AsyncIterator[web.AppRunner]:
    """Run `app` on `addr` for the duration of the block."""
    host, port = split_addr(addr)
    # Request bodies are taken as sent, never decompressed (as Go's net/http in
    # Flux): webhook signatures cover the bytes on the wire, a compressed bomb
    # stays its compressed size, and a body that fails to decompress can no
    # longer raise inside aiohttp's own drain of an unread body (found by the
    # webhook fuzz: a traceback per request).
    runner = web.AppRunner(app, access_log=None, handle_signals=False, auto_decompress=False)
    await runner.setup()
    # A burst of webhooks must not overflow the listen queue (128 by default):
    # overflowed connections wait a SYN retry, about a second.
    site = web.TCPSite(runner, host, port, backlog=1024)
    try:
        await site.start()
    except OSError as error:
        await runner.cleanup()
        raise OSError(f"cannot listen on {addr}: {error.strerror or error}") from None
    try:
        yield runner
    finally:
        await runner.cleanup()


class Heartbeat:
    """The event loop's pulse and the readiness it saw, for the probe thread to read.

    A beat is a task on the loop: it runs only when the loop does, so its age is
    how long the loop has been unable to run anything."""

    def __init__(
        self,
        ready: Callable[[], bool] = lambda: True,
        *,
        every: float = 0.5,
        stale_after: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ready = ready
        self.every = every
        self.stale_after = stale_after
        self.clock = clock
        self.last = clock()
        self.ready = False

    def beat(self) -> None:
        self.ready = self._ready()
        self.last = self.clock()

    def age(self) -> float:
        return self.clock() - self.last

    @contextlib.asynccontextmanager
    async def beating(self) -> AsyncIterator[Heartbeat]:
        async def pulse() -> None:
            while True:
                self.beat()
                await asyncio.sleep(self.every)

        self.beat()
        task = asyncio.create_task(pulse(), name="heartbeat")
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    heartbeat: Heartbeat | None
    metrics: bool
    # One render at a time: two overlapping scrapes would hold two copies.
    rendering = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 10  # a client that stops sending holds its thread no longer than this

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        heartbeat = self.server.heartbeat
        if path == "/metrics" and self.server.metrics:
            self._metrics()
        elif path == "/debug/heap" and self.server.metrics:
            # Next to the metrics, not the probes: an operator's diagnosis, not the kubelet's.
            status, content_type, text = heap_answer(dict(urllib.parse.parse_qsl(query)))
            self._answer(status, text, content_type=content_type)
        elif path == "/healthz" and heartbeat is not None:
            age = heartbeat.age()
            if age <= heartbeat.stale_after:
                self._answer(200, "ok")
            else:
                self._answer(
                    500,
                    f"event loop stalled: its last heartbeat was {age:.1f}s ago "
                    f"(more than {heartbeat.stale_after:g}s)",
                )
        elif path == "/readyz" and heartbeat is not None:
            if heartbeat.ready:
                self._answer(200, "ok")
            else:
                self._answer(503, "informers not synced")
        else:
            self._answer(404, "404: Not Found")

    def _answer(
        self, status: int, text: str, *, content_type: str = "text/plain; charset=utf-8"
    ) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _metrics(self) -> None:
        # Streamed a piece at a time with no Content-Length (HTTP/1.0: the body
        # ends when the connection closes), so the whole text never exists at once.
        with self.server.rendering, contextlib.suppress(ConnectionError):
            pieces = exposition_pieces()
            first = next(pieces)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.end_headers()
            self.wfile.write(first)
            for piece in pieces:
                self.wfile.write(piece)

    def log_message(self, format: str, *args: object) -> None:
        pass  # no access log, as the aiohttp servers


class _Server6(_Server):
    address_family = socket.AF_INET6


@contextlib.asynccontextmanager
async def probing(
    addr: str, *, heartbeat: Heartbeat | None = None, metrics: bool = False
) -> AsyncIterator[int]:
    """Serve /healthz and /readyz (from `heartbeat`) and/or /metrics on `addr` from a
    thread for the duration of the block; yields the port listened on."""
    host, port = split_addr(addr)
    kind = _Server6 if ":" in host else _Server
    try:
        server = kind((host, port), _Handler)
    except OSError as error:
        raise OSError(f"cannot listen on {addr}: {error.strerror or error}") from None
    server.heartbeat = heartbeat
    server.metrics = metrics
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.1},
        name=f"probes-{server.server_address[1]}",
        daemon=True,
    )
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        await asyncio.to_thread(server.shutdown)
        server.server_close()
