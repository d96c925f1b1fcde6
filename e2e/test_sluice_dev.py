"""`sluice dev`, the README's main command, from start to Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


def read_until(proc: subprocess.Popen[str], marker: str, timeout: float) -> str:
    assert proc.stdout is not None
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        if marker in line:
            return "".join(seen)
    raise AssertionError(f"{marker!r} not printed; got:\n{''.join(seen)}")


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_sluice_dev_runs_everything_and_ctrl_c_stops_it(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "sluice_cli", "dev", "--workdir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
    )
    try:
        out = read_until(proc, "Press Ctrl-C", timeout=480)
        kubeconfig = re.search(r"export KUBECONFIG=(\S+)", out)
        assert kubeconfig, out
        readyz = re.findall(r"pid (\d+)\s+(http://\S+/readyz)", out)
        assert len(readyz) == 4, out
        for _pid, url in readyz:
            with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310
                assert answer.status == 200
        listed = subprocess.run(
            [
                "kubectl",
                "--kubeconfig",
                kubeconfig.group(1),
                "get",
                "gitrepositories,kustomizations,gates",
                "-A",
            ],
            capture_output=True,
            text=True,
        )
        assert listed.returncode == 0, listed.stderr
        assert "No resources found" in listed.stderr + listed.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
    assert "stopping" in rest
    for pid, _url in readyz:
        assert (
            not Path(f"/proc/{pid}").exists()
            or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
        ), pid
