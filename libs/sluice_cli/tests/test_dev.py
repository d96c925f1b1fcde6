"""`sluice dev --kubeconfig` with a cluster it cannot use: one line, exit 1, no traceback.

The happy path, against a real cluster, is in e2e/test_sluice_dev.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sluice_envtest.controlplane import free_port

UNREACHABLE = """apiVersion: v1
kind: Config
clusters:
- name: gone
  cluster: {{server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true}}
users:
- name: someone
  user: {{token: not-a-secret}}
contexts:
- name: gone
  context: {{cluster: gone, user: someone}}
current-context: gone
"""


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        pytest.param(None, "does not exist", id="missing-file"),
        pytest.param("this: [is not: a kubeconfig\n", "not usable", id="garbage"),
        pytest.param(UNREACHABLE, "cannot reach API server", id="unreachable-server"),
    ],
)
@pytest.mark.timeout(120)
def test_an_unusable_kubeconfig_is_one_clear_line(
    tmp_path: Path, content: str | None, phrase: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    if content is not None:
        kubeconfig.write_text(content.format(port=free_port()))
    done = subprocess.run(
        [
            sys.executable, "-m", "sluice_cli", "dev",
            "--kubeconfig", str(kubeconfig),
            "--workdir", str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("sluice dev: "), lines[0]
    assert phrase in lines[0], lines[0]
    assert str(kubeconfig) in lines[0] or "127.0.0.1" in lines[0], lines[0]
    # Nothing was started, so nothing can be left behind.
    assert "ready (pid" not in done.stdout
    assert not (tmp_path / "work" / "logs").exists()
