"""A controller's worker threads share two malloc arenas instead of one each, and
its TLS connections keep a 64 KiB receive buffer instead of 256 KiB.

Arenas are measured in a fresh interpreter, since glibc's settings are per process:
eight threads alive at once, each allocating outside Python's small-object
allocator, and glibc's own count of its arenas (`malloc_stats`) afterwards.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import ctypes
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice_envtest.certificates import make_serving_pki
from sluice_runtime import allocating

SCRIPT = r"""
import ctypes, sys, threading
if sys.argv[1] == "tuned":
    from sluice_runtime.allocating import tune_malloc
    assert tune_malloc(), "tune_malloc did not apply"
kept = []
together = threading.Barrier(8)
def work():
    together.wait()  # all alive at once: a finished thread's arena would be reused
    kept.append([bytearray(4096) for _ in range(100)])  # above 512 bytes: glibc's malloc
    together.wait()
threads = [threading.Thread(target=work) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
ctypes.CDLL(None).malloc_stats()
"""


def has_glibc_malloc() -> bool:
    try:
        return hasattr(ctypes.CDLL(None), "malloc_stats")
    except OSError:
        return False


def arenas_used(mode: str, env: dict[str, str] | None = None) -> int:
    answer = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=env,
    )
    # malloc_stats writes one "Arena N:" block per arena to stderr.
    return answer.stderr.count("Arena ")


@pytest.mark.skipif(not has_glibc_malloc(), reason="glibc's malloc is not this process's")
@pytest.mark.parametrize(
    ("mode", "most"),
    [
        pytest.param("plain", None, id="untuned-one-arena-per-thread"),
        pytest.param("tuned", allocating.ARENAS, id="tuned-two-arenas"),
    ],
)
def test_threads_share_the_arena_limit(
    mode: str, most: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    used = arenas_used(mode)
    if most is None:
        # The measurement can see arenas multiply: one per thread, up to 8 per core.
        assert used > allocating.ARENAS
    else:
        assert used == most


def test_an_operators_malloc_settings_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert allocating.tune_malloc() is False


@pytest.fixture
def restore_tls_buffers() -> Iterator[None]:
    before = asyncio.sslproto.SSLProtocol.max_size
    yield
    asyncio.sslproto.SSLProtocol.max_size = before


@pytest.mark.usefixtures("restore_tls_buffers")
async def test_tls_connections_hold_a_smaller_receive_buffer(tmp_path: Path) -> None:
    """A connection made afterwards receives into 64 KiB, and a body four times
    that size still arrives whole."""
    paths = make_serving_pki().write(tmp_path)
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving.load_cert_chain(paths["tls.crt"], paths["tls.key"])
    body = bytes(range(256)) * (allocating.TLS_READ_BUFFER // 64)  # 4 x the buffer

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(1)
        writer.write(body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=serving)
    port = server.sockets[0].getsockname()[1]
    trusting = ssl.create_default_context(cafile=str(paths["ca.crt"]))

    async def fetch() -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=trusting)
        # The protocol's ciphertext buffer: what each connection keeps resident.
        held = len(writer.transport._ssl_protocol._ssl_buffer)  # type: ignore[attr-defined]
        writer.write(b"?")
        received = await reader.readexactly(len(body))
        writer.close()
        return held, received

    try:
        held_before, _ = await fetch()
        allocating.smaller_tls_buffers()
        held_after, received = await fetch()
    finally:
        server.close()
        await server.wait_closed()
    assert held_before > allocating.TLS_READ_BUFFER
    assert held_after == allocating.TLS_READ_BUFFER
    assert received == body


TRIM_SCRIPT = r"""
import sys
from sluice_runtime.allocating import trim_malloc, tune_malloc
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
tune_malloc()
# 100 MB in blocks under the mmap threshold (glibc's heap), the last one kept: the
# free memory below it cannot leave from the top, only by trimming inside the heap.
blocks = [bytearray(100_000) for _ in range(1000)]
kept = blocks.pop()
del blocks
before = rss()
released = trim_malloc() if sys.argv[1] == "trim" else False
print(before, rss(), released)
"""


@pytest.mark.skipif(not has_glibc_malloc(), reason="glibc's malloc is not this process's")
@pytest.mark.parametrize(
    ("mode", "gives_back"),
    [pytest.param("keep", False, id="freed-memory-stays-resident"),
     pytest.param("trim", True, id="trim-gives-it-back")],
)  # fmt: skip
def test_trim_gives_freed_heap_memory_back(
    mode: str, gives_back: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    answer = subprocess.run(
        [sys.executable, "-c", TRIM_SCRIPT, mode], capture_output=True, text=True, check=True
    )
    before, after, released = answer.stdout.split()
    assert int(before) > 80  # the freed blocks are still resident
    assert (int(before) - int(after) > 80) is gives_back
    assert released == str(gives_back)
