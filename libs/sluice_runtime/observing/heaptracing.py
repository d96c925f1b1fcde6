"""Where a controller's memory grows: tracemalloc snapshots diffed on request.

Resident memory that climbs over hours is either Python objects kept alive
(a cache, a list that is only appended to) or memory the C allocator holds
after the objects are gone (fragmentation, freed blocks it keeps). Telling
them apart needs two numbers at the same moment: what Python has allocated
and still holds (tracemalloc's traced size) and what the process has
resident (VmRSS); and, for the first, where the growth was allocated.

`SLUICE_TRACEMALLOC=<frames>` starts tracemalloc when the process starts,
keeping `frames` frames of every allocation's traceback. `GET /debug/heap`
on the metrics address then takes a snapshot and answers with the traced
and resident sizes and the `top` tracebacks that grew most since the
previous request (the largest ones, on the first); `trim=1` also calls
glibc's `malloc_trim(0)` and reports the resident size after it: what drops
was free memory the allocator kept, what stays is in use or fragmented.

Off unless the variable is set: tracemalloc then costs nothing, and the
endpoint answers 404 saying how to turn it on (with `trim=1`, it still
trims and reports the resident size before and after). On, every allocation pays for
its traceback (a third or more of the CPU, more memory): a diagnosis, not a
default.
"""

from __future__ import annotations

import json
import linecache
import os
import threading
import tracemalloc
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sluice_runtime.allocating import trim_malloc
from sluice_runtime.observing.allocators import glibc_heap, pymalloc_stats

ENV = "SLUICE_TRACEMALLOC"
MAX_FRAMES = 100
DEFAULT_TOP = 20
MAX_TOP = 500
_MIB = 1024 * 1024

# Allocations made by tracing itself and by importing modules are not the
# process's memory story; nor linecache's copies of source files, which this
# report's own tracebacks fill (measured: the top "growth" of a soak, 2 MiB).
_IGNORED = (
    tracemalloc.Filter(False, tracemalloc.__file__),
    tracemalloc.Filter(False, linecache.__file__, all_frames=True),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
    tracemalloc.Filter(False, "<unknown>"),
)


def frames_from(environ: Mapping[str, str]) -> int:
    """The number of frames `SLUICE_TRACEMALLOC` asks for; 0 when unset, empty or 0."""
    raw = environ.get(ENV, "").strip()
    if not raw:
        return 0
    if not raw.isdigit() or not 0 <= int(raw) <= MAX_FRAMES:
        raise ValueError(
            f"{ENV}={raw!r}: expected the number of traceback frames to keep, 0 to {MAX_FRAMES}"
        )
    return int(raw)


def start_from_env(environ: Mapping[str, str] = os.environ) -> bool:
    """Start tracemalloc if the environment asks for it; True when tracing."""
    frames = frames_from(environ)
    if frames and not tracemalloc.is_tracing():
        tracemalloc.start(frames)
    return tracemalloc.is_tracing()


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


class HeapTracer:
    """Snapshots of this process's traced heap, each diffed against the one before."""

    def __init__(self) -> None:
        self._previous: tracemalloc.Snapshot | None = None
        # Two requests at once would diff against the same snapshot twice.
        self._lock = threading.Lock()

    def report(self, *, top: int = DEFAULT_TOP, trim: bool = False) -> dict[str, Any]:
        with self._lock:
            snapshot = tracemalloc.take_snapshot().filter_traces(_IGNORED)
            traced, peak = tracemalloc.get_traced_memory()
            rss = resident_mib()
            found: dict[str, Any] = {
                "traced_mib": traced / _MIB,
                "traced_peak_mib": peak / _MIB,
                "rss_mib": rss,
                # Resident but not a live Python allocation: the interpreter's own
                # structures, C libraries' memory, and what the allocator keeps.
                "untraced_mib": rss - traced / _MIB,
                # tracemalloc's own tables: part of the untraced size, growing with it.
                "tracemalloc_mib": tracemalloc.get_tracemalloc_memory() / _MIB,
                "frames": tracemalloc.get_traceback_limit(),
            }
            found.update(_untraced(trim=trim))
            if self._previous is None:
                found["against"] = "none: the largest tracebacks"
                stats = snapshot.statistics("traceback")[:top]
                found["top"] = [_entry(s.traceback, s.size, s.count) for s in stats]
            else:
                found["against"] = "the previous snapshot: the tracebacks that grew most"
                diffs = snapshot.compare_to(self._previous, "traceback")
                diffs.sort(key=lambda d: d.size_diff, reverse=True)
                found["top"] = [
                    {
                        **_entry(d.traceback, d.size, d.count),
                        "size_diff_kib": d.size_diff / 1024,
                        "count_diff": d.count_diff,
                    }
                    for d in diffs[:top]
                ]
            self._previous = snapshot
            return found


