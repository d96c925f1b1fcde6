"""Measuring a process from outside: /proc readings, exceptions in its log, growth of a series."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sluice_envtest.measuring import (
    exceptions_in_log,
    growth,
    metric_total,
    open_fds,
    resident_mib,
    slope,
)


def test_resident_memory_and_descriptors_are_read_from_proc(tmp_path: Path) -> None:
    pid = os.getpid()
    fds = open_fds(pid)
    with open(tmp_path / "held", "w"):
        assert open_fds(pid) == fds + 1
    before = resident_mib(pid)
    held = bytearray(64 * 2**20)  # calloc'd: resident only once written
    for page in range(0, len(held), 4096):
        held[page] = 1
    assert resident_mib(pid) - before >= 60
    del held


EXPOSITION = """# HELP python_asyncio_tasks asyncio tasks not yet done.
# TYPE python_asyncio_tasks gauge
python_asyncio_tasks{service_name="notification-controller"} 31.0
python_asyncio_tasks_created_total 7.0
workqueue_depth{name="Receiver"} 2.0
workqueue_depth{name="Alert"} 3.0
"""


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("python_asyncio_tasks", 31.0, id="labelled"),
        pytest.param("python_asyncio_tasks_created_total", 7.0, id="no-labels-not-a-prefix"),
        pytest.param("workqueue_depth", 5.0, id="summed"),
        pytest.param("python_asyncio", math.nan, id="absent"),
    ],
)
def test_metric_total(name: str, expected: float) -> None:
    assert metric_total(EXPOSITION, name) == pytest.approx(expected, nan_ok=True)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param('{"level": "info", "msg": "webhook rejected", "status": 400}', 0, id="info"),
        pytest.param(
            '{"level": "error", "msg": "x", "exception": [{"exc_type": "KeyError"}]}',
            1,
            id="json-exception",
        ),
        pytest.param('{"level": "error", "msg": "x", "exception": []}', 0, id="json-empty"),
        pytest.param(
            "ERROR:aiohttp.server:Error handling request\n"
            "Traceback (most recent call last):\n"
            '  File "x.py", line 1, in <module>\n'
            "ValueError: boom",
            1,
            id="stdlib-traceback",
        ),
        pytest.param('{"msg": "a Traceback (most recent call last) quoted"}', 0, id="quoted"),
        pytest.param("{not json", 0, id="not-json"),
        pytest.param('["exception"]', 0, id="json-list"),
    ],
)
def test_exceptions_in_log(text: str, expected: int) -> None:
    assert len(exceptions_in_log(text)) == expected


def test_exceptions_are_found_in_what_a_controller_really_writes() -> None:
    """Both shapes as the runtime's logging configuration renders them, so a change
    of format cannot hide a controller's traceback from the fuzz test."""
    program = textwrap.dedent(
        """
        import logging
        import structlog
        from sluice_runtime.observing.logging import configure

        configure()
        try:
            {}["missing"]
        except KeyError:
            structlog.get_logger("x").exception("reconcile failed")
            logging.getLogger("aiohttp.server").exception("Error handling request")
        structlog.get_logger("x").warning("webhook rejected", status=400)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60
    )
    found = exceptions_in_log(done.stderr)
    assert len(found) == 2, done.stderr
    assert "reconcile failed" in found[0]
    assert found[1].startswith("Traceback")


@pytest.mark.parametrize(
    ("points", "expected"),
    [
        pytest.param([(0, 5.0), (1, 5.0), (2, 5.0)], 0.0, id="flat"),
        pytest.param([(0, 1.0), (500, 2.0), (1000, 3.0)], 0.002, id="line"),
        pytest.param([(0, 3.0), (1, 1.0), (2, 2.0), (3, 0.0)], -0.8, id="noisy-fall"),
        pytest.param([(0, 1.0)], math.nan, id="one-point"),
        pytest.param([(1, 1.0), (1, 2.0)], math.nan, id="one-x"),
    ],
)
def test_slope(points: list[tuple[float, float]], expected: float) -> None:
    assert slope(points) == pytest.approx(expected, nan_ok=True)


@pytest.mark.parametrize(
    ("warmup", "at_warmup", "after", "slope_"),
    [
        # The warm-up's rise is left out: from 2,000 on the series is flat.
        pytest.param(2000, 80.0, 0.0, 0.0, id="flat-after-warm-up"),
        # Counted from the start, the same series "grows".
        pytest.param(0, 70.0, 10.0, 0.0025, id="no-warm-up"),
        # A warm-up between samples starts at the next sample.
        pytest.param(1500, 80.0, 0.0, 0.0, id="between-samples"),
    ],
)
def test_growth_after_the_warm_up(
    warmup: float, at_warmup: float, after: float, slope_: float
) -> None:
    samples = [(0, 70.0), (1000, 75.0), (2000, 80.0), (3000, 80.0), (4000, 80.0)]
    found = growth(samples, warmup=warmup)
    assert (found.first, found.at_warmup, found.last, found.peak) == (70.0, at_warmup, 80.0, 80.0)
    assert found.after_warmup == after
    assert found.slope == pytest.approx(slope_)


def test_growth_needs_a_sample_after_the_warm_up() -> None:
    with pytest.raises(ValueError, match="warm-up"):
        growth([(0, 1.0), (500, 1.0)], warmup=1000)
