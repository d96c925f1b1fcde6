"""Logged exceptions name their type and message and never a frame's locals."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
import structlog

from sluice_runtime.observing import logging as sluice_logging


@pytest.fixture
def restore_logging() -> Iterator[None]:
    yield
    sluice_logging.configure(level="info", encoding="json")


def read_secret_and_fail() -> None:
    secret = "s3cr3t-value"
    token = {"token": secret}
    raise RuntimeError(f"provider refused a token of {len(token['token'])} characters")


@pytest.mark.parametrize("encoding", [pytest.param("json"), pytest.param("console")])
@pytest.mark.usefixtures("restore_logging")
def test_exceptions_are_logged_without_locals(encoding: sluice_logging.Encoding) -> None:
    stream = io.StringIO()
    sluice_logging.configure(level="info", encoding=encoding, stream=stream)
    log = structlog.get_logger("test")
    try:
        read_secret_and_fail()
    except RuntimeError:
        log.exception("reconcile failed")
    output = stream.getvalue()
    assert "s3cr3t-value" not in output
    assert "RuntimeError" in output
    assert "provider refused a token of 12 characters" in output
    assert "read_secret_and_fail" in output  # frames are kept, only their locals go
    if encoding == "json":
        (line,) = [json.loads(text) for text in output.splitlines() if text.strip()]
        (raised,) = line["exception"]
        assert raised["exc_type"] == "RuntimeError"
        assert all("locals" not in frame for frame in raised["frames"])
