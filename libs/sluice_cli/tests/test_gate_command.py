"""`sluice gate open|close|list` against the real API server, run in-process."""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sluice_api.gating import (
    CLOSE_REQUESTED_AT_ANNOTATION,
    OPEN_REQUESTED_AT_ANNOTATION,
    Gate,
    GateSpec,
)
from sluice_api.meta import ObjectMeta
from sluice_cli import gate_command
from sluice_cli.gate_command import (
    CLOSE_REQUESTED_BY_ANNOTATION,
    GATES,
    OPEN_REQUESTED_BY_ANNOTATION,
    current_user,
    format_table,
)
from sluice_envtest.controlplane import free_port
from sluice_envtest.pytest_plugin import Cluster

Capture = pytest.CaptureFixture[str]


def sluice(*argv: str) -> int:
    """`sluice gate <argv>` as main() runs it: one parser, `register()`, `args.run(args)`."""
    parser = argparse.ArgumentParser(prog="sluice")
    commands = parser.add_subparsers(dest="command", required=True)
    gate_command.register(commands)
    args = parser.parse_args(["gate", *argv])
    return int(args.run(args))


async def run(*argv: str) -> int:
    # The command runs its own event loop, so it gets a thread of its own.
    return await asyncio.to_thread(sluice, *argv)


async def create_gate(kube: Any, namespace: str, name: str, *, default: str = "closed") -> None:
    gate = Gate(
        metadata=ObjectMeta(name=name, namespace=namespace),
        spec=GateSpec.model_validate({"interval": "30s", "default": default, "window": "1h"}),
    )
    await kube.create(GATES, gate.to_obj())


async def set_status(kube: Any, namespace: str, name: str, status: dict[str, Any]) -> None:
    await kube.merge_patch(
        GATES, name, {"status": status}, namespace=namespace, subresource="status"
    )


def condition(
    kind: str, status: str, message: str, reason: str = "ReconciliationSucceeded"
) -> dict[str, str]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-11-21T10:00:00Z",
    }


def assert_fresh(value: str, before: datetime, after: datetime) -> None:
    parsed = datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert before.replace(microsecond=0) <= parsed <= after


