"""The gating issue's user stories, exactly as written, against the real control plane."""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime, timedelta

from sluice_api.meta import parse_time
from sluice_envtest.harness import condition
from sluice_runtime.kube.client import JSON
from sluice_runtime.kube.errors import NotFound

from .conftest import (
    ALERT,
    CONFIG_MAP,
    GATE,
    GITREPO,
    KUSTOMIZATION,
    PROVIDER,
    Sink,
    Stage,
    config_map,
    opened,
)


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
    repo = await s.gated_app("my-app", ["sre-approval", "qa-approval"])
    await s.held(
        "my-app", f"Reconciliation is waiting approval, gate '{ns}/sre-approval' is closed."
    )
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
    await s.held(
        "my-app", f"Reconciliation is waiting approval, gate '{ns}/qa-approval' is closed."
    )
    assert await absent(s, "my-app")

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
    ns = s.namespace
    gate = await s.gate("maintenance", default="opened", window="24h")
    assert condition(gate, "Opened")["message"] == "Gate opened by default"  # type: ignore[index]
    closed_at = s.clock()
    await s.annotate("maintenance", {"close.gate.fluxcd.io/requestedAt": stamp(closed_at)})
    gate = await s.observe.wait(GATE, "maintenance", lambda o: not opened(o), what="closed")
    until = stamp(closed_at.replace(microsecond=0) + timedelta(hours=24))
    assert condition(gate, "Opened")["message"] == f"Gate scheduled for opening at {until}"  # type: ignore[index]
    assert gate["status"]["resetToDefaultAt"] == until

    # Nothing is delivered during the maintenance.
    await s.gated_app("maintained", ["maintenance"])
    await s.held(
        "maintained", f"Reconciliation is waiting approval, gate '{ns}/maintenance' is closed."
    )
    await asyncio.sleep(0.5)
    assert await absent(s, "maintained"), "nothing is applied while closed"

    # A day later the gate is open again, and the delivery follows within seconds.
    s.clock.advance(timedelta(hours=24, seconds=1))
    gate = await s.observe.poke(GATE, "maintenance", "next-day")
    assert opened(gate)
    assert condition(gate, "Opened")["message"] == "Gate opened by default"  # type: ignore[index]
    await s.observe.wait_ready(KUSTOMIZATION, "maintained", timeout=10)
    assert (await s.kube.get(CONFIG_MAP, "maintained", ns))["data"] == {"v": "1"}


async def test_story_2_the_gate_reopens_by_itself(stage: Stage) -> None:
    s = stage
    await s.gate("short-maintenance", default="opened", window="3s")
    closed_at = s.clock()
    await s.annotate("short-maintenance", {"close.gate.fluxcd.io/requestedAt": stamp(closed_at)})
    gate = await s.observe.wait(
        GATE, "short-maintenance", lambda o: not opened(o), timeout=10, what="closed"
    )
    until = stamp(closed_at.replace(microsecond=0) + timedelta(seconds=3))
    assert condition(gate, "Opened")["message"] == f"Gate scheduled for opening at {until}"  # type: ignore[index]
    # No poke: the controller requeued itself for the end of the window.
    gate = await s.observe.wait(
        GATE, "short-maintenance", opened, timeout=10, what="reopened by itself"
    )
    assert condition(gate, "Opened")["message"] == "Gate opened by default"  # type: ignore[index]
    assert "requestedAt" not in gate["status"]
    assert "resetToDefaultAt" not in gate["status"]


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
    await s.gated_app("hooked", ["release"])
    await s.held("hooked", f"Reconciliation is waiting approval, gate '{ns}/release' is closed.")
    await asyncio.sleep(0.5)
    assert await absent(s, "hooked"), "nothing is applied while closed"

    token = "approve-token"
    url = await s.receiver(
        "chatops", token, [{"kind": "Gate", "name": "release", "action": "open"}]
    )
    assert await s.signed_post(url, token, b'{"approved": true}') == 200
    await s.observe.wait_ready(KUSTOMIZATION, "hooked", timeout=10)
    assert (await s.kube.get(CONFIG_MAP, "hooked", ns))["data"] == {"v": "1"}
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


