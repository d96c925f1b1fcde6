"""What the parser fuzz tests share: their size, and the bounds they hold a parse to.

Every parser a tenant reaches is fuzzed with Hypothesis (the `test_fuzz_*`
files). Each example runs the parser inside `bounded`, which measures two
things the parser must keep within limits whatever the input, neither of
them a clock:

- the bytes the parse allocates at its peak (tracemalloc, Python's
  allocator: what a parse holds in objects; C libraries' own buffers are
  not counted);
- the work it does, counted as Python function calls (a profile hook), so a
  parse that runs on with no budget to stop it (an exponential comparison, a
  quadratic loop) fails at a bounded count instead of hanging the test.
  `WorkExceeded` is a BaseException: the parser's own `except Exception`
  cannot swallow it.

`SLUICE_FUZZ_SCALE` multiplies every test's number of examples: 1 in the
unit run (the whole set in well under a minute), more in `tox -e chaos`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

from hypothesis import HealthCheck, settings

SCALE = max(1, int(os.environ.get("SLUICE_FUZZ_SCALE", "1")))


def examples(ci: int) -> settings:
    """Hypothesis settings for a fuzz test of `ci` examples in the unit run (times SCALE).

    No deadline: the bounds are budgets and sizes, never time.
    """
    return settings(
        max_examples=ci * SCALE,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


class WorkExceeded(BaseException):
    """A parse made more Python calls than its bound allows."""


@dataclass
class Spent:
    """What one bounded call cost."""

    calls: int = 0
    peak_bytes: int = 0


@contextlib.contextmanager
def bounded(*, max_calls: int) -> Iterator[Spent]:
    """Measure the peak allocation and the Python calls of the block; raise
    WorkExceeded inside it once it passes `max_calls` calls."""
    spent = Spent()

    def count(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" or event == "c_call":
            spent.calls += 1
            if spent.calls > max_calls:
                sys.setprofile(None)
                raise WorkExceeded(f"more than {max_calls} calls")

    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    previous = sys.getprofile()
    sys.setprofile(count)
    try:
        yield spent
    finally:
        sys.setprofile(previous)
        _, peak = tracemalloc.get_traced_memory()
        spent.peak_bytes = peak - base
        if not tracing:
            tracemalloc.stop()
