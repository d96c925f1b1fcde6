"""What the two allocators under the Python heap hold: pymalloc's arenas and glibc's malloc.

tracemalloc names the Python allocations that grew, but a resident size that
grows with no traced growth behind it can live in three other places, and
telling them apart needs each allocator's own account at the same moment:

- pymalloc (objects of up to 512 bytes): 1 MiB arenas, each returned to the
  system only once every block in it is free. A long-lived object allocated
  among short-lived ones keeps its whole arena; `bytes in allocated blocks`
  against `arenas allocated current` says how much of the arenas is live.
  CPython has no API for these figures but `sys._debugmallocstats()`, which
  prints to the C stderr; it holds the GIL while it prints, so the fd is
  pointed at a file for that call only.
- glibc's malloc (everything larger, and every C library: libgit2, OpenSSL,
  zlib, the C parts of aiohttp, yarl and multidict): `mallinfo2()` gives the
  bytes in use, the free bytes it keeps, and the blocks mapped on their own;
  `malloc_info(0)` the same per arena. In use growing with Python's large
  allocations flat is a C library's allocation; free growing is the
  allocator's high-water mark, which `malloc_trim(0)` can give back.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import tempfile
import threading
import xml.etree.ElementTree as ElementTree
from typing import Any

_MIB = 1024 * 1024
_LOCK = threading.Lock()


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2  # noqa: B018 (glibc 2.33 and later; absent elsewhere)
    except (OSError, AttributeError):
        return None
    return libc


def glibc_heap() -> dict[str, Any] | None:
    """glibc's own account of its heap; None where there is no glibc (musl, macOS)."""
    libc = _libc()
    if libc is None:
        return None
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    found: dict[str, Any] = {
        # The arenas' size from the system (brk and the thread arenas), without the
        # blocks mapped on their own.
        "arenas_mib": info.arena / _MIB,
        "in_use_mib": info.uordblks / _MIB,
        "free_mib": info.fordblks / _MIB,
        "free_chunks": info.ordblks,
        "releasable_top_mib": info.keepcost / _MIB,
        "mmapped_mib": info.hblkhd / _MIB,
        "mmapped_blocks": info.hblks,
    }
    per_arena = _malloc_info(libc)
    if per_arena is not None:
        found["per_arena"] = per_arena
    return found


def _malloc_info(libc: ctypes.CDLL) -> list[dict[str, float]] | None:
    """malloc_info(0)'s XML, one entry per arena: its size from the system and its free
    bytes (fast bins and the rest)."""
    buffer = ctypes.c_char_p()
    size = ctypes.c_size_t()
    libc.open_memstream.restype = ctypes.c_void_p
    libc.open_memstream.argtypes = [
        ctypes.POINTER(ctypes.c_char_p),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    libc.free.argtypes = [ctypes.c_void_p]
    stream = libc.open_memstream(ctypes.byref(buffer), ctypes.byref(size))
    if not stream:
        return None
    try:
        libc.malloc_info(0, stream)
    finally:
        libc.fclose(stream)
    try:
        text = ctypes.string_at(buffer, size.value).decode()
    finally:
        libc.free(buffer)
    arenas = []
    # glibc's own output about this process, not input from anyone: no entities to fear.
    for heap in ElementTree.fromstring(text).iter("heap"):  # noqa: S314
        totals = {t.get("type"): int(t.get("size", "0")) for t in heap.findall("total")}
        system = {s.get("type"): int(s.get("size", "0")) for s in heap.findall("system")}
        arenas.append(
            {
                "arena": int(heap.get("nr", "0")),
                "system_mib": system.get("current", 0) / _MIB,
                "max_mib": system.get("max", 0) / _MIB,
                "free_fast_mib": totals.get("fast", 0) / _MIB,
                "free_rest_mib": totals.get("rest", 0) / _MIB,
            }
        )
    return arenas


_PYMALLOC_FIGURES = {
    "arenas allocated current": "arenas",
    "arenas highwater mark": "arenas_highwater",
    "arenas reclaimed": "arenas_reclaimed",
    "bytes in allocated blocks": "allocated_mib",
    "bytes in available blocks": "available_mib",
}
_FIGURE = re.compile(r"^# (.+?)\s+=\s+([\d,]+)\s*$")


def parse_pymalloc_stats(text: str) -> dict[str, float]:
    """The figures of `sys._debugmallocstats()` this report uses: the arenas (count and
    bytes: the first `Total`), and the bytes in live and in free blocks inside them."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        matched = _FIGURE.match(line)
        if matched and matched.group(1) in _PYMALLOC_FIGURES:
            key = _PYMALLOC_FIGURES[matched.group(1)]
            value = int(matched.group(2).replace(",", ""))
            found[key] = value / _MIB if key.endswith("_mib") else value
        elif line.startswith("Total") and "=" in line and "arenas_mib" not in found:
            found["arenas_mib"] = int(line.split("=")[1].strip().replace(",", "")) / _MIB
    return found


def pymalloc_stats() -> dict[str, float] | None:
    """pymalloc's arenas and the live bytes in them; None where this CPython has none."""
    debug_stats = getattr(sys, "_debugmallocstats", None)
    if debug_stats is None:
        return None
    with _LOCK, tempfile.TemporaryFile() as capture:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(capture.fileno(), 2)
            debug_stats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        text = capture.read().decode(errors="replace")
    found = parse_pymalloc_stats(text)
    # A log line another thread wrote in the moment fd 2 pointed at the file is not
    # lost: everything that is not the statistics' own is written back.
    foreign = [line for line in text.splitlines() if line.startswith("{")]
    if foreign:
        os.write(2, ("\n".join(foreign) + "\n").encode())
    return found or None
