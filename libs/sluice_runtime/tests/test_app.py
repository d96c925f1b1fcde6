"""A controller process: probes, shutdown, and startup errors a person can act on."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from sluice_envtest.controlplane import free_port
from sluice_envtest.pytest_plugin import Cluster


def start(kubeconfig: Path | str, *extra: str) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "gating_controller",
            "--kubeconfig", str(kubeconfig),
            "--health-addr", f"127.0.0.1:{port}",
            "--metrics-addr", f"127.0.0.1:{port}",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    return proc, port


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_process_serves_probes_and_metrics_and_stops_cleanly(cluster: Cluster) -> None:
    proc, port = start(cluster.kubeconfig)
    try:
        deadline = time.monotonic() + 30
        status = 0
        while time.monotonic() < deadline and status != 200:
            try:
                status, _ = get(f"http://127.0.0.1:{port}/readyz")
            except OSError:
                status = 0
            time.sleep(0.2)
        assert status == 200, proc.stderr.read() if proc.poll() is not None else "not ready"
        assert get(f"http://127.0.0.1:{port}/healthz") == (200, "ok")
        code, metrics = get(f"http://127.0.0.1:{port}/metrics")
        assert code == 200 and "process_resident_memory_bytes" in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr


def run_to_exit(kubeconfig: Path | str, *extra: str) -> subprocess.CompletedProcess[str]:
    proc, _ = start(kubeconfig, *extra)
    stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def assert_one_clear_line(done: subprocess.CompletedProcess[str], *phrases: str) -> None:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("gating-controller: ")
    for phrase in phrases:
        assert phrase in lines[0], lines[0]


def test_a_garbage_kubeconfig_is_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("this: [is not: a kubeconfig\n")
    assert_one_clear_line(run_to_exit(bad), str(bad), "not usable")


def test_a_missing_kubeconfig_file_is_one_clear_line(tmp_path: Path) -> None:
    assert_one_clear_line(run_to_exit(tmp_path / "nope"), "does not exist")


def test_an_unreachable_api_server_is_one_clear_line(cluster: Cluster, tmp_path: Path) -> None:
    text = cluster.kubeconfig.read_text()
    server = next(
        line.split("server:")[1].strip() for line in text.splitlines() if "server:" in line
    )
    dead = tmp_path / "kubeconfig"
    dead.write_text(text.replace(server, f"https://127.0.0.1:{free_port()}"))
    assert_one_clear_line(run_to_exit(dead), "cannot reach API server")


@pytest.mark.timeout(120)
def test_missing_crds_are_one_clear_line(second_cluster: Cluster) -> None:
    assert_one_clear_line(
        run_to_exit(second_cluster.kubeconfig),
        "CRD not installed",
        "gates.gating.toolkit.fluxcd.io",
    )
