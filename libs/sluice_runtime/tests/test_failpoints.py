"""`SLUICE_FAILPOINTS`: parsing, the kill at the Nth hit, and a typo stopping the process."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sluice_runtime import failpoints
from sluice_runtime.failpoints import FailpointSpecError, Trigger, parse

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", {}, id="unset"),
        pytest.param(" ; ,", {}, id="only-separators"),
        pytest.param("ssa.apply.mid-apply=kill", {"ssa.apply.mid-apply": 1}, id="kill"),
        pytest.param("ssa.apply.mid-apply=kill@3", {"ssa.apply.mid-apply": 3}, id="kill-at-3"),
        pytest.param(
            "ssa.prune.mid-prune=kill@2;storage.artifact.mid-write=kill",
            {"ssa.prune.mid-prune": 2, "storage.artifact.mid-write": 1},
            id="semicolon",
        ),
        pytest.param(
            " ssa.prune.mid-prune = kill@2 , source.status.before-patch=kill ",
            {"ssa.prune.mid-prune": 2, "source.status.before-patch": 1},
            id="comma-and-spaces",
        ),
    ],
)
def test_parse(text: str, expected: dict[str, int]) -> None:
    assert {name: trigger.at for name, trigger in parse(text).items()} == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "ssa.apply.after-dryrun=kill", "unknown failpoint 'ssa.apply.after-dryrun'", id="typo"
        ),
        pytest.param("ssa.apply.mid-apply", "is not name=action", id="no-action"),
        pytest.param("=kill", "is not name=action", id="no-name"),
        pytest.param("ssa.apply.mid-apply=", "is not name=action", id="empty-action"),
        pytest.param("ssa.apply.mid-apply=panic", "unknown action 'panic'", id="other-action"),
        pytest.param("ssa.apply.mid-apply=kill@0", "needs a whole N >= 1, not '0'", id="kill-at-0"),
        pytest.param(
            "ssa.apply.mid-apply=kill@", "needs a whole N >= 1, not ''", id="kill-at-nothing"
        ),
        pytest.param(
            "ssa.apply.mid-apply=kill@x", "needs a whole N >= 1, not 'x'", id="kill-at-word"
        ),
        pytest.param(
            "ssa.apply.mid-apply=kill;ssa.apply.mid-apply=kill@2", "armed twice", id="twice"
        ),
    ],
)
def test_parse_refuses(text: str, message: str) -> None:
    with pytest.raises(FailpointSpecError, match=re.escape(message)):
        parse(text)


def test_an_unarmed_point_does_nothing_and_arming_replaces() -> None:
    failpoints.arm_from_env({})
    failpoints.hit("ssa.apply.mid-apply")
    assert not failpoints.armed("ssa.apply.mid-apply")
    # A trigger not yet at its count only counts (the kill itself is tested in a child).
    assert failpoints.arm_from_env({failpoints.ENV: "ssa.apply.mid-apply=kill@5"}) == [
        "ssa.apply.mid-apply"
    ]
    try:
        failpoints.hit("ssa.apply.mid-apply")
        assert failpoints._armed["ssa.apply.mid-apply"] == Trigger(at=5, hits=1)
    finally:
        failpoints.arm_from_env({})
    assert not failpoints.armed("ssa.apply.mid-apply")


def test_the_nth_hit_sigkills_the_process_after_naming_the_point() -> None:
    code = (
        "from sluice_runtime import failpoints\n"
        "failpoints.arm_from_env()\n"
        "for i in range(3):\n"
        "    print('hit', i + 1, flush=True)\n"
        "    failpoints.hit('ssa.prune.mid-prune')\n"
        "print('survived', flush=True)\n"
    )
    done = _python(code, "ssa.prune.mid-prune=kill@2")
    assert done.returncode == -signal.SIGKILL
    assert done.stdout.split("\n") == ["hit 1", "hit 2", ""]
    assert done.stderr == "sluice failpoint ssa.prune.mid-prune: kill (hit 2)\n"


def test_a_controller_with_an_unknown_point_stops_at_start_naming_it() -> None:
    code = (
        "from sluice_runtime.app import main\n"
        "main(service='probe', description='', kinds=[], setup=None, argv=[])\n"
    )
    done = _python(code, "ssa.apply.mid-aply=kill")
    assert done.returncode == 1
    assert "probe: SLUICE_FAILPOINTS: unknown failpoint 'ssa.apply.mid-aply'" in done.stderr


def test_every_point_is_hit_in_the_code_and_every_hit_is_a_point() -> None:
    """A point renamed on one side only would never fire, and its test never kill."""
    named: set[str] = set()
    for path in [*ROOT.joinpath("libs").rglob("*.py"), *ROOT.joinpath("services").rglob("*.py")]:
        if "tests" in path.parts or path.name == "failpoints.py":
            continue
        text = path.read_text()
        named |= set(re.findall(r"failpoints\.(?:hit|armed)\(\"([^\"]+)\"\)", text))
    assert named == set(failpoints.POINTS)


def _python(code: str, armed: str) -> subprocess.CompletedProcess[str]:
    """`code` run by a fresh interpreter with SLUICE_FAILPOINTS set to `armed`."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env={failpoints.ENV: armed, "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
