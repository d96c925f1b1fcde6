"""CLI start-up: the CPU time and peak memory of one `sluice` command, as a shell runs it.

Each command runs as its own `python -m sluice_cli` process, several times,
against a local control plane with every CRD installed and nothing in it, so
what is measured is what the command costs before and around its one
request: imports, parsing, the connection. CPU is the child's user + system
time and memory its peak resident set, both as GNU time reports them. Issue 40
started from 2.4 s of CPU and 77 MB for every command.

Usage: python -m e2e.bench cli-startup [--runs N] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from e2e.bench.common import table, write
from sluice_envtest.controlplane import ControlPlane

COMMANDS = ("version --client", "--help", "get ks -A", "get all -A")

TIME = shutil.which("time") or "/usr/bin/time"
"""GNU time (Debian's `time` package), not the shell's keyword."""

STARTING_POINT = {"cpu_s": 2.4, "peak_rss_mb": 77.0}
"""Every command's cost when issue 40 was filed."""


def measure(argv: list[str], kubeconfig: Path, workdir: Path) -> tuple[float, float]:
    """One run's CPU seconds and peak RSS in MB; a failing command is an error.

    GNU time runs the command: a child forked from this process would count
    this process's resident memory (every import of the benchmark) as its
    own peak, since Linux carries the peak across `exec`.
    """
    report = workdir / "time.txt"
    command = [TIME, "-f", "%U %S %M", "-o", str(report), sys.executable, "-m", "sluice_cli"]
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    done = subprocess.run(
        [*command, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"sluice {' '.join(argv)} exited {done.returncode}: {done.stderr!r}")
    user, system, peak_kb = report.read_text().split()[-3:]
    return float(user) + float(system), int(peak_kb) / 1024


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m e2e.bench cli-startup")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, float]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="sluice-cli-startup-") as tmp,
        ControlPlane(workdir=Path(tmp) / "cp") as plane,
    ):
        work = Path(tmp)
        measure(["crds", "install"], plane.kubeconfig, work)
        for command in COMMANDS:
            runs = [measure(command.split(), plane.kubeconfig, work) for _ in range(args.runs)]
            results[command] = {
                "cpu_s": statistics.median(cpu for cpu, _ in runs),
                "peak_rss_mb": max(rss for _, rss in runs),
            }
    rows = [
        [f"sluice {command}", f"{r['cpu_s']:.2f}", f"{r['peak_rss_mb']:.0f}"]
        for command, r in results.items()
    ]
    start = STARTING_POINT
    rows.append(["(issue 40's start)", f"{start['cpu_s']:.1f}", f"{start['peak_rss_mb']:.0f}"])
    print(table(["command", "CPU s (median)", "peak RSS MB"], rows))
    write(args.out, "cli-startup", {"runs": args.runs, "commands": results, "start": start})