def _entry(traceback: tracemalloc.Traceback, size: int, count: int) -> dict[str, Any]:
    return {
        "size_kib": size / 1024,
        "count": count,
        # Outermost first, as a Python traceback reads.
        "traceback": [
            f"{f.filename}:{f.lineno}: {linecache.getline(f.filename, f.lineno).strip()}"
            for f in reversed(traceback)
        ],
    }


def as_text(found: Mapping[str, Any]) -> str:
    lines = [
        f"traced {found['traced_mib']:.1f} MiB (peak {found['traced_peak_mib']:.1f}), "
        f"resident {found['rss_mib']:.1f} MiB, untraced {found['untraced_mib']:.1f} MiB; "
        f"{found['frames']} frames",
    ]
    lines.append(_allocators_text(found).rstrip("\n"))
    lines.append(f"against {found['against']}")
    for number, entry in enumerate(found["top"], 1):
        grew = (
            f"{entry['size_diff_kib']:+.1f} KiB ({entry['count_diff']:+d} blocks), now "
            if "size_diff_kib" in entry
            else ""
        )
        lines.append(f"\n#{number}: {grew}{entry['size_kib']:.1f} KiB in {entry['count']} blocks")
        lines.extend(f"    {frame}" for frame in entry["traceback"])
    return "\n".join(lines) + "\n"


def _untraced(*, trim: bool) -> dict[str, Any]:
    """The allocators' own accounts (observing.allocators), and with `trim` the resident
    size after glibc gave back what it could: these need no tracing."""
    found: dict[str, Any] = {"pymalloc": pymalloc_stats(), "glibc": glibc_heap()}
    if trim:
        found["trimmed"] = trim_malloc()
        found["rss_after_trim_mib"] = resident_mib()
        found["glibc_after_trim"] = glibc_heap()
    return found


def _allocators_text(found: Mapping[str, Any]) -> str:
    lines = []
    if "rss_after_trim_mib" in found:
        lines.append(f"resident after malloc_trim(0): {found['rss_after_trim_mib']:.1f} MiB")
    if pymalloc := found.get("pymalloc"):
        lines.append(
            f"pymalloc: {pymalloc.get('arenas', 0):.0f} arenas, "
            f"{pymalloc.get('arenas_mib', 0):.1f} MiB, "
            f"{pymalloc.get('allocated_mib', 0):.1f} MiB in live blocks"
        )
    if glibc := found.get("glibc"):
        lines.append(
            f"glibc malloc: {glibc['in_use_mib']:.1f} MiB in use, {glibc['free_mib']:.1f} MiB "
            f"free in {glibc['arenas_mib']:.1f} MiB of arenas, {glibc['mmapped_mib']:.1f} MiB "
            f"mapped in {glibc['mmapped_blocks']} blocks"
        )
    return "".join(line + "\n" for line in lines)


TEXT = "text/plain; charset=utf-8"
JSON = "application/json"
_TRACER = HeapTracer()


def heap_answer(query: Mapping[str, str]) -> tuple[int, str, str]:
    """/debug/heap's answer (status, content type, body) to a query; runs on the
    operational endpoints' thread, so a snapshot of a big heap never holds the loop."""
    trim = query.get("trim", "") in ("1", "true")
    as_json = query.get("format") == "json"
    if not tracemalloc.is_tracing():
        off = f"heap tracing is off: start the process with {ENV}=<frames>, e.g. {ENV}=25"
        if not trim and query.get("allocators", "") not in ("1", "true"):
            return 404, TEXT, off + "\n"
        # Whether the allocator keeps freed memory, and how full pymalloc's arenas
        # are, needs no tracing: the allocators' own accounts say it.
        found = {"rss_mib": resident_mib(), **_untraced(trim=trim)}
        if as_json:
            return 200, JSON, json.dumps(found)
        text = f"{off}\nresident {found['rss_mib']:.1f} MiB\n" + _allocators_text(found)
        return 200, TEXT, text
    raw_top = query.get("top", str(DEFAULT_TOP))
    if not raw_top.isdigit() or not 1 <= int(raw_top) <= MAX_TOP:
        return 400, TEXT, f"top={raw_top!r}: expected 1 to {MAX_TOP}\n"
    found = _TRACER.report(top=int(raw_top), trim=trim)
    if as_json:
        return 200, JSON, json.dumps(found)
    return 200, TEXT, as_text(found)
