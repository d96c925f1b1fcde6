"""SLUICE_TRACEMALLOC and /debug/heap: off by default, and when on, the growth
between two requests is named by the line that allocated it."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from sluice_runtime.endpoints import Heartbeat, probing
from sluice_runtime.observing import heaptracing
from sluice_runtime.observing.heaptracing import ENV, HeapTracer, frames_from


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param({}, 0, id="unset"),
        pytest.param({ENV: ""}, 0, id="empty"),
        pytest.param({ENV: "0"}, 0, id="zero"),
        pytest.param({ENV: "1"}, 1, id="one-frame"),
        pytest.param({ENV: " 25 "}, 25, id="spaces"),
        pytest.param({ENV: "100"}, 100, id="most"),
    ],
)
def test_frames_from(environ: dict[str, str], expected: int) -> None:
    assert frames_from(environ) == expected


@pytest.mark.parametrize(
    "raw",
    [pytest.param("yes", id="word"), pytest.param("-1", id="negative"),
     pytest.param("101", id="too-many"), pytest.param("2.5", id="fraction")],
)  # fmt: skip
def test_frames_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(ValueError, match=rf"{ENV}='{raw}'.*0 to 100"):
        frames_from({ENV: raw})


@pytest.mark.parametrize(
    ("environ", "tracing"),
    [pytest.param({}, "False", id="off-by-default"), pytest.param({ENV: "5"}, "True", id="on")],
)
def test_a_fresh_process_traces_only_when_asked(environ: dict[str, str], tracing: str) -> None:
    script = (
        "import tracemalloc\n"
        "from sluice_runtime.observing.heaptracing import start_from_env\n"
        "start_from_env()\n"
        "print(tracemalloc.is_tracing(), tracemalloc.get_traceback_limit())\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != ENV}
    found = subprocess.run(
        [sys.executable, "-c", script], env={**env, **environ}, capture_output=True, check=True
    )
    assert found.stdout.decode().split()[0] == tracing


def test_a_bad_value_stops_the_controller_with_its_name() -> None:
    # Any controller's main: the value is read before anything starts.
    found = subprocess.run(
        [sys.executable, "-m", "source_controller", "--kubeconfig", "/nonexistent"],
        env={**__import__("os").environ, ENV: "lots"},
        capture_output=True,
        timeout=60,
    )
    assert found.returncode == 1
    assert f"{ENV}='lots'" in found.stderr.decode()


@pytest.fixture
def tracing() -> Iterator[None]:
    was = tracemalloc.is_tracing()
    if not was:
        tracemalloc.start(5)
    yield
    if not was:
        tracemalloc.stop()


KEPT: list[Any] = []


def grow() -> None:
    KEPT.append([bytearray(1000) for _ in range(2000)])  # about 2 MiB, kept


def test_the_growth_between_two_reports_is_named_by_its_line(tracing: None) -> None:
    tracer = HeapTracer()
    first = tracer.report(top=5)
    assert first["against"].startswith("none")
    grow()
    second = tracer.report(top=5)
    assert second["against"].startswith("the previous snapshot")
    biggest = second["top"][0]
    assert biggest["size_diff_kib"] > 1900
    assert biggest["count_diff"] >= 2000
    assert any("test_heaptracing.py" in f and "bytearray(1000)" in f for f in biggest["traceback"])
    # Nothing grew since: the same line is no longer the top growth, and the
    # source lines the report itself read are not counted as growth.
    third = tracer.report(top=50)
    assert all(entry["size_diff_kib"] < 1900 for entry in third["top"])
    assert not any("linecache.py" in f for e in third["top"] for f in e["traceback"])
    assert third["tracemalloc_mib"] > 0
    KEPT.clear()


def test_trim_reports_the_resident_size_after(tracing: None) -> None:
    found = HeapTracer().report(top=1, trim=True)
    assert found["rss_after_trim_mib"] > 0
    assert found["untraced_mib"] == pytest.approx(found["rss_mib"] - found["traced_mib"])


@pytest.fixture(params=["metrics", "probes-with-metrics"])
async def endpoint(request: pytest.FixtureRequest, unused_tcp_port: int) -> AsyncIterator[str]:
    heartbeat = None if request.param == "metrics" else Heartbeat()
    async with probing(f"127.0.0.1:{unused_tcp_port}", heartbeat=heartbeat, metrics=True):
        yield f"http://127.0.0.1:{unused_tcp_port}/debug/heap"


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as answer:
        return answer.status, await answer.text()


async def test_off_the_endpoint_says_how_to_turn_it_on(endpoint: str) -> None:
    if tracemalloc.is_tracing():
        pytest.skip("this interpreter traces already")
    status, text = await get(endpoint)
    assert status == 404
    assert f"{ENV}=<frames>" in text


async def test_on_the_endpoint_answers_text_and_json(endpoint: str, tracing: None) -> None:
    status, text = await get(endpoint + "?top=3")
    assert status == 200
    assert text.startswith("traced ") and "resident" in text and "#1:" in text
    async with aiohttp.ClientSession() as session, session.get(endpoint + "?format=json") as got:
        found = await got.json()
    assert found["against"].startswith("the previous snapshot")
    assert len(found["top"]) <= heaptracing.DEFAULT_TOP


@pytest.mark.parametrize(
    "top",
    [pytest.param("0", id="zero"), pytest.param("x", id="word"), pytest.param("501", id="big")],
)
async def test_a_bad_top_is_refused(endpoint: str, tracing: None, top: str) -> None:
    status, text = await get(f"{endpoint}?top={top}")
    assert status == 400
    assert f"top='{top}'" in text


async def test_off_a_trim_still_reports_the_resident_size_around_it(endpoint: str) -> None:
    if tracemalloc.is_tracing():
        pytest.skip("this interpreter traces already")
    status, text = await get(endpoint + "?trim=1")
    assert status == 200
    assert f"{ENV}=<frames>" in text and "after malloc_trim(0):" in text


async def test_off_the_allocators_answer_without_tracing(endpoint: str) -> None:
    if tracemalloc.is_tracing():
        pytest.skip("this interpreter traces already")
    status, text = await get(endpoint + "?allocators=1")
    assert status == 200
    assert "pymalloc: " in text and "glibc malloc: " in text and "MiB in use" in text
    query = "?allocators=1&format=json"
    async with aiohttp.ClientSession() as session, session.get(endpoint + query) as answer:
        found = await answer.json()
    assert found["pymalloc"]["arenas"] > 0
    assert found["glibc"]["in_use_mib"] > 0
