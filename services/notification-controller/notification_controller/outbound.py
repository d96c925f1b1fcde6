"""What a Provider request is made of, shared by every payload builder:
the target of one delivery, the request built for it, and the error that is safe to log."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from sluice_api.notification import Provider


class DeliveryError(Exception):
    """An event could not be delivered; the message is safe to log."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True, slots=True)
class OutboundRequest:
    """One HTTP request to a Provider, built before it is sent."""

    method: str
    url: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Target:
    """One event on its way to one Provider, with the secret's address, token and headers."""

    provider: Provider
    event: Mapping[str, Any]
    address: str
    token: str
    headers: dict[str, str]
    now: float
    alert: Mapping[str, Any] | None = None
    """The Alert the event matched (as the API gives it), for `commitStatusExpr`."""


def http_url(address: str) -> str:
    parts = urlsplit(address.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise DeliveryError("the provider address is not an http(s) URL")
    return address.strip()


def metadata_of(event: Mapping[str, Any]) -> dict[str, str]:
    metadata = event.get("metadata")
    if not isinstance(metadata, Mapping):
        return {}
    return {str(key): str(value) for key, value in metadata.items()}


def involved_of(event: Mapping[str, Any]) -> Mapping[str, Any]:
    involved = event.get("involvedObject")
    return involved if isinstance(involved, Mapping) else {}


def json_body(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
