"""The artifact file server, over real HTTP on loopback."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import socket
import struct
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import pytest_asyncio
from yarl import URL

from sluice_runtime.artifacts import serving

if TYPE_CHECKING:
    from .conftest import Served

ARTIFACT = "gitrepository/ns/repo/abc.tar.gz"
SECRET = b"top secret token"


@pytest_asyncio.fixture
async def tree(served: Served, tmp_path: Path) -> Served:
    served.storage.write_bytes(ARTIFACT, os.urandom(300_000))
    served.storage.set_latest(ARTIFACT)
    served.storage.write_bytes("helmrepository/ns/h/index-1.yaml", b"entries: {}\n")
    served.storage.write_bytes("helmchart/ns/c/c-1.0.0.tgz", b"chart")
    served.storage.write_bytes("bucket/ns/b/data.bin", b"bin")
    served.storage.write_bytes("bucket/ns/b/empty", b"")
    (tmp_path / "secret").write_bytes(SECRET)
    directory = served.storage.path(ARTIFACT).parent
    os.symlink("../../../../secret", directory / "escape")
    os.symlink(tmp_path / "secret", directory / "absolute-escape")
    os.symlink("../../..", directory / "to-root")
    os.mkfifo(directory / "fifo")
    (directory / ".abc.tar.gz.0123.tmp").write_bytes(b"partial")
    return served


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_get(tree: Served) -> None:
    async with tree.session.get(f"{tree.base_url}/{ARTIFACT}") as response:
        body = await response.read()
        assert response.status == 200
        assert body == tree.storage.path(ARTIFACT).read_bytes()
        assert response.headers["Content-Length"] == "300000"
        assert response.headers["Content-Type"] == "application/gzip"
        assert response.headers["Accept-Ranges"] == "bytes"
        assert response.headers["ETag"] == f'"{_sha256(tree.storage.path(ARTIFACT))}"'
        assert "Content-Encoding" not in response.headers


async def test_get_of_the_storage_url(tree: Served) -> None:
    async with tree.session.get(tree.storage.url(ARTIFACT)) as response:
        assert response.status == 200


async def test_head(tree: Served) -> None:
    response = await tree.raw(f"/{ARTIFACT}", method="HEAD")
    assert response.status == 200
    assert response.body == b""
    assert response.headers["content-length"] == "300000"
    assert response.headers["etag"] == f'"{_sha256(tree.storage.path(ARTIFACT))}"'


async def test_latest_link_inside_root_is_served(tree: Served) -> None:
    async with tree.session.get(f"{tree.base_url}/gitrepository/ns/repo/latest.tar.gz") as response:
        assert response.status == 200
        assert await response.read() == tree.storage.path(ARTIFACT).read_bytes()
        assert response.headers["ETag"] == f'"{_sha256(tree.storage.path(ARTIFACT))}"'


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        pytest.param(ARTIFACT, "application/gzip", id="tar.gz"),
        pytest.param("helmchart/ns/c/c-1.0.0.tgz", "application/gzip", id="tgz"),
        pytest.param("helmrepository/ns/h/index-1.yaml", "application/yaml", id="yaml"),
        pytest.param("bucket/ns/b/data.bin", "application/octet-stream", id="other"),
    ],
)
async def test_content_types(tree: Served, path: str, content_type: str) -> None:
    async with tree.session.get(f"{tree.base_url}/{path}") as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == content_type


@pytest.mark.parametrize(
    ("range_header", "status", "content_range", "span"),
    [
        pytest.param("bytes=0-9", 206, "bytes 0-9/300000", (0, 10), id="first-bytes"),
        pytest.param("bytes=100-199", 206, "bytes 100-199/300000", (100, 200), id="middle"),
        pytest.param(
            "bytes=299990-", 206, "bytes 299990-299999/300000", (299990, 300000), id="open-end"
        ),
        pytest.param("bytes=-10", 206, "bytes 299990-299999/300000", (299990, 300000), id="suffix"),
        pytest.param(
            "bytes=-999999", 206, "bytes 0-299999/300000", (0, 300000), id="suffix-longer-than-file"
        ),
        pytest.param("bytes=5-999999", 206, "bytes 5-299999/300000", (5, 300000), id="end-clamped"),
        pytest.param("bytes=300000-", 416, "bytes */300000", None, id="start-past-end"),
        pytest.param("bytes=-0", 416, "bytes */300000", None, id="empty-suffix"),
        pytest.param("bytes=0-1,5-6", 200, None, (0, 300000), id="multiple-ranges-ignored"),
        pytest.param("bytes=9-1", 200, None, (0, 300000), id="inverted-ignored"),
        pytest.param("lines=0-1", 200, None, (0, 300000), id="other-unit-ignored"),
        pytest.param("bytes=-", 200, None, (0, 300000), id="malformed-ignored"),
    ],
)
async def test_range(
    tree: Served,
    range_header: str,
    status: int,
    content_range: str | None,
    span: tuple[int, int] | None,
) -> None:
    data = tree.storage.path(ARTIFACT).read_bytes()
    async with tree.session.get(
        f"{tree.base_url}/{ARTIFACT}", headers={"Range": range_header}
    ) as response:
        body = await response.read()
        assert response.status == status
        assert response.headers.get("Content-Range") == content_range
        if span is not None:
            assert body == data[span[0] : span[1]]
            assert response.headers["Content-Length"] == str(span[1] - span[0])


async def test_range_on_an_empty_file_is_unsatisfiable(tree: Served) -> None:
    async with tree.session.get(
        f"{tree.base_url}/bucket/ns/b/empty", headers={"Range": "bytes=0-"}
    ) as response:
        assert response.status == 416


async def test_if_range_with_another_etag_sends_everything(tree: Served) -> None:
    async with tree.session.get(
        f"{tree.base_url}/{ARTIFACT}", headers={"Range": "bytes=0-9", "If-Range": '"stale"'}
    ) as response:
        assert response.status == 200
        assert len(await response.read()) == 300_000


async def test_range_is_ignored_for_head(tree: Served) -> None:
    response = await tree.raw(f"/{ARTIFACT}", method="HEAD", headers={"Range": "bytes=0-9"})
    assert response.status == 200
    assert response.headers["content-length"] == "300000"


@pytest.mark.parametrize(
    ("if_none_match", "status"),
    [
        pytest.param("{etag}", 304, id="same"),
        pytest.param("W/{etag}", 304, id="weak"),
        pytest.param('"other", {etag}', 304, id="in-list"),
        pytest.param("*", 304, id="star"),
        pytest.param('"other"', 200, id="different"),
    ],
)
async def test_if_none_match(tree: Served, if_none_match: str, status: int) -> None:
    etag = f'"{_sha256(tree.storage.path(ARTIFACT))}"'
    async with tree.session.get(
        f"{tree.base_url}/{ARTIFACT}", headers={"If-None-Match": if_none_match.format(etag=etag)}
    ) as response:
        assert response.status == status
        assert response.headers["ETag"] == etag
        if status == 304:
            assert await response.read() == b""


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
async def test_only_get_and_head(tree: Served, method: str) -> None:
    response = await tree.raw(f"/{ARTIFACT}", method=method)
    assert response.status == 405
    assert set(response.headers["allow"].replace(" ", "").split(",")) == {"GET", "HEAD"}


TRAVERSALS = [
    pytest.param("/", id="root-listing"),
    pytest.param("/gitrepository", id="dir-listing"),
    pytest.param("/gitrepository/ns/repo/", id="dir-listing-slash"),
    pytest.param("/secret", id="outside-file-by-name"),
    pytest.param("/../secret", id="dotdot"),
    pytest.param("/../../../../../etc/passwd", id="dotdot-many"),
    pytest.param("/gitrepository/../../secret", id="dotdot-middle"),
    pytest.param("/gitrepository/ns/repo/../../../abc.tar.gz", id="dotdot-inside-still-refused"),
    pytest.param("/%2e%2e/secret", id="encoded-dotdot"),
    pytest.param("/%2E%2E/secret", id="encoded-dotdot-upper"),
    pytest.param("/.%2e/secret", id="half-encoded-dotdot"),
    pytest.param(
        "/gitrepository/ns/repo/%2e%2e/%2e%2e/%2e%2e/%2e%2e/secret", id="encoded-dotdot-deep"
    ),
    pytest.param("/gitrepository%2fns%2frepo%2fabc.tar.gz", id="encoded-slash"),
    pytest.param("/gitrepository/ns/repo/..%2f..%2f..%2f..%2fsecret", id="encoded-slash-dotdot"),
    pytest.param("/%2fetc%2fpasswd", id="encoded-absolute"),
    pytest.param("//etc/passwd", id="double-slash-absolute"),
    pytest.param("/gitrepository//ns/repo/abc.tar.gz", id="double-slash"),
    pytest.param("/..\\..\\secret", id="backslash"),
    pytest.param("/gitrepository\\ns\\repo\\abc.tar.gz", id="backslash-separators"),
    pytest.param("/%5c..%5csecret", id="encoded-backslash"),
    pytest.param("/gitrepository/ns/repo/abc.tar.gz%00", id="encoded-nul"),
    pytest.param("/gitrepository/ns/repo/abc.tar.gz%00.yaml", id="encoded-nul-suffix"),
    pytest.param("/gitrepository/ns/repo/./abc.tar.gz", id="dot-segment"),
    pytest.param("/gitrepository/ns/repo/%2e/abc.tar.gz", id="encoded-dot-segment"),
    pytest.param("/%252e%252e/secret", id="double-encoded"),
    pytest.param("/gitrepository/ns/repo/escape", id="symlink-out"),
    pytest.param("/gitrepository/ns/repo/absolute-escape", id="absolute-symlink-out"),
    pytest.param("/gitrepository/ns/repo/to-root", id="symlink-to-root-dir"),
    pytest.param("/gitrepository/ns/repo/to-root/secret", id="through-symlink-to-root"),
    pytest.param("/gitrepository/ns/repo/fifo", id="fifo"),
    pytest.param("/gitrepository/ns/repo/.abc.tar.gz.0123.tmp", id="temp-file"),
    pytest.param("/gitrepository/ns/repo/missing.tar.gz", id="missing"),
    pytest.param("/etc/passwd", id="absolute-inside"),
    pytest.param("http://127.0.0.1/../secret", id="absolute-form-dotdot"),
    pytest.param("http://127.0.0.1/%2e%2e/secret", id="absolute-form-encoded"),
]


@pytest.mark.parametrize("target", TRAVERSALS)
async def test_nothing_but_files_inside_the_root(tree: Served, target: str) -> None:
    response = await tree.raw(target)
    assert response.status == 404, response
    assert SECRET not in response.body


@pytest.mark.parametrize("target", [p for p in TRAVERSALS if str(p.values[0]).startswith("/")])
async def test_traversal_with_an_encoded_client_url(tree: Served, target: str) -> None:
    """The same paths through aiohttp's client, told not to normalise them."""
    url = URL(f"{tree.base_url}{target.replace(chr(92), '%5C')}", encoded=True)
    async with tree.session.get(url) as response:
        assert response.status == 404
        assert SECRET not in await response.read()


