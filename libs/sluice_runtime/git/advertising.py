"""`git ls-remote` over Git's smart HTTP, in the event loop, without libgit2.

An ls-remote is the whole cost of a no-op fetch and the first step of every
GitRepository reconcile. It used to run in-process through pygit2 in a
small thread pool; importing pygit2 maps its own OpenSSL, libgit2, libssh2
and cffi, some 12 MiB resident from the first ls-remote on, which set the
source-controller's peak with Git sources (issue 19: 90-92 MiB against a
90 MiB target, OCI sources 84-86). The ref advertisement is one GET and a
list of pkt-lines, so it is read here with the aiohttp client the
controller already holds in memory. Checkouts, SSH, a repository's own CA
and credentials written into the URL still go to the libgit2 worker
process (`worker.py`), unchanged.

What it does as libgit2 did: protocol v0 (`GET <url>/info/refs?service=
git-upload-pack`, no `Git-Protocol` header), the system's trust store,
`Authorization: Bearer` on every request when the secret has a token,
basic credentials only after a 401 asks for them and a second 401 taken as
a refusal, redirects followed, annotated tags peeled (`^{}` lines replace
the tag object's id by the commit's), `HEAD` listed. Refusals carry the
worker's messages, so status reads the same whichever path listed the refs.
A response that is not an advertisement (a dumb server, an HTML login page)
or that exceeds `MAX_ADVERTISEMENT` bytes is an error, never a partial list.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from urllib.parse import urlsplit

import aiohttp

from sluice_runtime import resolving
from sluice_runtime.redacting import redact_url

CONTENT_TYPE = "application/x-git-upload-pack-advertisement"
MAX_ADVERTISEMENT = 64 << 20
"""A repository with a million refs advertises about 60 MiB; anything past
that is a broken or hostile server, not refs to hold in memory."""

USER_AGENT = "git/2.0 (sluice)"


class AdvertisementError(Exception):
    """Why refs could not be listed: `kind` is the worker's ("auth" or "git")."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def served_here(url: str, *, ca: str | None) -> bool:
    """Whether this module lists `url`'s refs: http(s) with the system's trust
    store and no credentials in the URL (libgit2 reads those itself)."""
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and not ca and "@" not in parts.netloc


def parse_advertisement(body: bytes) -> dict[str, str]:
    """`refs/...` (and `HEAD`) → commit id, from a smart HTTP v0 advertisement.

    The body is pkt-lines: `# service=git-upload-pack`, a flush (`0000`),
    then `<id> <name>` lines (the first carries capabilities after a NUL) and
    a final flush. An empty repository advertises only `capabilities^{}`.
    """
    refs: dict[str, str] = {}
    peeled: dict[str, str] = {}
    position = 0
    flushes = 0
    while position < len(body):
        try:
            length = int(body[position : position + 4], 16)
        except ValueError:
            raise AdvertisementError("git", "malformed ref advertisement (bad pkt-line)") from None
        if length == 0:
            flushes += 1
            position += 4
            continue
        if length < 4 or position + length > len(body):
            raise AdvertisementError("git", "malformed ref advertisement (truncated pkt-line)")
        line = body[position + 4 : position + length].rstrip(b"\n")
        position += length
        if line.startswith(b"#"):
            continue  # the service announcement
        line = line.split(b"\0", 1)[0]
        oid, _, name = line.decode(errors="replace").partition(" ")
        if len(oid) not in (40, 64) or not name or name == "capabilities^{}":
            continue
        if name.endswith("^{}"):
            peeled[name[:-3]] = oid
        else:
            refs[name] = oid
    if flushes == 0:
        raise AdvertisementError("git", "malformed ref advertisement (no flush-pkt)")
    refs.update(peeled)
    return refs


