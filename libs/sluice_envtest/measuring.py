"""A controller process measured from outside, as a node's kubelet would see it.

A test that claims "memory flat" must measure the controller alone: run in
the test's process, its resident memory is mixed with the test's own (the
load generator, Hypothesis' example database and shrinker). These helpers
read a child's VmRSS and open descriptors from /proc and a gauge from its
metrics, find the exceptions its log carries, and judge whether a series of
samples grows.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Started:
    """What a fresh interpreter had imported when it exited, and how it ended."""

    modules: frozenset[str]
    returncode: int
    stdout: str
    stderr: str

    def among(self, packages: Iterable[str]) -> list[str]:
        """The imported modules that are one of `packages` or inside one of them."""
        wanted = tuple(packages)
        return sorted(
            name
            for name in self.modules
            if any(name == package or name.startswith(package + ".") for package in wanted)
        )


_RECORDING = """
import atexit, json, os, runpy, sys
def _record(path=os.environ.pop("SLUICE_MODULES_OUT")):
    with open(path, "w") as out:
        json.dump(sorted(name for name, module in sys.modules.items() if module), out)
atexit.register(_record)
mode, target, *sys.argv[1:] = sys.argv[1:]
if mode == "-m":
    sys.argv[0] = target
    runpy.run_module(target, run_name="__main__", alter_sys=True)
else:
    exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
"""
"""Runs `-m module args...` or `-c code`, and at exit (also through `sys.exit` or an
error) writes the names in `sys.modules`. Not `-X importtime`: it misses what
`importlib.import_module` imports."""


def run_fresh(*runs: Sequence[str], timeout: float = 300) -> list[Started]:
    """Each `python -m module args...` or `python -c code` in an interpreter of
    its own, all side by side, with the modules each had imported at exit."""
    with tempfile.TemporaryDirectory() as workdir:
        started = []
        for index, run in enumerate(runs):
            if run[0] not in ("-m", "-c") or len(run) < 2:
                raise ValueError(f"{run}: give -m module [args...] or -c code")
            env = {**os.environ, "SLUICE_MODULES_OUT": os.path.join(workdir, f"{index}.json")}
            command = [sys.executable, "-c", _RECORDING, *run]
            started.append(
                subprocess.Popen(
                    command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
                )
            )
        results = []
        for index, process in enumerate(started):
            out, err = process.communicate(timeout=timeout)
            with open(os.path.join(workdir, f"{index}.json")) as recorded:
                modules = frozenset(json.load(recorded))
            results.append(Started(modules, process.returncode, out, err))
    return results


def resident_mib(pid: int) -> float:
    """The process's resident memory (VmRSS), in MiB."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise ValueError(f"/proc/{pid}/status has no VmRSS (a zombie?)")


def cpu_times(pid: int) -> tuple[float, float]:
    """The CPU time (user + system) the process has spent, and its reaped
    children's (git workers, kustomize, helm), in seconds."""
    with open(f"/proc/{pid}/stat") as handle:
        # After the command name (in parentheses, and free to hold spaces),
        # utime, stime, cutime and cstime are the 12th to 15th fields.
        fields = handle.read().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    ticks = os.sysconf("SC_CLK_TCK")
    return (utime + stime) / ticks, (cutime + cstime) / ticks


def cpu_seconds(pid: int) -> float:
    """The CPU time the process itself has spent, in seconds: unlike wall time,
    about the same on an idle machine and on a loaded one."""
    return cpu_times(pid)[0]


def open_fds(pid: int) -> int:
    """How many file descriptors the process holds open."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def metric_total(exposition: str, name: str) -> float:
    """The sum of every series of `name` in a Prometheus text exposition; NaN if absent."""
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", re.MULTILINE)
    values = [float(found.group(1)) for found in pattern.finditer(exposition)]
    return sum(values) if values else float("nan")


def exceptions_in_log(text: str) -> list[str]:
    """Lines of a controller's output that carry an exception.

    Two shapes reach it: a JSON line (the runtime's structlog rendering)
    with an `exception` field, which holds the type and frames but no
    "Traceback" text; and the first line of a plain traceback, from a
    library that logs through the stdlib (aiohttp's "Error handling
    request", asyncio's "Task exception was never retrieved") or from an
    exception that escaped to stderr.
    """
    found = []
    for line in text.splitlines():
        if line.startswith("Traceback (most recent call last)"):
            found.append(line)
            continue
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("exception"):
            found.append(line[:500])
    return found


def slope(points: Sequence[tuple[float, float]]) -> float:
    """The least-squares slope of (x, y) points; NaN with fewer than two distinct x."""
    n = len(points)
    if n < 2:
        return float("nan")
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return float("nan")
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


@dataclass(frozen=True)
class Growth:
    """How a measured series moved after its warm-up."""

    first: float
    """The first sample of the series."""
    at_warmup: float
    """The first sample at or after the warm-up."""
    last: float
    peak: float
    slope: float
    """Least squares over the samples from the warm-up on, per unit of x."""

    @property
    def after_warmup(self) -> float:
        """Last minus the sample at the warm-up: what steady work added."""
        return self.last - self.at_warmup


def growth(samples: Sequence[tuple[float, float]], *, warmup: float) -> Growth:
    """The growth of (x, y) samples (x ascending) once x reaches `warmup`."""
    if not samples:
        raise ValueError("no samples")
    steady = [(x, y) for x, y in samples if x >= warmup]
    if not steady:
        raise ValueError(f"no sample at or after the warm-up ({warmup:g})")
    return Growth(
        first=samples[0][1],
        at_warmup=steady[0][1],
        last=samples[-1][1],
        peak=max(y for _, y in samples),
        slope=slope(steady),
    )
