"""The CGI side of `git http-backend`: the request body fed in (noting the protocol
v2 command it starts with) and the CGI headers read back as an HTTP status.
"""

from __future__ import annotations

import asyncio
import re
import zlib

from aiohttp import web


async def feed_body(request: web.Request, stdin: asyncio.StreamWriter) -> str:
    """Copy the request body to http-backend; the protocol v2 command it starts with."""
    command = ""
    first = True
    try:
        async for chunk in request.content.iter_chunked(64 * 1024):
            if first:
                command = v2_command(chunk, request.headers.get("Content-Encoding", ""))
                first = False
            stdin.write(chunk)
            await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # http-backend stopped reading: it has said what it wanted to
    finally:
        stdin.close()
    return command


def v2_command(chunk: bytes, encoding: str) -> str:
    if encoding in ("gzip", "x-gzip"):
        try:
            chunk = zlib.decompressobj(wbits=31).decompress(chunk, 64)
        except zlib.error:
            return ""
    # The first pkt-line of a v2 request: 4 hex digits of length, "command=<name>\n".
    found = re.match(rb"[0-9a-f]{4}command=([a-z-]+)", chunk)
    return found.group(1).decode() if found else ""


async def cgi_headers(stdout: asyncio.StreamReader) -> tuple[int, str, dict[str, str]]:
    status, reason = 200, "OK"
    headers: dict[str, str] = {}
    while True:
        line = (await stdout.readline()).decode("latin-1").rstrip("\r\n")
        if not line:
            break
        name, _, value = line.partition(":")
        if name.lower() == "status":
            code, _, reason = value.strip().partition(" ")
            status = int(code)
        else:
            headers[name.strip()] = value.strip()
    if not headers and status == 200:
        return 502, "Bad Gateway", {}
    return status, reason or "OK", headers
