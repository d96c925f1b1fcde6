"""Which of a process's mappings its resident memory is in, from /proc/PID/smaps.

The soak reads this at the same phase of every revision, so a resident size
that grows can be placed: file-backed pages (shared libraries, the
interpreter: grow once, as code is first run), the brk heap (glibc's main
arena), glibc's thread arenas (64 MiB reservations, mapped read-write as they
grow), or other anonymous mappings (pymalloc's 1 MiB arenas, glibc's blocks
mapped on their own, thread stacks), which the kernel merges when adjacent.
"""

from __future__ import annotations

import re
from typing import Any

_HEADER = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \d+\s*(.*)$")
_GLIBC_HEAP = 64 * 1024 * 1024  # HEAP_MAX_SIZE on 64-bit: a thread arena's reservation


def parse_smaps(text: str) -> list[dict[str, Any]]:
    """Every mapping: start, size, permissions, path ('' when anonymous), resident and
    anonymous KiB."""
    found: list[dict[str, Any]] = []
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            start, end = int(header.group(1), 16), int(header.group(2), 16)
            found.append({
                "start": start, "size_kib": (end - start) // 1024, "perms": header.group(3),
                "path": header.group(4).strip(), "rss_kib": 0, "anonymous_kib": 0,
            })  # fmt: skip
        elif found and line.startswith(("Rss:", "Anonymous:")):
            key = "rss_kib" if line.startswith("Rss:") else "anonymous_kib"
            found[-1][key] = int(line.split()[1])
    return found


def classify(mappings: list[dict[str, Any]]) -> dict[str, float]:
    """Resident MiB by kind of mapping: file-backed, the brk heap, glibc's thread
    arenas (a read-write start aligned to 64 MiB, followed by its reserved rest), and
    the other anonymous mappings; with the counts of the last two."""
    kinds = {"file_mib": 0.0, "heap_mib": 0.0, "thread_arenas_mib": 0.0, "other_anon_mib": 0.0}
    arenas = other = 0
    for number, mapping in enumerate(mappings):
        rss = mapping["rss_kib"] / 1024
        path = mapping["path"]
        if path == "[heap]":
            kinds["heap_mib"] += rss
        elif path and not path.startswith("["):
            kinds["file_mib"] += rss
        elif not path and mapping["perms"].startswith("rw"):
            following = mappings[number + 1] if number + 1 < len(mappings) else None
            reserved = (
                following is not None
                and following["perms"].startswith("---")
                and following["start"] == mapping["start"] + mapping["size_kib"] * 1024
                and mapping["size_kib"] + following["size_kib"] == _GLIBC_HEAP // 1024
            )
            if mapping["start"] % _GLIBC_HEAP == 0 and (
                reserved or mapping["size_kib"] * 1024 == _GLIBC_HEAP
            ):
                kinds["thread_arenas_mib"] += rss
                arenas += 1
            else:
                kinds["other_anon_mib"] += rss
                other += 1
        else:  # [stack], [vdso], a reservation's PROT_NONE rest: counted nowhere else
            kinds["other_anon_mib"] += rss
    return {**kinds, "thread_arenas": arenas, "other_anon_mappings": other}


def snapshot(pid: int) -> dict[str, Any]:
    """The process's mappings now: the totals by kind, and each anonymous read-write
    mapping with any resident page (start in hex, size, resident), to diff between two."""
    with open(f"/proc/{pid}/smaps") as handle:
        mappings = parse_smaps(handle.read())
    return {
        **classify(mappings),
        "rss_mib": sum(m["rss_kib"] for m in mappings) / 1024,
        "anonymous_mib": sum(m["anonymous_kib"] for m in mappings) / 1024,
        "anon_mappings": [
            [hex(m["start"]), m["size_kib"], m["rss_kib"]]
            for m in mappings
            if not m["path"] and m["perms"].startswith("rw") and m["rss_kib"]
        ],
    }
