"""The soak's reading of /proc/PID/smaps: which kind of mapping the resident memory is in."""

from __future__ import annotations

import os

import pytest

from e2e.bench.mappings import classify, parse_smaps, snapshot

MIB_KIB = 1024


def smaps(*mappings: tuple[int, int, str, str, int]) -> str:
    """smaps text for (start, size KiB, perms, path, rss KiB) mappings."""
    blocks = []
    for start, size, perms, path, rss in mappings:
        end = start + size * 1024
        blocks.append(
            f"{start:x}-{end:x} {perms} 00000000 00:00 0          {path}\n"
            f"Size:           {size} kB\nRss:            {rss} kB\n"
            f"Anonymous:      {0 if path and not path.startswith('[') else rss} kB\n"
        )
    return "".join(blocks)


ARENA = 0x7F0004000000  # aligned to 64 MiB, as glibc's thread arenas are


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(smaps((0x1000, 4096, "r-xp", "/usr/bin/python3.11", 3000)),
                     {"file_mib": 3000 / 1024}, id="file-backed"),
        pytest.param(smaps((0x55000000, 8192, "rw-p", "[heap]", 8192)),
                     {"heap_mib": 8.0}, id="brk-heap"),
        pytest.param(smaps((ARENA, 1024, "rw-p", "", 512), (ARENA + MIB_KIB * 1024, 64 * 1024 - 1024, "---p", "", 0)),
                     {"thread_arenas_mib": 0.5, "thread_arenas": 1}, id="thread-arena-with-its-reservation"),
        pytest.param(smaps((ARENA + 4096, 1024, "rw-p", "", 1024)),
                     {"other_anon_mib": 1.0, "other_anon_mappings": 1}, id="unaligned-anonymous"),
        pytest.param(smaps((ARENA, 1024, "rw-p", "", 1024), (ARENA + MIB_KIB * 1024, 4, "---p", "", 0)),
                     {"other_anon_mib": 1.0, "other_anon_mappings": 1}, id="aligned-but-no-arena-reservation"),
        pytest.param(smaps((0x7FFF0000, 132, "rw-p", "[stack]", 40)),
                     {"other_anon_mib": 40 / 1024}, id="stack"),
    ],
)  # fmt: skip
def test_classify(text: str, expected: dict[str, float]) -> None:
    zeros = dict.fromkeys(
        ("file_mib", "heap_mib", "thread_arenas_mib", "other_anon_mib",
         "thread_arenas", "other_anon_mappings"), 0,
    )  # fmt: skip
    assert classify(parse_smaps(text)) == pytest.approx({**zeros, **expected})


def test_this_process_adds_up() -> None:
    found = snapshot(os.getpid())
    parts = sum(found[k] for k in ("file_mib", "heap_mib", "thread_arenas_mib", "other_anon_mib"))
    assert parts == pytest.approx(found["rss_mib"])
    assert found["file_mib"] > 0 and found["anonymous_mib"] > 0
