"""The smart HTTP ref advertisement, read as libgit2's ls-remote reads it (issue 19)."""

from __future__ import annotations

import asyncio

import pytest

from sluice_runtime.git.advertising import (
    CONTENT_TYPE,
    AdvertisementError,
    close,
    list_refs,
    parse_advertisement,
    served_here,
)

A = "a" * 40
B = "b" * 40
C = "c" * 40


def pkt(line: str) -> bytes:
    data = line.encode()
    return b"%04x" % (len(data) + 4) + data


SERVICE = pkt("# service=git-upload-pack\n") + b"0000"
CAPS = "\0multi_ack thin-pack side-band symref=HEAD:refs/heads/main agent=git/2.39\n"


@pytest.mark.parametrize(
    ("body", "refs"),
    [
        pytest.param(
            SERVICE + pkt(f"{A} HEAD{CAPS}") + pkt(f"{A} refs/heads/main\n") + b"0000",
            {"HEAD": A, "refs/heads/main": A},
            id="branch-and-head",
        ),
        pytest.param(
            SERVICE
            + pkt(f"{A} HEAD{CAPS}")
            + pkt(f"{B} refs/tags/v1\n")
            + pkt(f"{C} refs/tags/v1^{{}}\n")
            + b"0000",
            {"HEAD": A, "refs/tags/v1": C},
            id="annotated-tag-peeled-to-its-commit",
        ),
        pytest.param(
            SERVICE + pkt(f"{'0' * 40} capabilities^{{}}{CAPS}") + b"0000",
            {},
            id="empty-repository",
        ),
        pytest.param(
            SERVICE + pkt(f"{A} refs/heads/main{CAPS}") + pkt(f"{B} refs/heads/dev") + b"0000",
            {"refs/heads/main": A, "refs/heads/dev": B},
            id="no-head-and-no-trailing-newline",
        ),
        pytest.param(
            SERVICE + pkt(f"{'d' * 64} refs/heads/main{CAPS}") + b"0000",
            {"refs/heads/main": "d" * 64},
            id="sha256-repository",
        ),
    ],
)
def test_parse_advertisement(body: bytes, refs: dict[str, str]) -> None:
    assert parse_advertisement(body) == refs


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        pytest.param(b"<html>log in</html>", "bad pkt-line", id="html-page"),
        pytest.param(SERVICE + b"00ff" + A.encode(), "truncated", id="truncated-line"),
        pytest.param(pkt(f"{A} refs/heads/main\n"), "no flush-pkt", id="no-flush"),
        pytest.param(SERVICE + b"0002", "truncated", id="length-below-header"),
    ],
)
def test_parse_advertisement_refuses_what_is_not_one(body: bytes, problem: str) -> None:
    with pytest.raises(AdvertisementError, match=problem) as raised:
        parse_advertisement(body)
    assert raised.value.kind == "git"


@pytest.mark.parametrize(
    ("url", "ca", "here"),
    [
        pytest.param("https://git.example.com/org/repo.git", None, True, id="https"),
        pytest.param("http://127.0.0.1:8080/repo.git", None, True, id="http"),
        pytest.param("https://git.example.com/repo.git", "PEM", False, id="own-ca-in-worker"),
        pytest.param("ssh://git@git.example.com/repo.git", None, False, id="ssh-in-worker"),
        pytest.param("https://u:p@git.example.com/repo.git", None, False, id="url-credentials"),
    ],
)
def test_served_here(url: str, ca: str | None, here: bool) -> None:
    assert served_here(url, ca=ca) is here


async def test_a_kept_alive_connection_closed_while_idle_is_replaced() -> None:
    """A server that answers one request per connection and closes it when the
    next arrives, without having said so (no `Connection: close`): the race of
    a kept-alive connection the server dropped as the client reused it. Every
    listing still gets its answer, on a new connection."""
    body = SERVICE + pkt(f"{A} refs/heads/main\n") + b"0000"
    connections = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: " + CONTENT_TYPE.encode() + b"\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body
        )
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")  # the client reused it: drop it unanswered
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        for _ in range(3):
            refs = await list_refs(
                f"http://127.0.0.1:{port}/repo.git",
                username=None,
                password=None,
                bearer_token=None,
                timeout=10,
            )
            assert refs == {"refs/heads/main": A}
    finally:
        await close()
        server.close()
    assert connections == 3
