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

import asyncio.sslproto
import ctypes
import os

ARENAS = 2
MMAP_THRESHOLD = 256 * 1024

TLS_READ_BUFFER = 64 * 1024

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


def smaller_tls_buffers() -> None:
    """Give TLS connections made from now on a 64 KiB receive buffer.

    A class attribute of asyncio's `SSLProtocol` (CPython 3.11 to 3.13 name it
    `max_size` and size the buffer and each plaintext read by it); only this
    process's own connections see it.
    """
    asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER
