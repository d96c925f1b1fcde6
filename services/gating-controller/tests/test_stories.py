"""The gating issue's user stories, exactly as written, against the real control plane."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import time
from datetime import UTC, datetime, timedelta

from sluice_envtest.harness import condition, make_secret
from sluice_runtime.kube.errors import NotFound

from .conftest import CONFIG_MAP, GATE, GITREPO, KUSTOMIZATION, Stage, config_map, opened


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def absent(s: Stage, name: str) -> bool:
    try:
        await s.kube.get(CONFIG_MAP, name, s.namespace)
    except NotFound:
        return True
    return False


def sluice_gate(s: Stage, *argv: str) -> int:
    """Run `sluice gate ...` as the command-line tool would."""
    from sluice_cli import gate_command

    parser = argparse.ArgumentParser(prog="sluice")
    gate_command.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["gate", *argv, "-n", s.namespace, "--kubeconfig", s.kubeconfig])
    result: int = args.run(args)
    return result


async def test_story_1_sre_approval(stage: Stage) -> None:
    s = stage
    ns = s.namespace
    await s.gate("sre-approval", default="closed", window="1h")
    await s.gate("qa-approval", default="closed", window="1h")
    repo = s.repo("my-app")
    repo.commit("v1", files={"cm.yaml": config_map("my-app", ns, v="1")})
    repo.push()
    await s.git_repository("my-app")
    await s.kustomization(
        "my-app", "my-app", gates=[{"name": "sre-approval"}, {"name": "qa-approval"}]
    )

    held = await s.observe.wait(
        KUSTOMIZATION, "my-app", lambda o: (condition(o, "Approved") or {}).get("status") == "False"
    )
    approved = condition(held, "Approved")
    assert approved is not None and approved["reason"] == "GateClosed"
    assert approved["message"] == (
        f"Reconciliation is waiting approval, gate '{ns}/sre-approval' is closed."
    )
    assert condition(held, "Ready")["reason"] == "GateClosed"  # type: ignore[index]
    await asyncio.sleep(0.5)
    assert await absent(s, "my-app"), "nothing is applied while closed"

    # An SRE approves: the annotation with the current time.
    opened_at = s.clock()
    await s.annotate("sre-approval", {"open.gate.fluxcd.io/requestedAt": stamp(opened_at)})
    gate = await s.observe.wait(GATE, "sre-approval", opened, what="opened")
    until = stamp(opened_at.replace(microsecond=0) + timedelta(hours=1))
    assert gate["status"]["requestedAt"] == stamp(opened_at)
    assert gate["status"]["resetToDefaultAt"] == until
    assert condition(gate, "Opened")["message"] == f"Gate scheduled for closing at {until}"  # type: ignore[index]
    waiting = await s.observe.wait(
        KUSTOMIZATION,
        "my-app",
        lambda o: "qa-approval" in (condition(o, "Approved") or {}).get("message", ""),
        what="waiting on the second gate",
    )
    assert await absent(s, "my-app")
    assert condition(waiting, "Approved")["status"] == "False"  # type: ignore[index]

    # QA approves with the command-line tool; every listed gate is open: apply at once.
    started = time.monotonic()
    assert await asyncio.to_thread(sluice_gate, s, "open", "qa-approval") == 0
    await s.observe.wait_ready(KUSTOMIZATION, "my-app", timeout=10)
    assert time.monotonic() - started < 10
    assert (await s.kube.get(CONFIG_MAP, "my-app", ns))["data"] == {"v": "1"}
    assert condition(await s.observe.get(KUSTOMIZATION, "my-app"), "Approved")["status"] == "True"  # type: ignore[index]
    qa = await s.observe.get(GATE, "qa-approval")
    entry = qa["status"]["history"][-1]
    assert entry["action"] == "open" and entry["source"] == "cli" and entry["user"]

    # An early close: a close request newer than the open one.
    await s.annotate(
        "sre-approval",
        {"close.gate.fluxcd.io/requestedAt": stamp(s.clock() + timedelta(seconds=1))},
    )
    s.clock.advance(timedelta(seconds=2))
    await s.observe.poke(GATE, "sre-approval", "close-early")
    closed = await s.observe.get(GATE, "sre-approval")
    assert not opened(closed)
    assert condition(closed, "Opened")["message"] == "Gate close requested"  # type: ignore[index]

    # A new commit is not applied while a gate is closed.
    repo.commit("v2", files={"cm.yaml": config_map("my-app", ns, v="2")})
    repo.push()
    await s.observe.poke(GITREPO, "my-app", "v2")
    await s.observe.wait(
        KUSTOMIZATION, "my-app", lambda o: (condition(o, "Approved") or {}).get("status") == "False"
    )
    await asyncio.sleep(0.5)
    assert (await s.kube.get(CONFIG_MAP, "my-app", ns))["data"] == {"v": "1"}


async def test_story_1_the_window_closes_the_gate_by_itself(stage: Stage) -> None:
    s = stage
    await s.gate("short", default="closed", window="2s")
    await s.annotate("short", {"open.gate.fluxcd.io/requestedAt": stamp(s.clock())})
    await s.observe.wait(GATE, "short", opened, what="opened")
    # No poke: the controller requeued itself for the exact moment.
    gate = await s.observe.wait(
        GATE, "short", lambda o: not opened(o), timeout=10, what="closed by itself"
    )
    assert condition(gate, "Opened")["message"] == "Gate closed by default"  # type: ignore[index]


async def test_story_1_an_hour_later_the_gate_is_closed(stage: Stage) -> None:
    s = stage
    await s.gate("hourly", default="closed", window="1h")
    await s.annotate("hourly", {"open.gate.fluxcd.io/requestedAt": stamp(s.clock())})
    await s.observe.wait(GATE, "hourly", opened, what="opened")
    s.clock.advance(timedelta(hours=1, seconds=1))
    await s.observe.poke(GATE, "hourly", "an-hour-later")
    gate = await s.observe.get(GATE, "hourly")
    assert not opened(gate)
    assert condition(gate, "Opened")["message"] == "Gate closed by default"  # type: ignore[index]


async def test_story_2_maintenance_window(stage: Stage) -> None:
    s = stage
    gate = await s.gate("maintenance", default="opened", window="24h")
    assert condition(gate, "Opened")["message"] == "Gate opened by default"  # type: ignore[index]
    closed_at = s.clock()
    await s.annotate("maintenance", {"close.gate.fluxcd.io/requestedAt": stamp(closed_at)})
    gate = await s.observe.wait(GATE, "maintenance", lambda o: not opened(o), what="closed")
    until = stamp(closed_at.replace(microsecond=0) + timedelta(hours=24))
    assert condition(gate, "Opened")["message"] == f"Gate scheduled for opening at {until}"  # type: ignore[index]
    s.clock.advance(timedelta(hours=24, seconds=1))
    await s.observe.poke(GATE, "maintenance", "next-day")
    gate = await s.observe.get(GATE, "maintenance")
    assert opened(gate)
    assert condition(gate, "Opened")["message"] == "Gate opened by default"  # type: ignore[index]


async def test_story_3_change_freeze_keeps_the_last_artifact_and_corrects_drift(
    stage: Stage,
) -> None:
    s = stage
    ns = s.namespace
    await s.gate("change-freeze", default="opened", window="24h")
    repo = s.repo("frozen")
    repo.commit("v1", files={"cm.yaml": config_map("frozen", ns, v="1")})
    repo.push()
    await s.git_repository("frozen", gates=[{"name": "change-freeze"}])
    await s.kustomization("frozen", "frozen")
    await s.observe.wait_ready(KUSTOMIZATION, "frozen")
    v1 = (await s.observe.get(GITREPO, "frozen"))["status"]["artifact"]

    await s.annotate("change-freeze", {"close.gate.fluxcd.io/requestedAt": stamp(s.clock())})
    await s.observe.wait(GATE, "change-freeze", lambda o: not opened(o), what="frozen")
    repo.commit("v2", files={"cm.yaml": config_map("frozen", ns, v="2")})
    repo.push()
    source = await s.observe.poke(GITREPO, "frozen", "during-freeze")
    blocked = condition(source, "Blocked")
    assert blocked is not None and (blocked["status"], blocked["reason"]) == ("True", "GateClosed")
    assert source["status"]["artifact"] == v1, "no new revision while frozen"
    assert condition(source, "Ready")["status"] == "True"  # type: ignore[index]

    # Drift is still corrected from the approved revision.
    await s.kube.delete(CONFIG_MAP, "frozen", namespace=ns)
    await s.observe.poke(KUSTOMIZATION, "frozen", "drift")
    assert (await s.kube.get(CONFIG_MAP, "frozen", ns))["data"] == {"v": "1"}

    # The freeze ends: the new revision flows without waiting for an interval.
    await s.annotate(
        "change-freeze",
        {"open.gate.fluxcd.io/requestedAt": stamp(s.clock() + timedelta(seconds=1))},
    )
    s.clock.advance(timedelta(seconds=2))
    await s.observe.poke(GATE, "change-freeze", "thaw")
    await s.observe.wait(
        KUSTOMIZATION,
        "frozen",
        lambda o: o["status"].get("lastAppliedRevision") == f"main@sha1:{repo.head}",
        timeout=15,
        what="v2 applied after the freeze",
    )
    assert condition(await s.observe.get(GITREPO, "frozen"), "Blocked") is None


async def test_story_4_a_webhook_approves_a_release(stage: Stage) -> None:
    s = stage
    ns = s.namespace
    await s.gate("release", default="closed", window="1h")
    repo = s.repo("hooked")
    repo.commit("v1", files={"cm.yaml": config_map("hooked", ns, v="1")})
    repo.push()
    await s.git_repository("hooked")
    await s.kustomization("hooked", "hooked", gates=[{"name": "release"}])
    token = "approve-token"
    await make_secret(s.kube, ns, "approver", {"token": token})
    from .conftest import ResourceType

    receivers = ResourceType("notification.toolkit.fluxcd.io", "v1", "receivers", "Receiver")
    await s.kube.create(
        receivers,
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1",
            "kind": "Receiver",
            "metadata": {"name": "chatops"},
            "spec": {
                "type": "generic-hmac",
                "secretRef": {"name": "approver"},
                "resources": [{"kind": "Gate", "name": "release", "action": "open"}],
            },
        },
        namespace=ns,
    )
    receiver = await s.observe.wait_ready(receivers, "chatops")
    body = b'{"approved": true}'
    signature = "sha256=" + hmac.new(token.encode(), body, hashlib.sha256).hexdigest()
    async with s.session.post(
        s.receiver_url + receiver["status"]["webhookPath"],
        data=body,
        headers={"X-Signature": signature},
    ) as answer:
        assert answer.status == 200
    await s.observe.wait_ready(KUSTOMIZATION, "hooked", timeout=10)
    gate = await s.observe.get(GATE, "release")
    assert gate["status"]["history"][-1]["source"] == f"Receiver/{ns}/chatops"
    # Each open and close is an event, so Alerts can announce it.
    from sluice_runtime.kube.resources import EVENT

    for _ in range(50):
        events = [
            e for e in (await s.kube.list(EVENT, namespace=ns)).items
            if e["involvedObject"]["name"] == "release" and e["reason"] == "GateOpened"
        ]  # fmt: skip
        if events:
            break
        await asyncio.sleep(0.1)
    assert events, "a GateOpened event"
    until = gate["status"]["resetToDefaultAt"]
    assert events[0]["message"] == f"release opened by Receiver/{ns}/chatops until {until}"


async def test_a_malformed_request_keeps_the_last_state(stage: Stage) -> None:
    s = stage
    await s.gate("typo", default="closed", window="1h")
    await s.annotate("typo", {"open.gate.fluxcd.io/requestedAt": "yesterday"})
    gate = await s.observe.wait(
        GATE,
        "typo",
        lambda o: (condition(o, "Ready") or {}).get("status") == "False",
        what="Ready=False",
    )
    assert '"yesterday"' in condition(gate, "Ready")["message"]  # type: ignore[index]
    assert not opened(gate), "the gate keeps its last state"


async def test_a_schedule_opens_the_gate_on_its_ticks(stage: Stage) -> None:
    s = stage
    # Deploy only Tue-Thu 09:00-16:00 Berlin time.
    now = s.clock()
    berlin_wednesday_10 = datetime(2026, 11, 25, 9, 0, tzinfo=UTC)  # 10:00 CET
    s.clock.advance(berlin_wednesday_10 - now)
    gate = await s.gate(
        "office-hours",
        default="closed",
        window="1h",
        schedule=[{"cron": "0 9 * * 2-4", "timeZone": "Europe/Berlin", "window": "7h"}],
    )
    assert opened(gate)
    assert (
        condition(gate, "Opened")["message"] == "Gate scheduled for closing at 2026-11-25T15:00:00Z"
    )  # type: ignore[index]
    s.clock.advance(timedelta(days=2))  # Friday 10:00 CET
    await s.observe.poke(GATE, "office-hours", "friday")
    assert not opened(await s.observe.get(GATE, "office-hours"))
