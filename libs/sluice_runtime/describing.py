"""Errors in a person's words, for conditions, events and logs.

Every controller reports what the Kubernetes API, a registry or a Git
server refused. One formatter makes those messages alike: the server's own
explanation, whitespace folded to one line, then what to do about it when
the kind of refusal says. Never an HTTP status code (the words say more),
never a library's repr (`<urllib3.connection.HTTPSConnection object at
0x...>`), never the same prefix twice: callers name the object and the
operation once, the formatter only says what went wrong.
"""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Iterator

import aiohttp
from aiohttp.http_exceptions import ContentLengthError, TransferEncodingError

from sluice_runtime.kube.errors import (
    ApiError,
    ApiUnavailable,
    BadRequest,
    Forbidden,
    Invalid,
    KubeError,
    TooManyRequests,
    Unauthorized,
)

# What to do, by the kind of refusal; the API's message already says what and why.
_API_HINTS: tuple[tuple[type[ApiError], str], ...] = (
    (Forbidden, "grant that permission to the identity, or leave the object out"),
    (Unauthorized, "check the credentials the controller uses"),
    (Invalid, "fix the object in its source"),
    (BadRequest, "fix the object in its source"),
    (TooManyRequests, "the API server is busy; retrying"),
)

# `<urllib3.connection.HTTPSConnection object at 0x7f...>`, `<HTTPSConnection(host=..)>`:
# a library's picture of itself, meaningless to the reader.
_REPR = re.compile(r"<[^<>]*(?: object at 0x[0-9a-f]+|\(host=[^<>]*\) at 0x[0-9a-f]+)>:?\s*")


def fold(text: str) -> str:
    """One line, no library reprs."""
    return " ".join(_REPR.sub("", text).split())


def describe(error: BaseException) -> str:
    """What went wrong, for a person: the server's words, then what to do."""
    message, hint = explain(error)
    return f"{message}; {hint}" if hint else message


def explain(error: BaseException) -> tuple[str, str]:
    """`describe` in two parts, (what went wrong, what to do or ""), for callers that
    list several failures and say what to do once."""
    if isinstance(error, ApiError):
        message = fold(error.message) or _api_fallback(error)
        hint = next((h for cls, h in _API_HINTS if isinstance(error, cls)), "")
        if not hint and error.status >= 500:
            hint = "the API server failed; retrying"
        return message, hint
    if isinstance(error, KubeError) and not isinstance(error, ApiUnavailable):
        return fold(str(error)) or type(error).__name__, ""
    return describe_transport(error), ""


def _api_fallback(error: ApiError) -> str:
    # An answer without a Status message: its reason words, never the number.
    if error.reason:
        return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", error.reason).lower()
    return "the API server refused the request"


def describe_transport(error: BaseException) -> str:
    """A network failure (DNS, refused, reset, timeout, TLS) by its root cause.

    HTTP libraries wrap the cause several times (requests' ConnectionError
    around urllib3's MaxRetryError around NameResolutionError around
    socket.gaierror), each repeating the last in its own repr; the cause
    alone says it.
    """
    for cause in _causes(error):
        if isinstance(cause, socket.gaierror):
            return "host name not found (DNS)"
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, ConnectionResetError):
            return "connection reset by the server"
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS certificate not trusted: {cause.verify_message or cause.reason}"
        if isinstance(cause, ssl.SSLError):
            return f"TLS failed: {getattr(cause, 'reason', None) or _ssl_words(cause)}"
        # A body cut off midway: aiohttp's ClientPayloadError carries the parser's
        # error as its cause, and a repr of it in its own message.
        if isinstance(cause, ContentLengthError):
            return "the connection ended before the length the server announced"
        if isinstance(cause, TransferEncodingError):
            return "the connection ended inside a chunked body"
        if (
            isinstance(cause, TimeoutError | socket.timeout)
            or "timeout" in type(cause).__name__.lower()
        ):
            return "timed out"
    if isinstance(error, aiohttp.ClientPayloadError):
        return "the response body could not be read"
    if isinstance(error, ApiUnavailable):
        return fold(str(error))
    return fold(str(error)) or type(error).__name__


_HTTP_WORDS = {
    400: "the request was refused as malformed",
    401: "the credentials were refused",
    403: "access denied",
    404: "not found",
    408: "the server timed out waiting for the request",
    409: "conflict",
    410: "gone",
    413: "too large for the server",
    429: "rate limited; retrying",
    500: "the server failed",
    502: "a proxy in front of the server failed",
    503: "the server is unavailable",
    504: "a proxy in front of the server timed out",
}


def describe_http_status(status: int) -> str:
    """What a non-API server's bare HTTP answer means, in words rather than a number."""
    if status in _HTTP_WORDS:
        return _HTTP_WORDS[status]
    if status >= 500:
        return "the server failed"
    return "the server refused the request"


def _ssl_words(error: ssl.SSLError) -> str:
    # SSLError(1, "[SSL: X] words"): the words, not the tuple.
    words = error.args[1] if len(error.args) > 1 else str(error)
    return fold(str(words))


def _causes(error: BaseException) -> Iterator[BaseException]:
    """The error and what it wraps, outermost first, each once."""
    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        linked = [
            current.__cause__,
            current.__context__,
            getattr(current, "reason", None),  # urllib3 MaxRetryError
            getattr(current, "_reason", None),  # urllib3 NameResolutionError
            *(a for a in current.args if isinstance(a, BaseException)),  # requests
        ]
        pending.extend(c for c in linked if isinstance(c, BaseException))