async def test_absolute_form_of_a_good_path(tree: Served) -> None:
    response = await tree.raw(f"http://127.0.0.1:{tree.port}/{ARTIFACT}")
    assert response.status == 200


async def test_digest_is_computed_once_per_file_version(
    tree: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real_hash = serving._hash

    def counting_hash(fd: int) -> str:
        calls.append(fd)
        return real_hash(fd)

    monkeypatch.setattr(serving, "_hash", counting_hash)
    url = f"{tree.base_url}/bucket/ns/b/data.bin"
    for _ in range(3):
        async with tree.session.get(url) as response:
            assert response.status == 200
    assert len(calls) == 1
    tree.storage.write_bytes("bucket/ns/b/data.bin", b"new")
    async with tree.session.get(url) as response:
        assert response.headers["ETag"] == f'"{hashlib.sha256(b"new").hexdigest()}"'
    assert len(calls) == 2


async def test_a_client_gone_mid_download_leaves_no_traceback(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    """A controller killed while downloading an artifact: the server drops the
    connection without logging an error (the chaos suite reads logs for them)."""
    served.storage.write_bytes("big/file.bin", os.urandom(8 * 1024 * 1024))
    caplog.set_level(logging.DEBUG, logger="aiohttp")
    for _ in range(5):
        reader, writer = await asyncio.open_connection(served.host, served.port)
        writer.write(b"GET /big/file.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        assert (await reader.read(64)).startswith(b"HTTP/1.1 200")
        sock = writer.get_extra_info("socket")
        # RST instead of FIN, as the kernel does for a killed process with unread data.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()
    # The server notices on its next writes; the file is served again meanwhile.
    answer = await served.raw("/big/file.bin", method="HEAD")
    assert answer.status == 200
    await asyncio.sleep(0.5)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
