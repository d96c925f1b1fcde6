"""Status that tells the truth while helm runs, against the real control plane.

The chart's pre-install/pre-upgrade hook is a Job, and nothing runs Jobs on the
test's control plane: helm waits on it until the test marks it complete (or
failed). So whatever the HelmRelease shows before the test does that, it
showed while helm was still running: the order of events proves it, no clock.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from sluice_envtest.chartrepo import CONFIGMAP_TEMPLATE
from sluice_envtest.harness import condition
from sluice_runtime.kube.client import JSON
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import ResourceType

from .conftest import HELMRELEASE, HelmDelivery

JOB = ResourceType("batch", "v1", "jobs", "Job")
GATE_HOOK = """apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-gate
  annotations:
    helm.sh/hook: pre-install,pre-upgrade
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: gate
          image: registry.invalid/gate:1
"""


def hooked_chart(d: HelmDelivery, version: str = "1.0.0") -> None:
    d.charts.add(
        "hooked",
        version,
        templates={"configmap.yaml": CONFIGMAP_TEMPLATE, "gate.yaml": GATE_HOOK},
    )


async def gate_job(d: HelmDelivery, release: str, *, not_uid: str = "") -> JSON:
    """The hook Job helm waits on, once helm has created it (another than `not_uid`)."""

    async def created() -> JSON | None:
        try:
            job = await d.kube.get(JOB, f"{release}-gate", d.namespace)
        except NotFound:
            return None
        return job if job["metadata"]["uid"] != not_uid else None

    for _ in range(900):  # a cap on the wait only
        if (job := await created()) is not None:
            return job
        await asyncio.sleep(0.1)
    raise AssertionError(f"helm created no hook Job for {release}")


async def finish_job(d: HelmDelivery, job: JSON, *, succeeded: bool) -> None:
    """What the Job controller would write once the hook's pod ended."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kind = "Complete" if succeeded else "Failed"
    status: dict[str, Any] = {
        "startTime": now,
        "conditions": [
            {"type": kind, "status": "True", "lastProbeTime": now, "lastTransitionTime": now}
        ],
    }
    if succeeded:
        status |= {"succeeded": 1, "completionTime": now}
    else:
        status |= {"failed": 1}
    await d.kube.merge_patch(
        JOB,
        job["metadata"]["name"],
        {"status": status},
        namespace=d.namespace,
        subresource="status",
    )


def reconciling_with(prefix: str) -> Any:
    def check(obj: JSON) -> bool:
        shown = condition(obj, "Reconciling")
        return (
            shown is not None and shown["status"] == "True" and shown["message"].startswith(prefix)
        )

    return check


async def event_counts(d: HelmDelivery, name: str) -> dict[str, int]:
    """Events of the HelmRelease by reason, repeats counted, once every event
    the helm-controller recorded so far is written."""
    await d.helm_controller.recorder.flushed()
    counts: dict[str, int] = {}
    for event in await d.events(name):
        counts[event["reason"]] = counts.get(event["reason"], 0) + int(event.get("count") or 1)
    return counts


async def test_a_new_install_shows_reconciling_before_helm_finishes_and_one_event(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    ns = d.namespace
    hooked_chart(d)
    await d.helm_repository()
    await d.helm_release("web", chart="hooked", install={"timeout": "3m"})

    # helm is held in its pre-install hook: this is what the object says meanwhile.
    shown = await d.observe.wait(
        HELMRELEASE, "web", reconciling_with("Running 'install' action"), timeout=90
    )
    reconciling = condition(shown, "Reconciling")
    assert reconciling is not None and reconciling["reason"] == "Progressing"
    assert reconciling["message"] == (
        "Running 'install' action with timeout of 3m0s: "
        f"installing chart hooked@1.0.0 as release {ns}/web"
    )
    ready = condition(shown, "Ready")
    assert ready is not None and (ready["status"], ready["reason"]) == ("Unknown", "Progressing")
    assert shown["status"]["lastAttemptedReleaseAction"] == "install"
    assert shown["status"]["lastAttemptedRevision"] == "1.0.0"
    job = await gate_job(d, "web")
    assert not job.get("status", {}).get("conditions"), "the hook finished before the test let it"

    await finish_job(d, job, succeeded=True)
    obj = await d.observe.wait_ready(HELMRELEASE, "web", timeout=90)
    assert condition(obj, "Reconciling") is None
    assert condition(obj, "Ready")["reason"] == "InstallSucceeded"  # type: ignore[index]
    assert (await event_counts(d, "web")).get("InstallSucceeded") == 1


async def test_a_new_attempt_clears_the_last_attempts_stalled_before_helm_runs(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    ns = d.namespace
    hooked_chart(d)
    await d.helm_repository()
    await d.helm_release("web", chart="hooked", values={"try": 1})
    failed_job = await gate_job(d, "web")
    await finish_job(d, failed_job, succeeded=False)
    stalled = await d.observe.wait_stalled(HELMRELEASE, "web", timeout=90)
    assert condition(stalled, "Stalled")["reason"] == "RetriesExceeded"  # type: ignore[index]
    assert (await event_counts(d, "web")).get("InstallFailed") == 1

    # A values change is a new attempt: while helm runs it, nothing says Stalled.
    await d.kube.merge_patch(HELMRELEASE, "web", {"spec": {"values": {"try": 2}}}, namespace=ns)
    shown = await d.observe.wait(
        HELMRELEASE, "web", reconciling_with("Running 'upgrade' action"), timeout=90
    )
    assert condition(shown, "Stalled") is None, shown["status"]["conditions"]
    assert condition(shown, "Reconciling")["message"] == (  # type: ignore[index]
        "Running 'upgrade' action with timeout of 5m0s: "
        f"upgrading release {ns}/web from chart hooked@1.0.0 to hooked@1.0.0"
    )
    ready = condition(shown, "Ready")
    assert ready is not None and (ready["status"], ready["reason"]) == ("Unknown", "Progressing")
    job = await gate_job(d, "web", not_uid=failed_job["metadata"]["uid"])
    assert not job.get("status", {}).get("conditions")

    await finish_job(d, job, succeeded=True)
    obj = await d.observe.wait_ready(HELMRELEASE, "web", timeout=90)
    assert condition(obj, "Ready")["reason"] == "UpgradeSucceeded"  # type: ignore[index]
    assert condition(obj, "Stalled") is None
    counts = await event_counts(d, "web")
    assert (counts.get("InstallFailed"), counts.get("UpgradeSucceeded")) == (1, 1), counts
