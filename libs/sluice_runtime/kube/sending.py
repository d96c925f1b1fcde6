"""One request on kubernetes-asyncio's session and credentials, past its `ApiClient.call_api`.

`call_api` is generated for its typed models: before aiohttp sees a request
it walks the headers, the query and the whole body (`sanitize_for_serialization`,
recursively, every applied object in full), copies them into tuples, and its
REST layer then picks the body's encoding with a regular expression. For
plain JSON that work changes nothing, and it was a fifth of a client's CPU
per request (e2e/bench/client_cost.py). So the request is made here, as that
path makes it, from the same parts: the ApiClient's default headers (User-Agent)
and cookie, the Configuration's `auth_settings()` (which runs the refresh
hook: in-cluster token reloads, exec-plugin renewals), the REST client's
aiohttp session (connection pool, TLS context and client certificate, proxy
and netrc lookups), its proxy and TLS server name, and `json.dumps` of the
body (datetimes as ISO 8601, as `sanitize_for_serialization` wrote them).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

import aiohttp

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "OPTIONS", "DELETE"})
_TIMEOUTS: dict[float, aiohttp.ClientTimeout] = {}


def _iso(value: object) -> str:
    """What `sanitize_for_serialization` made of the one non-JSON type it knew."""
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def encode_body(body: Any) -> bytes:
    """The bytes kubernetes-asyncio sent for `body` with a JSON content type
    (`json.dumps`, ASCII only, so UTF-8 encoding changes nothing)."""
    return json.dumps(body, default=_iso).encode()


def _timeout(timeout: float | aiohttp.ClientTimeout | None) -> aiohttp.ClientTimeout:
    """As kubernetes-asyncio's REST client read `_request_timeout`: a number is the
    total, a ClientTimeout is used as is, none (or 0) is aiohttp's no-limit default."""
    if isinstance(timeout, aiohttp.ClientTimeout):
        return timeout
    if not timeout:
        return aiohttp.ClientTimeout()
    made = _TIMEOUTS.get(timeout)
    if made is None:
        made = _TIMEOUTS[timeout] = aiohttp.ClientTimeout(total=timeout)
    return made


async def send(
    api: Any,
    method: str,
    path: str,
    *,
    query: Sequence[tuple[str, str]],
    headers: Mapping[str, str],
    body: Any,
    timeout: float | aiohttp.ClientTimeout | None,
) -> aiohttp.ClientResponse:
    """Send one request through `api` (a kubernetes_asyncio ApiClient), answer unread.

    `headers` carries Accept and Content-Type (always a JSON one here), and
    impersonation; a body goes with every method but GET and HEAD, as before.
    """
    sent = {**headers, **api.default_headers}
    if api.cookie:
        sent["Cookie"] = api.cookie
    queries = list(query)
    # The hook that renews a token runs inside: never cache what this returns.
    await api.update_params_for_auth(sent, queries, ["BearerToken"])
    rest = api.rest_client
    url = api.configuration.host + path
    if queries:
        url += "?" + urlencode(queries)
    options: dict[str, Any] = {}
    if rest.proxy:
        options["proxy"] = rest.proxy
    if rest.proxy_headers:
        options["proxy_headers"] = rest.proxy_headers
    if rest.server_hostname:
        options["server_hostname"] = rest.server_hostname
    data = encode_body(body) if body is not None and method in _BODY_METHODS else None
    response: aiohttp.ClientResponse = await rest.pool_manager.request(
        method, url, headers=sent, data=data, timeout=_timeout(timeout), **options
    )
    return response
