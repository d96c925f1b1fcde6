"""The process's operational HTTP endpoints: /healthz, /readyz, /metrics (and /debug/heap).

Kubelet probes and Prometheus scrape these; they stay up from the moment the
process starts until it stops, independent of leadership. /readyz is true
once every informer has listed once (the cache is usable).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from sluice_runtime.observing.heaptracing import heap_handler
from sluice_runtime.observing.metrics import exposition


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


def probes_app(ready: Callable[[], bool], *, with_metrics: bool = False) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="informers not synced")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if with_metrics:
        app.router.add_get("/metrics", metrics_handler)
        app.router.add_get("/debug/heap", heap_handler)
    return app


def metrics_app() -> web.Application:
    app = web.Application()
    app.router.add_get("/metrics", metrics_handler)
    # Next to the metrics, not the probes: an operator's diagnosis, not the kubelet's.
    app.router.add_get("/debug/heap", heap_handler)
    return app


async def metrics_handler(_: web.Request) -> web.Response:
    return web.Response(body=exposition(), content_type="text/plain", charset="utf-8")
