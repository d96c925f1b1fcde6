"""Errors in a person's words: the server's message, what to do, no codes, no reprs."""

from __future__ import annotations

import socket
import ssl

import pytest
import requests
import urllib3
from urllib3.connection import HTTPSConnection

from sluice_runtime.describing import describe, describe_http_status
from sluice_runtime.kube.errors import ApiUnavailable, error_from_response


def _api(status: int, message: str, reason: str = "") -> BaseException:
    body = f'{{"kind": "Status", "code": {status}, "reason": "{reason}", "message": "{message}"}}'
    return error_from_response(status, body)


def _dns_failure() -> BaseException:
    # What requests raises for a registry whose name does not resolve: four
    # wrappings, each repeating the one inside with a connection's repr.
    gai = socket.gaierror(-2, "Name or service not known")
    conn = HTTPSConnection("registry.example.invalid", 443)
    resolution = urllib3.exceptions.NameResolutionError("registry.example.invalid", conn, gai)
    resolution.__cause__ = gai
    retries = urllib3.exceptions.MaxRetryError(None, "/v2/", resolution)  # type: ignore[arg-type]
    return requests.exceptions.ConnectionError(retries)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        pytest.param(
            _api(422, 'Service \\"bad\\" is invalid: spec.ports[0].port: Invalid value: 70000'),
            'Service "bad" is invalid: spec.ports[0].port: Invalid value: 70000; '
            "fix the object in its source",
            id="invalid",
        ),
        pytest.param(
            _api(403, 'configmaps is forbidden: User \\"x\\" cannot create resource'),
            'configmaps is forbidden: User "x" cannot create resource; '
            "grant that permission to the identity, or leave the object out",
            id="forbidden",
        ),
        pytest.param(
            _api(404, 'configmaps \\"a\\" not found'), 'configmaps "a" not found', id="nf"
        ),
        pytest.param(
            _api(500, "", reason="InternalError"),
            "internal error; the API server failed; retrying",
            id="no-message-uses-reason-words",
        ),
        pytest.param(
            ApiUnavailable("cannot reach API server https://127.0.0.1:6443: timed out"),
            "cannot reach API server https://127.0.0.1:6443: timed out",
            id="unavailable",
        ),
        pytest.param(_dns_failure(), "host name not found (DNS)", id="dns-through-requests"),
        pytest.param(
            ConnectionRefusedError(111, "Connection refused"), "connection refused", id="refused"
        ),
        pytest.param(requests.exceptions.ReadTimeout("read timed out"), "timed out", id="timeout"),
        pytest.param(
            ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"),
            "TLS failed: [SSL: WRONG_VERSION_NUMBER] wrong version number",
            id="tls",
        ),
        pytest.param(
            ValueError("bad  thing <Foo object at 0x7f00aa>: \n happened"),
            "bad thing happened",
            id="reprs-and-whitespace-folded",
        ),
    ],
)
def test_describe(error: BaseException, expected: str) -> None:
    text = describe(error)
    assert text == expected
    assert " object at 0x" not in text and "HTTPSConnection" not in text


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param(401, "the credentials were refused", id="401"),
        pytest.param(404, "not found", id="404"),
        pytest.param(418, "the server refused the request", id="other-4xx"),
        pytest.param(599, "the server failed", id="other-5xx"),
    ],
)
def test_describe_http_status(status: int, expected: str) -> None:
    assert describe_http_status(status) == expected