async def test_story_4_a_webhook_closes_a_gate(stage: Stage) -> None:
    s = stage
    ns = s.namespace
    await s.gate("release-train", default="closed", window="1h")
    opened_at = s.clock() - timedelta(seconds=5)
    await s.annotate("release-train", {"open.gate.fluxcd.io/requestedAt": stamp(opened_at)})
    await s.observe.wait(GATE, "release-train", opened, what="opened")

    token = "stop-token"
    url = await s.receiver(
        "stop-the-line", token, [{"kind": "Gate", "name": "release-train", "action": "close"}]
    )
    before = datetime.now(UTC).replace(microsecond=0)
    assert await s.signed_post(url, token, b'{"stop": true}') == 200
    after = datetime.now(UTC)
    gate = await s.observe.wait(
        GATE, "release-train", lambda o: not opened(o), timeout=10, what="closed by the webhook"
    )
    annotations = gate["metadata"]["annotations"]
    requested = annotations["close.gate.fluxcd.io/requestedAt"]
    assert before <= parse_time(requested) <= after
    assert annotations["close.gate.fluxcd.io/requestedBy"] == f"receiver:{ns}/stop-the-line"
    assert annotations["open.gate.fluxcd.io/requestedAt"] == stamp(opened_at), "left as it was"
    assert "open.gate.fluxcd.io/requestedBy" not in annotations
    assert condition(gate, "Opened")["message"] == "Gate close requested"  # type: ignore[index]
    assert gate["status"]["requestedAt"] == requested
    entry = gate["status"]["history"][-1]
    assert (entry["time"], entry["action"], entry["source"]) == (
        requested,
        "close",
        f"Receiver/{ns}/stop-the-line",
    )


async def test_a_missing_gate_holds_its_consumer_until_it_exists_and_opens(stage: Stage) -> None:
    s = stage
    ns = s.namespace
    await s.gated_app("early", ["not-yet"])
    await s.held(
        "early", f"Reconciliation is waiting approval, gate '{ns}/not-yet' does not exist."
    )
    await asyncio.sleep(0.5)
    assert await absent(s, "early"), "a missing gate counts as closed"

    # Creating the gate wakes the Kustomization: it is now held by a closed gate.
    await s.gate("not-yet", default="closed", window="1h")
    await s.held("early", f"Reconciliation is waiting approval, gate '{ns}/not-yet' is closed.")
    assert await absent(s, "early")

    await s.annotate("not-yet", {"open.gate.fluxcd.io/requestedAt": stamp(s.clock())})
    await s.observe.wait_ready(KUSTOMIZATION, "early", timeout=10)
    assert (await s.kube.get(CONFIG_MAP, "early", ns))["data"] == {"v": "1"}
    approved = condition(await s.observe.get(KUSTOMIZATION, "early"), "Approved")
    assert approved is not None
    assert (approved["status"], approved["message"]) == (
        "True",
        f"Reconciliation is approved, gates '{ns}/not-yet' are open.",
    )


async def rejected(s: Stage, name: str, annotation: str, value: str) -> JSON:
    """Set `annotation` to a malformed time; the gate once Ready=False quotes the value."""
    await s.annotate(name, {annotation: value})
    gate = await s.observe.wait(
        GATE,
        name,
        lambda o: (condition(o, "Ready") or {}).get("status") == "False",
        what="Ready=False",
    )
    ready = condition(gate, "Ready")
    assert ready is not None and ready["reason"] == "InvalidGate"
    assert ready["message"] == f'annotation {annotation}: "{value}" is not an RFC3339 time'
    return gate


async def test_a_malformed_request_keeps_a_closed_gate_closed(stage: Stage) -> None:
    s = stage
    await s.gate("typo", default="closed", window="1h")
    gate = await rejected(s, "typo", "open.gate.fluxcd.io/requestedAt", "yesterday")
    assert not opened(gate), "the gate keeps its last state"
    assert condition(gate, "Opened")["message"] == "Gate closed by default"  # type: ignore[index]


async def test_a_malformed_request_keeps_an_open_gate_open(stage: Stage) -> None:
    s = stage
    await s.gate("typo-open", default="closed", window="1h")
    opened_at = s.clock()
    await s.annotate("typo-open", {"open.gate.fluxcd.io/requestedAt": stamp(opened_at)})
    before = await s.observe.wait(GATE, "typo-open", opened, what="opened")

    gate = await rejected(s, "typo-open", "close.gate.fluxcd.io/requestedAt", "tomorrow 9am")
    assert opened(gate), "the gate keeps its last state"
    assert condition(gate, "Opened") == condition(before, "Opened")
    assert gate["status"]["requestedAt"] == before["status"]["requestedAt"] == stamp(opened_at)
    assert gate["status"]["resetToDefaultAt"] == before["status"]["resetToDefaultAt"]


