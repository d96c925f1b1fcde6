"""Typed API errors, so callers branch on what happened rather than on numbers."""

from __future__ import annotations

import json
from typing import Any


class KubeError(Exception):
    """Anything that went wrong talking to the API server."""


class ConfigError(KubeError):
    """No usable kubeconfig or in-cluster configuration."""


class ApiUnavailable(KubeError):
    """The API server could not be reached (connection refused, TLS failure, timeout)."""


class ApiError(KubeError):
    """The API server answered with an error Status."""

    status: int = 0

    def __init__(self, *, status: int, reason: str, message: str, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body

    def __str__(self) -> str:
        return self.message or self.reason or "the API server refused the request"


class BadRequest(ApiError):
    pass


class Unauthorized(ApiError):
    pass


class Forbidden(ApiError):
    pass


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    """409: a write lost an optimistic-concurrency race, or the object exists."""


class Gone(ApiError):
    """410: a watch's resourceVersion is too old; the informer must relist."""


class Invalid(ApiError):
    """422: the object failed validation; `message` is the API server's explanation."""


class TooManyRequests(ApiError):
    pass


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def error_from_response(status: int, text: str) -> ApiError:
    """Build the typed error from an HTTP status and the Status object in the body."""
    body: Any = None
    reason = ""
    message = text.strip()[:2000]
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict):
        reason = str(body.get("reason") or "")
        # A Status without a message has only its reason to say; the raw JSON
        # body would say it worse.
        message = str(body.get("message") or "")
        status = int(body.get("code") or status)
    return _BY_STATUS.get(status, ApiError)(
        status=status, reason=reason, message=message, body=body
    )


def error_from_status_object(status_obj: dict[str, Any]) -> ApiError:
    """A watch stream's ERROR event carries a Status object rather than an HTTP status."""
    code = int(status_obj.get("code") or 500)
    return _BY_STATUS.get(code, ApiError)(
        status=code,
        reason=str(status_obj.get("reason") or ""),
        message=str(status_obj.get("message") or ""),
        body=status_obj,
    )


def is_transient(error: BaseException) -> bool:
    """A failure of the API itself, not of what was asked: unreachable, overloaded,
    a lost write race. Retried with backoff; anything else waits the object's
    retry interval, because asking again sooner gets the same answer."""
    if isinstance(error, ApiUnavailable | Conflict | TooManyRequests):
        return True
    return isinstance(error, ApiError) and error.status >= 500


def one_line(error: BaseException) -> str:
    """An error as one line, whitespace folded (for the CLI; conditions and events use
    `sluice_runtime.describing.describe`)."""
    return " ".join(str(error).split())
