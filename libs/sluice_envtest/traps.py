"""An HTTPS server on loopback that records what reaches it.

Tests point a tenant's kubeconfig at it to prove what a client sends (or
never sends): the controller's token, a tenant's bearer token, basic auth.
It answers every request like an API server's `/version`, so a client that
checks the server first goes on talking.
"""

from __future__ import annotations

import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from aiohttp import web

from sluice_envtest.certificates import ServingPki, make_serving_pki
from sluice_envtest.controlplane import free_port


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class RecordingHttpsServer:
    """`async with RecordingHttpsServer() as trap:` then `trap.url`, `trap.ca_pem`,
    `trap.requests`."""

    pki: ServingPki = field(default_factory=make_serving_pki)
    requests: list[Recorded] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_pem(self) -> bytes:
        return self.pki.ca.cert

    async def _record(self, request: web.Request) -> web.Response:
        self.requests.append(Recorded(request.method, request.path, dict(request.headers)))
        return web.json_response({"major": "1", "minor": "31", "gitVersion": "v1.31.0"})

    async def __aenter__(self) -> RecordingHttpsServer:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._record)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with tempfile.TemporaryDirectory() as scratch:
            paths = self.pki.write(Path(scratch))
            context.load_cert_chain(paths["tls.crt"], paths["tls.key"])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=context).start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
