"""Fixtures for the artifact library: trees on disk, a real file server on
loopback, and a raw HTTP client that sends request targets unnormalised."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestServer

from sluice_runtime.artifacts.serving import file_server
from sluice_runtime.artifacts.storage import Storage

TreeSpec = Mapping[str, str | bytes]
WriteTree = Callable[[Path, TreeSpec], Path]


def _write_tree(root: Path, files: TreeSpec) -> Path:
    """Files by relative path; a value "->target" makes a symlink, a key
    ending in "/" an (empty) directory."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        path = root / rel
        if rel.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str) and content.startswith("->"):
            os.symlink(content[2:], path)
        elif isinstance(content, str):
            path.write_text(content)
        else:
            path.write_bytes(content)
    return root


@pytest.fixture
def write_tree() -> WriteTree:
    return _write_tree


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes


RawRequest = Callable[..., Awaitable[RawResponse]]


@dataclass
class Served:
    """A storage root served over HTTP on loopback."""

    root: Path
    storage: Storage
    base_url: str
    host: str
    port: int
    session: aiohttp.ClientSession

    async def raw(
        self, target: str, *, method: str = "GET", headers: Mapping[str, str] | None = None
    ) -> RawResponse:
        """Send `target` byte for byte as the request target: aiohttp's
        client would normalise away the `..` segments under test."""
        return await raw_request(self.host, self.port, target, method=method, headers=headers)


async def raw_request(
    host: str,
    port: int,
    target: str,
    *,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
) -> RawResponse:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed = {}
    for line in header_lines:
        key, _, value = line.partition(":")
        parsed[key.strip().lower()] = value.strip()
    return RawResponse(status=int(status_line.split()[1]), headers=parsed, body=body)


@pytest_asyncio.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    root = tmp_path / "storage"
    root.mkdir()
    server = TestServer(file_server(root), host="127.0.0.1")
    await server.start_server()
    assert server.port is not None
    storage = Storage(root, advertised_addr=f"127.0.0.1:{server.port}")
    try:
        async with aiohttp.ClientSession() as session:
            yield Served(
                root=root,
                storage=storage,
                base_url=f"http://127.0.0.1:{server.port}",
                host="127.0.0.1",
                port=server.port,
                session=session,
            )
    finally:
        await server.close()
