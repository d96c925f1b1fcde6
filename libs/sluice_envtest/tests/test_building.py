"""`KUBEBUILDER_ASSETS`, the envtest convention, chooses the control plane's binaries."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sluice_envtest.building import Binaries, ensure_binaries
from sluice_envtest.controlplane import ControlPlane
from sluice_envtest.debian import BuildError


def write_wrapper(path: Path, real: Path, log: Path) -> None:
    """An executable that notes it ran, then becomes `real` (same pid, same arguments)."""
    path.write_text(f'#!/bin/sh\necho "$0" >> "{log}"\nexec "{real}" "$@"\n')
    path.chmod(0o755)


def test_assets_directory_is_used_as_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("kube-apiserver", "etcd"):
        write_wrapper(tmp_path / name, Path("/bin/true"), tmp_path / "ran")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    assert ensure_binaries() == Binaries(tmp_path / "kube-apiserver", tmp_path / "etcd")


@pytest.mark.parametrize(
    ("present", "missing"),
    [
        pytest.param((), "kube-apiserver", id="empty"),
        pytest.param(("kube-apiserver",), "etcd", id="no-etcd"),
    ],
)
def test_assets_without_a_binary_is_an_error_not_a_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, present: tuple[str, ...], missing: str
) -> None:
    for name in present:
        write_wrapper(tmp_path / name, Path("/bin/true"), tmp_path / "ran")
    # Present but not executable counts as missing.
    (tmp_path / missing).write_text("not a program")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    with pytest.raises(
        BuildError, match=f"KUBEBUILDER_ASSETS={tmp_path} has no executable {missing}"
    ):
        ensure_binaries()


@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_the_control_plane_runs_the_binaries_in_kubebuilder_assets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The session's own binaries (the cached build, or the caller's assets).
    real = ensure_binaries()
    assets = tmp_path / "assets"
    assets.mkdir()
    ran = tmp_path / "ran"
    write_wrapper(assets / "kube-apiserver", real.kube_apiserver, ran)
    write_wrapper(assets / "etcd", real.etcd, ran)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    with ControlPlane(workdir=tmp_path / "plane") as plane:
        served = subprocess.run(
            ["kubectl", "--kubeconfig", str(plane.kubeconfig), "get", "--raw", "/readyz"],
            capture_output=True,
            text=True,
        )
        assert (served.returncode, served.stdout) == (0, "ok"), served.stderr
    assert sorted(ran.read_text().split()) == [str(assets / "etcd"), str(assets / "kube-apiserver")]