# -- open / close ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "at_key", "by_key"),
    [
        pytest.param("open", OPEN_REQUESTED_AT_ANNOTATION, OPEN_REQUESTED_BY_ANNOTATION, id="open"),
        pytest.param("close", CLOSE_REQUESTED_AT_ANNOTATION, CLOSE_REQUESTED_BY_ANNOTATION, id="close"),
    ],
)  # fmt: skip
async def test_request_writes_time_and_user(
    action: str,
    at_key: str,
    by_key: str,
    cluster: Cluster,
    kube: Any,
    namespace: str,
    capsys: Capture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("USER", "alice")
    await create_gate(kube, namespace, "sre-approval")
    before = datetime.now(UTC)
    code = await run(
        action, "sre-approval", "-n", namespace, "--kubeconfig", str(cluster.kubeconfig)
    )
    after = datetime.now(UTC)

    assert code == 0
    annotations = (await kube.get(GATES, "sre-approval", namespace))["metadata"]["annotations"]
    assert_fresh(annotations[at_key], before, after)
    assert annotations[by_key] == "cli:alice"
    out, err = capsys.readouterr()
    assert out == (
        f"gate {namespace}/sre-approval: {action} requested at {annotations[at_key]} by cli:alice\n"
    )
    assert err == ""


async def test_close_keeps_the_open_request_so_the_latest_wins(
    cluster: Cluster, kube: Any, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("USER", "alice")
    await create_gate(kube, namespace, "sre-approval")
    await kube.merge_patch(
        GATES,
        "sre-approval",
        {"metadata": {"annotations": {OPEN_REQUESTED_AT_ANNOTATION: "2026-11-21T10:00:00Z"}}},
        namespace=namespace,
    )
    monkeypatch.setenv("USER", "bob")
    before = datetime.now(UTC)
    assert (
        await run("close", "sre-approval", "-n", namespace, "--kubeconfig", str(cluster.kubeconfig))
        == 0
    )

    annotations = (await kube.get(GATES, "sre-approval", namespace))["metadata"]["annotations"]
    assert annotations[OPEN_REQUESTED_AT_ANNOTATION] == "2026-11-21T10:00:00Z"
    assert_fresh(annotations[CLOSE_REQUESTED_AT_ANNOTATION], before, datetime.now(UTC))
    assert annotations[CLOSE_REQUESTED_BY_ANNOTATION] == "cli:bob"
    assert OPEN_REQUESTED_BY_ANNOTATION not in annotations


async def test_request_for_missing_gate_fails_in_one_line(
    cluster: Cluster, namespace: str, capsys: Capture
) -> None:
    code = await run("open", "nope", "-n", namespace, "--kubeconfig", str(cluster.kubeconfig))
    out, err = capsys.readouterr()
    assert code == 1
    assert out == ""
    assert err == f"sluice gate open: gate {namespace}/nope not found\n"


async def test_request_in_missing_namespace_fails_in_one_line(
    cluster: Cluster, capsys: Capture
) -> None:
    code = await run(
        "close", "g", "-n", "no-such-namespace", "--kubeconfig", str(cluster.kubeconfig)
    )
    assert code == 1
    assert capsys.readouterr().err == "sluice gate close: gate no-such-namespace/g not found\n"


# -- list -------------------------------------------------------------------------


async def test_list_shows_state_until_default_and_message(
    cluster: Cluster, kube: Any, namespace: str, capsys: Capture
) -> None:
    await create_gate(kube, namespace, "sre-approval")
    await create_gate(kube, namespace, "maintenance", default="opened")
    await create_gate(kube, namespace, "broken")
    await create_gate(kube, namespace, "new")
    await set_status(kube, namespace, "sre-approval", {
        "requestedAt": "2026-11-21T10:00:00Z",
        "resetToDefaultAt": "2026-11-21T11:00:00Z",
        "conditions": [condition("Opened", "True", "Gate scheduled for closing at 2026-11-21T11:00:00Z")],
    })  # fmt: skip
    await set_status(kube, namespace, "maintenance", {
        "conditions": [condition("Opened", "True", "Gate opened by default")],
    })  # fmt: skip
    await set_status(kube, namespace, "broken", {
        "conditions": [
            condition("Opened", "False", "Gate closed by default"),
            condition("Ready", "False", 'annotation open.gate.fluxcd.io/requestedAt: "yesterday" is not an RFC3339 time', "Failed"),
        ],
    })  # fmt: skip

    code = await run("list", "-n", namespace, "--kubeconfig", str(cluster.kubeconfig))
    out, err = capsys.readouterr()
    assert code == 0
    assert err == ""
    assert out == (
        "NAME           STATE     UNTIL                  DEFAULT   MESSAGE\n"
        'broken         closed    -                      closed    annotation open.gate.fluxcd.io/requestedAt: "yesterday" is not an RFC3339 time\n'
        "maintenance    opened    -                      opened    Gate opened by default\n"
        "new            unknown   -                      closed\n"
        "sre-approval   opened    2026-11-21T11:00:00Z   closed    Gate scheduled for closing at 2026-11-21T11:00:00Z\n"
    )


async def test_list_all_namespaces_adds_a_namespace_column(
    cluster: Cluster, kube: Any, namespace: str, capsys: Capture
) -> None:
    await create_gate(kube, namespace, "freeze")
    await set_status(kube, namespace, "freeze", {
        "resetToDefaultAt": "2026-11-22T10:00:00Z",
        "conditions": [condition("Opened", "False", "Gate scheduled for opening at 2026-11-22T10:00:00Z")],
    })  # fmt: skip

    code = await run("list", "-A", "--kubeconfig", str(cluster.kubeconfig))
    out, _ = capsys.readouterr()
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "STATE", "UNTIL", "DEFAULT", "MESSAGE"]
    ours = [line.split(None, 5) for line in lines[1:] if line.startswith(f"{namespace} ")]
    assert ours == [[
        namespace, "freeze", "closed", "2026-11-22T10:00:00Z", "closed",
        "Gate scheduled for opening at 2026-11-22T10:00:00Z",
    ]]  # fmt: skip


async def test_list_of_empty_namespace(cluster: Cluster, namespace: str, capsys: Capture) -> None:
    code = await run("list", "-n", namespace, "--kubeconfig", str(cluster.kubeconfig))
    out, err = capsys.readouterr()
    assert code == 0
    assert out == ""
    assert err == f"No gates found in namespace {namespace}.\n"


def test_list_takes_a_namespace_or_all(capsys: Capture) -> None:
    with pytest.raises(SystemExit) as exited:
        sluice("list", "-n", "a", "-A")
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


# -- errors without a cluster ----------------------------------------------------


def unreachable_kubeconfig(path: Path) -> Path:
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: gone
  cluster:
    server: https://127.0.0.1:{free_port()}
    insecure-skip-tls-verify: true
contexts:
- name: gone
  context: {{cluster: gone, user: nobody}}
current-context: gone
users:
- name: nobody
  user: {{token: nothing}}
"""
    )
    return path


@pytest.mark.parametrize(
    ("argv", "prefix"),
    [
        pytest.param(("open", "g"), "sluice gate open: cannot reach API server https://127.0.0.1:", id="open"),
        pytest.param(("close", "g"), "sluice gate close: cannot reach API server https://127.0.0.1:", id="close"),
        pytest.param(("list",), "sluice gate list: cannot reach API server https://127.0.0.1:", id="list"),
    ],
)  # fmt: skip
def test_unreachable_cluster(
    argv: tuple[str, ...], prefix: str, tmp_path: Path, capsys: Capture
) -> None:
    kubeconfig = unreachable_kubeconfig(tmp_path / "kubeconfig")
    assert sluice(*argv, "--kubeconfig", str(kubeconfig)) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(prefix)
    assert err.count("\n") == 1
    assert "Traceback" not in err


def test_missing_kubeconfig(tmp_path: Path, capsys: Capture) -> None:
    missing = tmp_path / "nope"
    assert sluice("open", "g", "--kubeconfig", str(missing)) == 1
    assert capsys.readouterr().err == f"sluice gate open: kubeconfig {missing} does not exist\n"


@pytest.mark.parametrize(
    "content",
    [
        pytest.param("not: [a, kubeconfig", id="not-yaml"),
        pytest.param("apiVersion: v1\nkind: Config\n", id="no-context"),
    ],
)
def test_unusable_kubeconfig(content: str, tmp_path: Path, capsys: Capture) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(content)
    assert sluice("list", "--kubeconfig", str(kubeconfig)) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"sluice gate list: kubeconfig {kubeconfig} is not usable: ")
    assert err.count("\n") == 1


# -- pieces ------------------------------------------------------------------------


def test_current_user_prefers_user_then_login(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("USER", "alice")
    assert current_user() == "alice"
    monkeypatch.delenv("USER")
    monkeypatch.setenv("LOGNAME", "bob")
    assert current_user() == "bob"


def test_format_table_pads_all_but_the_last_column() -> None:
    assert format_table(["A", "LONGER", "C"], [["xyz", "1", ""], ["x", "22", "last words"]]) == (
        "A     LONGER   C\nxyz   1\nx     22       last words\n"
    )


def test_fresh_time_is_rfc3339_utc() -> None:
    value = gate_command.rfc3339_now()
    parsed = datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs(datetime.now(UTC) - parsed) < timedelta(seconds=2)
