"""`sluice dev`, the README's main command, from start to Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from sluice_cli import controllers
from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.pytest_plugin import Cluster


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


def deliver_through(kubeconfig: str, git: GitHttpServer) -> dict[str, Any]:
    """A GitRepository and a Kustomization, applied with kubectl like a user would."""
    work = git.create_repo("dev-smoke")
    work.commit(
        "c",
        files={
            "cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: hello\n  namespace: default\ndata:\n  from: sluice-dev\n"
        },
    )
    work.push()
    manifests = f"""apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata:
  name: smoke
  namespace: default
spec:
  interval: 1m
  url: {git.url("dev-smoke")}
  ref:
    branch: main
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: smoke
  namespace: default
spec:
  interval: 10m
  path: ./
  prune: true
  sourceRef:
    kind: GitRepository
    name: smoke
"""
    applied = subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, "apply", "-f", "-"],
        input=manifests,
        capture_output=True,
        text=True,
    )
    assert applied.returncode == 0, applied.stderr
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = subprocess.run(
            [
                "kubectl",
                "--kubeconfig",
                kubeconfig,
                "get",
                "configmap",
                "hello",
                "-n",
                "default",
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
        )
        if got.returncode == 0:
            return dict(json.loads(got.stdout))
        time.sleep(0.5)
    status = subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            kubeconfig,
            "get",
            "gitrepositories,kustomizations",
            "-A",
            "-o",
            "yaml",
        ],
        capture_output=True,
        text=True,
    )
    raise AssertionError(f"not delivered:\n{status.stdout[-3000:]}")


def started(out: str) -> list[tuple[str, str]]:
    """pid and /readyz URL of each controller in `sluice dev`'s summary, which
    must be every controller Sluice has, in their order."""
    rows = re.findall(r"^\s+(\S+)\s+pid (\d+)\s+(http://\S+/readyz)", out, re.MULTILINE)
    assert tuple(name for name, _pid, _url in rows) == controllers.NAMES, out
    return [(pid, url) for _name, pid, url in rows]


def assert_stopped(pids: list[str]) -> None:
    for pid in pids:
        assert (
            not Path(f"/proc/{pid}").exists()
            or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
        ), pid


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_sluice_dev_runs_everything_and_ctrl_c_stops_it(
    tmp_path: Path, git_http: GitHttpServer
) -> None:
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
        readyz = started(out)
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
        # The processes deliver together: source → artifact URL → kustomize → cluster.
        delivered = deliver_through(kubeconfig.group(1), git_http)
        assert delivered["data"] == {"from": "sluice-dev"}
        # Their events reached the hub, authenticated by the shared token.
        logs = tmp_path / "logs"
        assert "event rejected" not in (logs / "source-controller.log").read_text()
        assert "event refused" not in (logs / "notification-controller.log").read_text()
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
    assert "stopping" in rest
    assert_stopped([pid for pid, _url in readyz])


@pytest.mark.timeout(180)
def test_sluice_dev_with_a_kubeconfig_runs_the_controllers_against_that_cluster(
    tmp_path: Path, cluster: Cluster
) -> None:
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "sluice_cli", "dev",
            "--kubeconfig", str(cluster.kubeconfig),
            "--workdir", str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    readyz: list[tuple[str, str]] = []
    try:
        out = read_until(proc, "Press Ctrl-C", timeout=120)
        assert "embedded control plane" not in out, out
        assert "Sluice is running on your cluster." in out
        assert f"export KUBECONFIG={cluster.kubeconfig.resolve()}" in out
        readyz = started(out)
        for _pid, url in readyz:
            with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310
                assert answer.status == 200
        # Each controller was handed that cluster, not one of its own.
        for pid, _url in readyz:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            given = argv[argv.index(b"--kubeconfig") + 1].decode()
            assert given == str(cluster.kubeconfig.resolve())
            # And the token their events are authenticated with at the hub.
            token_file = argv[argv.index(b"--events-token-file") + 1].decode()
            assert token_file == str(tmp_path / "events-token")
        assert (tmp_path / "events-token").stat().st_mode & 0o777 == 0o600
        assert not (tmp_path / "controlplane").exists()
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
    assert "stopping" in rest
    assert "Traceback" not in rest
    assert_stopped([pid for pid, _url in readyz])