async def list_refs(
    url: str,
    *,
    username: str | None,
    password: str | None,
    bearer_token: str | None,
    timeout: float,
) -> dict[str, str]:
    """The remote's refs; AdvertisementError, or TimeoutError past `timeout`."""
    endpoint = url.rstrip("/") + "/info/refs?service=git-upload-pack"
    headers: dict[str, str] = {"User-Agent": USER_AGENT, "Accept": "*/*", "Pragma": "no-cache"}
    if bearer_token:
        headers["Authorization"] = f"Bearer {bearer_token}"
    limits = aiohttp.ClientTimeout(total=timeout)
    answered = False
    while True:
        body, status, content_type = await _get(_session(), endpoint, headers, limits)
        if status != 401:
            break
        if answered:
            raise AdvertisementError("auth", "the server refused the credentials")
        if not username:
            raise AdvertisementError(
                "auth", "the server requires authentication and no credentials fit"
            )
        # aiohttp drops this header on a redirect to another origin.
        pair = base64.b64encode(f"{username}:{password or ''}".encode()).decode()
        headers["Authorization"] = f"Basic {pair}"
        answered = True
    if status != 200:
        raise AdvertisementError("git", f"unexpected http status code: {status}")
    if content_type != CONTENT_TYPE:
        raise AdvertisementError(
            "git", f"invalid content-type: '{content_type}' (not a smart HTTP Git server)"
        )
    return parse_advertisement(body)


_sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}


def _session() -> aiohttp.ClientSession:
    """The event loop's session for listings, its connections kept alive between them.

    A fresh session and connection per listing cost half as much CPU again as
    libgit2's ls-remote did (1.2-1.4 ms against 0.78-0.85, loopback HTTP);
    kept alive, 0.875. No
    cookie jar: one tenant's cookies never go with another's request to the
    same host (credentials are per request, in its headers). No connection
    limit: a hung server holds its own connections, never a slot another
    remote's listing (a webhook's) would queue for. Host names are looked up
    on threads of their own (`resolving`), never in the loop's default
    executor. A GET on a kept-alive
    connection the server closed while it was idle is sent again on a new one
    by aiohttp itself (3.10 and later).
    """
    loop = asyncio.get_running_loop()
    session = _sessions.get(loop)
    if session is None or session.closed:
        session = _sessions[loop] = aiohttp.ClientSession(
            connector=resolving.connector(limit=0),
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=True,
        )
    return session


async def close() -> None:
    """Close the running loop's session (at shutdown)."""
    session = _sessions.pop(asyncio.get_running_loop(), None)
    if session is not None:
        await session.close()


async def _get(
    session: aiohttp.ClientSession,
    endpoint: str,
    headers: Mapping[str, str],
    limits: aiohttp.ClientTimeout,
) -> tuple[bytes, int, str]:
    host = urlsplit(endpoint).hostname or ""
    try:
        async with session.get(endpoint, headers=headers, timeout=limits) as answer:
            if answer.status != 200:
                return b"", answer.status, answer.content_type
            body = bytearray()
            async for chunk in answer.content.iter_chunked(1 << 16):
                body += chunk
                if len(body) > MAX_ADVERTISEMENT:
                    raise AdvertisementError(
                        "git", f"ref advertisement larger than {MAX_ADVERTISEMENT} bytes"
                    )
            return bytes(body), answer.status, answer.content_type
    except aiohttp.ClientConnectorCertificateError:
        raise AdvertisementError(
            "auth",
            f"host {host} is not trusted (TLS certificate or SSH host key not verified)",
        ) from None
    except aiohttp.TooManyRedirects:
        raise AdvertisementError("git", "too many redirects") from None
    except (aiohttp.ClientError, OSError) as error:
        if isinstance(error, asyncio.TimeoutError):
            raise
        text = redact_url(str(error)) or type(error).__name__
        if isinstance(error, aiohttp.ClientConnectorError) and isinstance(
            error.os_error, resolving.UnresolvedHost
        ):
            text = error.os_error.strerror or text  # "cannot resolve host ...", unwrapped
        raise AdvertisementError("git", f"failed to list refs of {host}: {text}") from None
