"""The allocators' own accounts: pymalloc's arenas and glibc's heap, read in-process."""

from __future__ import annotations

import sys
import tracemalloc

import pytest

from sluice_runtime.observing.allocators import glibc_heap, parse_pymalloc_stats, pymalloc_stats

STATS = """Small block threshold = 512, in 32 size classes.

# arenas allocated total           =                    9
# arenas reclaimed                 =                    2
# arenas highwater mark            =                    8
# arenas allocated current         =                    7

# bytes in allocated blocks        =            3,145,728
# bytes in available blocks        =              524,288
# bytes lost to pool headers       =               11,280
Total                              =            7,340,032

arena map counts
Total                              =              655,360
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(STATS, {"arenas": 7, "arenas_highwater": 8, "arenas_reclaimed": 2,
                             "allocated_mib": 3.0, "available_mib": 0.5, "arenas_mib": 7.0},
                     id="the-first-total-is-the-arenas"),
        pytest.param("", {}, id="nothing-printed"),
        pytest.param("# arenas allocated current = 1,024\n", {"arenas": 1024}, id="thousands"),
    ],
)  # fmt: skip
def test_parse_pymalloc_stats(text: str, expected: dict[str, float]) -> None:
    assert parse_pymalloc_stats(text) == expected


KEPT: list[object] = []


def test_pymalloc_sees_small_objects_kept_alive() -> None:
    if tracemalloc.is_tracing():
        pytest.skip("tracemalloc replaces pymalloc's entry points: no statistics then")
    before = pymalloc_stats()
    assert before is not None
    KEPT.append([object() for _ in range(200_000)])  # 16 bytes each, about 3 MiB kept
    after = pymalloc_stats()
    KEPT.clear()
    assert after is not None
    assert after["allocated_mib"] - before["allocated_mib"] > 2.5


def test_glibc_sees_a_c_allocation_python_does_not_trace() -> None:
    if not sys.platform.startswith("linux") or glibc_heap() is None:
        pytest.skip("glibc only")
    import ctypes

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    before = glibc_heap()
    blocks = [libc.malloc(64 * 1024) for _ in range(32)]  # 2 MiB below the mmap threshold
    during = glibc_heap()
    for block in blocks:
        libc.free(block)
    assert before is not None and during is not None
    assert during["in_use_mib"] - before["in_use_mib"] >= 2.0
    assert during["per_arena"] and during["per_arena"][0]["arena"] == 0
