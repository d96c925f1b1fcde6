"""A controller's worker threads share two malloc arenas instead of one each.

Measured in a fresh interpreter, since glibc's settings are per process:
eight threads alive at once, each allocating outside Python's small-object
allocator, and glibc's own count of its arenas (`malloc_stats`) afterwards.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

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
