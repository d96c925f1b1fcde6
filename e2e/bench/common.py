"""What every benchmark shares: the machine record, medians, the table, the JSON, and
work run beside a series."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Coroutine, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any


def machine() -> dict[str, Any]:
    with open("/proc/meminfo") as handle:
        total_kb = int(handle.readline().split()[1])
    versions = {}
    for dist in ("sluice", "pygit2", "aiohttp", "kubernetes-asyncio", "oras"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    git = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(total_kb / 1024 / 1024, 1),
        "cpu": platform.processor() or platform.machine(),
        "python": sys.version.split()[0],
        "git": git,
        "kube_apiserver": "v1.20.2 (local envtest)",
        "versions": versions,
    }


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))])


def p99(values: Sequence[float]) -> float:
    return percentile(values, 0.99)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def write(path: str | None, name: str, results: dict[str, Any]) -> None:
    document = {"benchmark": name, "machine": machine(), **results}
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(document, indent=2) + "\n")
        print(f"\nwrote {path}")


def in_background(
    stack: contextlib.AsyncExitStack, work: Coroutine[Any, Any, None], *, name: str
) -> asyncio.Task[None]:
    """Run `work` beside a series until `stack` closes, and end it then: before what was
    entered earlier (the API client, the control plane) goes.

    A task merely created outlived the reaction bench's webhook series when its load
    was not all Ready yet; its next API call, once the control plane had stopped,
    raised ApiUnavailable, and asyncio printed that traceback at exit ("Task exception
    was never retrieved"). A failure of `work` before the end is reported, not raised:
    the series' figures stand without it.
    """
    task = asyncio.get_running_loop().create_task(work, name=name)

    async def end() -> None:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # it was this coroutine that was cancelled, not the task
        except Exception as error:
            print(f"{name} failed: {error!r}", flush=True)

    stack.push_async_callback(end)
    return task
