"""The HTTP server that hands artifacts to the cluster: exactly the files under
the storage root, nothing else.

Every consumer downloads through this server, and a path mistake here would
hand out any file the source-controller can read (its service account
token, for one). So the request target is judged raw, before any URL
normalisation could hide a `..`: every segment must be a plain name after
percent-decoding (no `.`/`..`, no hidden names, no encoded `/`, no
backslash, no NUL), and the resolved file must still be a regular file
inside the root. Anything else is a 404, so probing learns nothing.
Symlinks inside the root (the `latest.tar.gz` link) are served.

aiohttp's FileResponse is not used: it follows paths as given, serves
pre-compressed siblings, and its ETag is mtime-based. Here the ETag is the
file's sha256, the same value as the artifact digest, cached per
(device, inode, size, mtime) so a large file is hashed once, not per request.
Files are streamed from an open descriptor: a concurrent rename of a new
artifact over the name does not disturb a response in progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import stat
from collections import OrderedDict
from pathlib import Path
from urllib.parse import unquote_to_bytes

from aiohttp import web
from yarl import URL

from sluice_runtime import lanes

CHUNK = 256 * 1024
_DIGEST_CACHE_SIZE = 4096
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")

_CONTENT_TYPES = (
    (".tar.gz", "application/gzip"),
    (".tgz", "application/gzip"),
    (".yaml", "application/yaml"),  # RFC 9512
    (".yml", "application/yaml"),
    (".json", "application/json"),
)

_Key = tuple[int, int, int, int]  # device, inode, size, mtime_ns


def file_server(root: Path) -> web.Application:
    """An application serving the files under `root` with GET and HEAD."""
    server = _FileServer(Path(os.path.realpath(root)))
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    return app


class _FileServer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.digests = _DigestCache()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        # A requested reconcile's download reads the file in threads of its own.
        with lanes.serving_as(request.headers.get(lanes.HEADER)):
            return await self._handle(request)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            raise web.HTTPMethodNotAllowed(request.method, ["GET", "HEAD"])
        parts = _segments(request.raw_path)
        if parts is None:
            raise web.HTTPNotFound()
        opened = await lanes.to_thread(self._open, parts)
        if opened is None:
            raise web.HTTPNotFound()
        fd, info = opened
        try:
            return await self._respond(request, fd, info, content_type=_content_type(parts[-1]))
        finally:
            os.close(fd)

    def _open(self, parts: list[str]) -> tuple[int, os.stat_result] | None:
        real = os.path.realpath(os.path.join(self.root, *parts))
        if os.path.commonpath([self.root, real]) != str(self.root) or real == str(self.root):
            return None
        try:
            # O_NONBLOCK: opening a FIFO must not hang the server; it is
            # refused just below, like any other non-regular file.
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            return None
        return fd, info

    async def _respond(
        self, request: web.Request, fd: int, info: os.stat_result, *, content_type: str
    ) -> web.StreamResponse:
        size = info.st_size
        key = (info.st_dev, info.st_ino, size, info.st_mtime_ns)
        etag = f'"{await self.digests.get(key, fd)}"'
        headers = {
            "ETag": etag,
            "Accept-Ranges": "bytes",
            "Content-Type": content_type,
            "X-Content-Type-Options": "nosniff",
        }
        if _none_match(request.headers.get("If-None-Match"), etag):
            return web.Response(status=304, headers=headers)

        start, end, status = 0, size - 1, 200
        range_header = request.headers.get("Range")
        if (
            request.method == "GET"
            and range_header is not None
            and request.headers.get("If-Range", etag) == etag
        ):
            wanted = _parse_range(range_header, size)
            if wanted == "unsatisfiable":
                return web.Response(
                    status=416, headers={**headers, "Content-Range": f"bytes */{size}"}
                )
            if isinstance(wanted, tuple):
                start, end = wanted
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"

        response = web.StreamResponse(status=status, headers=headers)
        response.content_length = end - start + 1
        try:
            await response.prepare(request)
            if request.method == "GET":
                await self._send(response, fd, start, end)
            await response.write_eof()
        except ConnectionResetError:
            # The client went away mid-answer (a controller killed or restarted
            # during a download): nobody is left to answer. Returned, not raised,
            # aiohttp drops the connection quietly; raised, it would log a
            # traceback per broken download (seen in the chaos suite's kills).
            pass
        return response

    @staticmethod
    async def _send(response: web.StreamResponse, fd: int, start: int, end: int) -> None:
        offset = start
        while offset <= end:
            chunk = await lanes.to_thread(os.pread, fd, min(CHUNK, end + 1 - offset), offset)
            if not chunk:
                # Files are replaced by rename, never truncated in place;
                # if one shrank anyway, fail the transfer rather than send
                # fewer bytes than promised.
                raise ConnectionAbortedError("file shrank while being served")
            await response.write(chunk)
            offset += len(chunk)


class _DigestCache:
    """sha256 per file version; concurrent requests for an unhashed file share
    one computation, which runs in a thread on its own descriptor so that a
    client going away cannot close the file under it."""

    def __init__(self) -> None:
        self._done: OrderedDict[_Key, str] = OrderedDict()
        self._running: dict[_Key, asyncio.Task[str]] = {}

    async def get(self, key: _Key, fd: int) -> str:
        digest = self._done.get(key)
        if digest is not None:
            self._done.move_to_end(key)
            return digest
        task = self._running.get(key)
        if task is None:
            own = os.dup(fd)
            task = asyncio.create_task(lanes.to_thread(_hash, own), name=f"sha256 {key[1]}")
            self._running[key] = task
            task.add_done_callback(lambda t: self._finished(key, t))
        return await asyncio.shield(task)

    def _finished(self, key: _Key, task: asyncio.Task[str]) -> None:
        self._running.pop(key, None)
        if task.cancelled() or task.exception() is not None:
            return
        self._done[key] = task.result()
        while len(self._done) > _DIGEST_CACHE_SIZE:
            self._done.popitem(last=False)


def _hash(fd: int) -> str:
    try:
        hasher = hashlib.sha256()
        offset = 0
        while chunk := os.pread(fd, 1 << 20, offset):
            hasher.update(chunk)
            offset += len(chunk)
        return hasher.hexdigest()
    finally:
        os.close(fd)


def _segments(raw_target: str) -> list[str] | None:
    """The decoded path segments of a raw request target, or None to refuse it."""
    target = raw_target
    if not target.startswith("/"):
        # absolute-form ("GET http://host/path"); yarl keeps the path raw.
        with contextlib.suppress(ValueError):
            target = URL(target, encoded=True).raw_path
        if not target.startswith("/"):
            return None
    path = target.split("?", 1)[0].split("#", 1)[0]
    parts: list[str] = []
    for segment in path[1:].split("/"):
        if not segment or "\\" in segment:
            return None
        name = os.fsdecode(unquote_to_bytes(segment))
        # A leading "." covers "." and ".." (raw or encoded) and the store's
        # hidden temp files, which no artifact URL names.
        if name.startswith(".") or any(c in name for c in "/\\\0"):
            return None
        parts.append(name)
    return parts


def _content_type(filename: str) -> str:
    lowered = filename.lower()
    for suffix, content_type in _CONTENT_TYPES:
        if lowered.endswith(suffix):
            return content_type
    return "application/octet-stream"


def _none_match(header: str | None, etag: str) -> bool:
    if header is None:
        return False
    # Weak comparison (RFC 9110 13.1.2): a W/ prefix does not matter here.
    tags = [t.strip().removeprefix("W/") for t in header.split(",")]
    return "*" in tags or etag in tags


def _parse_range(header: str, size: int) -> tuple[int, int] | str | None:
    """(start, end) inclusive, "unsatisfiable", or None to ignore the header
    (malformed, or several ranges: RFC 9110 lets a server send it all)."""
    match = _RANGE.fullmatch(header.strip())
    if match is None:
        return None
    first, last = match.groups()
    if not first and not last:
        return None
    if not first:
        suffix = int(last)
        if suffix == 0 or size == 0:
            return "unsatisfiable"
        return max(size - suffix, 0), size - 1
    start = int(first)
    if last and int(last) < start:
        return None
    if start >= size:
        return "unsatisfiable"
    end = min(int(last), size - 1) if last else size - 1
    return start, end
