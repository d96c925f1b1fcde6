"""Memory settings of a controller process: glibc's allocator and asyncio's TLS buffers.

glibc's allocator, set for a long-lived asyncio process with a few worker threads:
Python objects of up to 512 bytes come from Python's own arenas; everything
larger (response bodies, JSON documents, the buffers of a tarball being
extracted) comes from glibc's malloc, which gives each thread that allocates
an arena of its own, up to eight per core, and keeps freed memory in them.
A controller's threads (storage, extraction, registry calls, asyncio's
default executor) each grow an arena during a burst, and the process keeps
their high-water marks. Two arenas serve these threads, which mostly wait on
I/O, without contention worth measuring (the Python allocator does most of
the work, under the GIL). Blocks of 256 KiB and more are mapped on their own and given
back when freed: glibc otherwise raises that threshold to 32 MiB after the
first large free, and big bodies then stay in the heap once done.

What an operator sets wins: with MALLOC_ARENA_MAX or MALLOC_MMAP_THRESHOLD_
in the environment (glibc reads them itself), nothing is changed here.

asyncio's TLS: every TLS connection (to the API server, a registry, a Git
host) holds a zero-filled 256 KiB buffer for the ciphertext it receives,
resident for the connection's life, though one TLS record is at most 16 KiB
and a read that fills the buffer is simply followed by another. A
kustomize-controller at its concurrency keeps some forty connections to the
API server alone; at 64 KiB each keeps about 195 KiB less (measured: 347 KiB
per connection end before, 152 after).
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import contextlib
import ctypes
import os
from collections.abc import AsyncIterator
from pathlib import Path

ARENAS = 2
MMAP_THRESHOLD = 256 * 1024

TLS_READ_BUFFER = 64 * 1024

TRIM_EVERY = 60.0
TRIM_AFTER_GROWTH_MIB = 2.0

_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


def tune_malloc() -> bool:
    """Set glibc's arena limit and mmap threshold; False where there is no glibc
    (musl, another libc) or the operator chose for themselves."""
    if any(name in os.environ for name in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_")):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, ARENAS)) and bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def trim_malloc() -> bool:
    """Give the free memory glibc keeps back to the system (`malloc_trim(0)`): the top
    of each arena and whole free pages inside it. True if anything was released;
    False also where there is no glibc."""
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim.restype = ctypes.c_int
    return bool(malloc_trim(0))


def resident_mib() -> float:
    """This process's VmRSS, or NaN where /proc has none."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return float("nan")
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def trim_if_grown(floor: float, *, growth: float = TRIM_AFTER_GROWTH_MIB) -> float:
    """Trim if the resident size rose `growth` MiB above `floor` (the size after the
    last trim); the new floor. A burst of reconciles (a new revision reaching every
    app) leaves the arenas holding what its threads freed: measured in the soak, the
    kustomize-controller gave back 4-6 MiB at each revision, the source-controller 1.5."""
    if not resident_mib() - floor >= growth:  # also NaN: nothing to compare
        return floor
    trim_malloc()
    return resident_mib()


@contextlib.asynccontextmanager
async def trimming(every: float = TRIM_EVERY) -> AsyncIterator[None]:
    """While the block runs, give freed memory back after bursts: every `every` seconds,
    a trim if the process grew since the last one (a few milliseconds in a thread).
    `SLUICE_MALLOC_TRIM=0` turns it off (an operator's choice, and the soak's baseline)."""
    if os.environ.get("SLUICE_MALLOC_TRIM", "").strip() == "0":
        yield
        return

    async def loop() -> None:
        floor = resident_mib()
        while True:
            await asyncio.sleep(every)
            floor = await asyncio.to_thread(trim_if_grown, floor)

    task = asyncio.get_running_loop().create_task(loop(), name="malloc-trim")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def smaller_tls_buffers() -> None:
    """Give TLS connections made from now on a 64 KiB receive buffer.

    A class attribute of asyncio's `SSLProtocol` (CPython 3.11 to 3.13 name it
    `max_size` and size the buffer and each plaintext read by it); only this
    process's own connections see it.
    """
    asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER
