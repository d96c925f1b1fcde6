"""Landlock confinement of child processes, checked with real programs and sockets."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from sluice_runtime import confining
from sluice_runtime.confining import Confinement, ConfinementError, build_ruleset, confined

pytestmark = pytest.mark.skipif(
    confining.landlock_abi() < confining.MIN_ABI, reason="the kernel has no Landlock ABI 4"
)

SYSTEM = tuple(Path(p) for p in ("/usr", "/bin", "/lib", "/lib64", "/etc"))
"""Enough for bash and coreutils to start; the tests' own files are elsewhere."""


def run(confinement: Confinement, script: str) -> subprocess.CompletedProcess[str]:
    with confined(confinement) as preexec:
        return subprocess.run(
            ["/bin/bash", "-c", script],
            preexec_fn=preexec,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "inside").mkdir()
    (tmp_path / "inside" / "ok").write_text("readable\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("hidden\n")
    return tmp_path


@pytest.mark.parametrize(
    ("path", "readable"),
    [
        pytest.param("inside/ok", True, id="allowed-file"),
        pytest.param("outside/secret", False, id="sibling-directory"),
        pytest.param("inside/../outside/secret", False, id="dot-dot"),
        pytest.param("link", False, id="symlink-out"),
    ],
)
def test_reads_are_limited_to_the_allowed_tree(tree: Path, path: str, readable: bool) -> None:
    (tree / "inside" / "link").symlink_to(tree / "outside" / "secret")
    target = tree / "inside" / path if path == "link" else tree / path

    done = run(Confinement(read=(tree / "inside",), execute=SYSTEM), f"cat {target}")

    assert (done.returncode == 0) is readable, done.stderr
    if not readable:
        assert "Permission denied" in done.stderr
        assert "hidden" not in done.stdout


def test_writes_are_denied_unless_allowed(tree: Path) -> None:
    denied = run(Confinement(read=(tree,), execute=SYSTEM), f"echo x > {tree}/inside/new")
    allowed = run(
        Confinement(execute=SYSTEM, write=(tree / "inside",)), f"echo x > {tree}/inside/new"
    )

    assert denied.returncode != 0 and "Permission denied" in denied.stderr
    assert allowed.returncode == 0, allowed.stderr
    assert (tree / "inside" / "new").read_text() == "x\n"


@pytest.mark.parametrize("network", [False, True], ids=["no-network", "network"])
def test_tcp_connections_follow_the_network_switch(network: bool) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        done = run(
            Confinement(execute=SYSTEM, network=network),
            f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected",
        )

    assert ("connected" in done.stdout) is network, done.stderr


def test_the_parent_is_not_confined(tree: Path) -> None:
    run(Confinement(execute=SYSTEM), "true")

    assert (tree / "outside" / "secret").read_text() == "hidden\n"


def test_an_old_abi_is_refused_where_the_network_must_be_confined() -> None:
    with pytest.raises(ConfinementError, match=r"Landlock ABI is 3; this confinement needs 4"):
        build_ruleset(Confinement(), abi=3)
    with pytest.raises(ConfinementError, match=r"Landlock ABI is 0; this confinement needs 1"):
        build_ruleset(Confinement(network=True), abi=0)


def test_an_old_abi_still_confines_reads(tree: Path) -> None:
    # What a Linux 5.13-6.6 kernel gives (ABI 1-3): file rules, no TCP rules.
    ruleset = build_ruleset(
        Confinement(read=(tree / "inside",), execute=SYSTEM, network=True), abi=3
    )
    try:
        done = subprocess.run(
            [
                "/bin/bash",
                "-c",
                f"cat {tree / 'inside' / 'ok'} && cat {tree / 'outside' / 'secret'}",
            ],
            preexec_fn=ruleset.preexec,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        ruleset.close()

    assert done.stdout == "readable\n", done.stdout
    assert "Permission denied" in done.stderr
