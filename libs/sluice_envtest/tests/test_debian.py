"""Debian packages land in the private cache, runnable, once per machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sluice_envtest import debian, debian_apt
from sluice_envtest.debian import BuildError, fetch_packages, first_alternatives, missing_libraries
from sluice_envtest.sshserver import SSHD_PACKAGES


@pytest.mark.parametrize(
    ("depends", "names"),
    [
        pytest.param("libc6 (>= 2.36), zlib1g", ["libc6", "zlib1g"], id="versions"),
        pytest.param(
            "debconf (>= 0.5) | debconf-2.0, libwrap0", ["debconf", "libwrap0"], id="alternatives"
        ),
        pytest.param("perl:any, libfoo1:amd64 (= 1.0)", ["perl", "libfoo1"], id="arch"),
        pytest.param("", [], id="empty"),
    ],
)
def test_first_alternatives(depends: str, names: list[str]) -> None:
    assert first_alternatives(depends) == names


def test_sshd_runs_with_the_libraries_the_system_lacks() -> None:
    unpacked = fetch_packages(SSHD_PACKAGES, binaries=["usr/sbin/sshd"])
    sshd = unpacked.path("usr/sbin/sshd")
    assert unpacked.versions["openssh-server"].startswith("1:9.2p1")
    assert "%3a" in str(unpacked.root)  # the epoch's colon, escaped for LD_LIBRARY_PATH
    assert missing_libraries(sshd, library_dir=unpacked.library_dir) == []
    version = subprocess.run(
        [str(sshd), "-V"], env=unpacked.environ(), capture_output=True, text=True
    )
    assert version.returncode == 0, version.stderr
    assert "OpenSSH_9.2" in version.stderr
    if unpacked.library_dir is not None:
        # Bookworm's sshd needs libwrap.so.0, which only openssh-server pulls in.
        lacking = missing_libraries(sshd)
        assert lacking
        assert sorted(p.name for p in unpacked.library_dir.iterdir()) == lacking


def test_a_second_fetch_needs_no_apt(monkeypatch: pytest.MonkeyPatch) -> None:
    first = fetch_packages(SSHD_PACKAGES, binaries=["usr/sbin/sshd"])

    class NoApt:
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise AssertionError("apt used for a cached fetch")

    monkeypatch.setattr(debian, "PrivateApt", NoApt)
    assert fetch_packages(list(reversed(SSHD_PACKAGES)), binaries=["usr/sbin/sshd"]) == first


def test_an_unknown_package_fails_with_apts_words() -> None:
    with pytest.raises(BuildError, match=r"No packages found|no such package") as failure:
        fetch_packages(["sluice-no-such-package"])
    assert "sluice-no-such-package" in str(failure.value)


def test_an_unreachable_mirror_fails_with_apts_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLUICE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(debian_apt, "DEBIAN_MIRROR", "http://127.0.0.1:9/debian")
    monkeypatch.setattr(debian, "_LEAN", (*debian._LEAN, "-o", "Acquire::Retries=0"))
    with pytest.raises(BuildError) as failure:
        fetch_packages(["libnss-wrapper"], log=lambda _: None)
    message = str(failure.value)
    assert message.startswith("apt-get update fetched no package lists")
    assert "127.0.0.1" in message  # apt's own account of what failed


def test_concurrent_fetches_download_once(tmp_path: Path) -> None:
    # Reuse this machine's package lists so that only the lock is under test.
    fetch_packages(SSHD_PACKAGES, binaries=["usr/sbin/sshd"])
    shared = debian.cache_root() / "debian"
    shutil.copytree(shared / "apt", tmp_path / "debian" / "apt")
    env = dict(os.environ, SLUICE_CACHE_DIR=str(tmp_path))
    code = (
        "from sluice_envtest.debian import fetch_packages\n"
        "print(fetch_packages(['libnss-wrapper']).root)\n"
    )
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = [run.communicate(timeout=120) for run in runs]
    assert all(run.returncode == 0 for run in runs), results
    roots = {out.strip() for out, _ in results}
    assert len(roots) == 1
    downloads = sum(err.count("fetching Debian packages") for _, err in results)
    assert downloads == 1
    assert (Path(roots.pop()) / "usr").is_dir()