async def test_a_schedule_opens_the_gate_on_its_ticks(stage: Stage) -> None:
    s = stage
    ns = s.namespace
    # Deploy only Tue-Thu 09:00-16:00 Berlin time.
    berlin_wednesday_10 = datetime(2026, 11, 25, 9, 0, tzinfo=UTC)  # 10:00 CET
    s.clock.advance(berlin_wednesday_10 - s.clock())
    gate = await s.gate(
        "office-hours",
        default="closed",
        window="1h",
        schedule=[{"cron": "0 9 * * 2-4", "timeZone": "Europe/Berlin", "window": "7h"}],
    )
    assert opened(gate)
    assert (
        condition(gate, "Opened")["message"] == "Gate scheduled for closing at 2026-11-25T15:00:00Z"  # type: ignore[index]
    )
    s.clock.advance(timedelta(days=2))  # Friday 10:00 CET
    gate = await s.observe.poke(GATE, "office-hours", "friday")
    assert not opened(gate)
    assert condition(gate, "Opened")["message"] == "Gate closed by default"  # type: ignore[index]

    # A delivery on Friday waits for Tuesday.
    await s.gated_app("weekday", ["office-hours"])
    await s.held(
        "weekday", f"Reconciliation is waiting approval, gate '{ns}/office-hours' is closed."
    )
    await asyncio.sleep(0.5)
    assert await absent(s, "weekday"), "nothing is applied while closed"

    berlin_tuesday_9 = datetime(2026, 12, 1, 8, 0, 30, tzinfo=UTC)  # 09:00:30 CET
    s.clock.advance(berlin_tuesday_9 - s.clock())
    gate = await s.observe.poke(GATE, "office-hours", "tuesday")
    assert opened(gate)
    assert (
        condition(gate, "Opened")["message"] == "Gate scheduled for closing at 2026-12-01T15:00:00Z"  # type: ignore[index]
    )
    assert gate["status"]["history"][-1] == {
        "time": "2026-12-01T08:00:00Z",
        "action": "open",
        "source": "schedule",
    }
    await s.observe.wait_ready(KUSTOMIZATION, "weekday", timeout=10)
    assert (await s.kube.get(CONFIG_MAP, "weekday", ns))["data"] == {"v": "1"}


async def test_gate_events_reach_an_alert(stage: Stage, sink: Sink) -> None:
    s = stage
    ns = s.namespace
    await s.kube.create(
        PROVIDER,
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Provider",
            "metadata": {"name": "announcer"},
            "spec": {"type": "generic", "address": sink.url},
        },
        namespace=ns,
    )
    await s.kube.create(
        ALERT,
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Alert",
            "metadata": {"name": "gates"},
            "spec": {
                "providerRef": {"name": "announcer"},
                "eventSeverity": "info",
                "eventSources": [{"kind": "Gate", "name": "*"}],
            },
        },
        namespace=ns,
    )
    await s.gate("sre-approval", default="closed", window="1h")
    await s.annotate("sre-approval", {"open.gate.fluxcd.io/requestedAt": stamp(s.clock())})
    gate = await s.observe.wait(GATE, "sre-approval", opened, what="opened")
    until = gate["status"]["resetToDefaultAt"]
    event = await sink.wait_for("GateOpened")
    assert event["message"] == f"sre-approval opened by annotation until {until}"
    assert event["involvedObject"]["kind"] == "Gate"
    assert event["involvedObject"]["name"] == "sre-approval"
    assert event["involvedObject"]["namespace"] == ns
    assert event["severity"] == "info"
    assert event["reportingController"] == "gating-controller"

    await s.annotate(
        "sre-approval",
        {"close.gate.fluxcd.io/requestedAt": stamp(s.clock() + timedelta(seconds=1))},
    )
    s.clock.advance(timedelta(seconds=2))
    await s.observe.poke(GATE, "sre-approval", "close")
    event = await sink.wait_for("GateClosed")
    assert event["message"] == "sre-approval closed by annotation"
    announced = [e["reason"] for e in sink.received if e["reason"].startswith("Gate")]
    assert announced == ["GateOpened", "GateClosed"]
