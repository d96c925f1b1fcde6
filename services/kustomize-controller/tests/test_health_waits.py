"""A health wait does not hold a worker: it is continued by short re-checks."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import pytest
import yaml

from kustomize_controller import context, health_checking
from kustomize_controller.context import HealthWait, KustomizationContext, Services
from kustomize_controller.watching_applied import AppliedWatch
from sluice_api.kustomize import NAME_LABEL, NAMESPACE_LABEL
from sluice_api.meta import ObjectId
from sluice_envtest.harness import condition, exists
from sluice_envtest.workloads import rolled_out_status, simulated_rollouts
from sluice_runtime.kube.attributing import Request
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.health import Health
from sluice_runtime.kube.resources import ObjectRef, ResourceType
from sluice_runtime.reconciling.steps import Result

from .conftest import (
    CONFIG_MAP,
    DEPLOYMENT,
    GITREPO,
    KUSTOMIZATION,
    Delivery,
    Flags,
    config_map,
    deployment,
    until,
)

WEB = ObjectRef.to(ResourceType("apps", "v1", "deployments", "Deployment"), "web", "apps")
DB = ObjectRef.to(ResourceType("apps", "v1", "deployments", "Deployment"), "db", "apps")
API = ObjectRef.to(ResourceType("apps", "v1", "deployments", "Deployment"), "api", "apps")


def running_health_checks(obj: dict[str, object]) -> bool:
    reconciling = condition(obj, "Reconciling") or {}
    return reconciling.get("status") == "True" and "Running health checks" in str(
        reconciling.get("message")
    )


@pytest.mark.parametrize("delivery", [Flags(kustomize=("--concurrent", "1"))], indirect=True)
async def test_a_health_wait_leaves_the_only_worker_free(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    slow = d.repo("slow")
    slow.commit("v1", files={"web.yaml": deployment("web", ns)})
    slow.push()
    quick = d.repo("quick")
    quick.commit("v1", files={"cm.yaml": config_map("quick", ns)})
    quick.push()
    await d.git_repository("slow")
    # The watch sees no change: the re-checks below are the fallback's reads,
    # sooner than in production so that two come within a few seconds.
    services = d.controller().runner.reconciler.context.keywords["services"]
    services.health_fallback = 0.5
    # Nothing rolls the Deployment out: a blocking wait would hold the one worker 10m.
    await d.kustomization("slow", source="slow", wait=True, timeout="10m")
    waiting = await d.observe.wait(
        KUSTOMIZATION, "slow", running_health_checks, what="health checks running"
    )
    assert (condition(waiting, "Ready") or {}).get("status") == "Unknown"
    assert waiting["status"]["inventory"]["entries"], "the inventory is written before the wait"

    await d.git_repository("quick")
    await d.kustomization("quick", source="quick")
    await d.observe.wait_ready(KUSTOMIZATION, "quick")
    still = await d.kube.get(KUSTOMIZATION, "slow", ns)
    assert running_health_checks(still), "the first one still waits, neither failed nor Ready"

    # A re-check is only the health reads: no build, dry-run, apply or status patch.
    key = f"{ns}/slow"
    seen: list[Request] = []
    stop = d.kustomize.client.observe(_Collect(key, seen))
    try:
        before = d.reconciles.counts[key]
        await until(lambda: d.reconciles.counts[key] >= before + 2, "no re-checks")
    finally:
        stop()
    assert seen, "a re-check reads the Deployment"
    assert {(r.phase, r.verb) for r in seen} == {("reconcile_health_recheck", "get")}, seen

    async with simulated_rollouts(d.kube, namespace=ns):
        ready = await d.observe.wait_ready(KUSTOMIZATION, "slow")
    assert (condition(ready, "Healthy") or {}).get("status") == "True"
    assert ready["status"]["lastAppliedRevision"] == f"main@sha1:{slow.head}"


async def test_a_change_to_an_applied_object_names_its_kustomization(
    kube: KubeClient, namespace: str
) -> None:
    """What lets a health wait in progress be checked as soon as a rollout moves."""
    changed: list[tuple[str, str, str]] = []
    watch = AppliedWatch(kube)
    watch.on_change = lambda key, oid, version: changed.append((key, oid.display, version))
    try:
        assert watch.versions(CONFIG_MAP, namespace) is None, "the first ask starts the watch"
        await until(
            lambda: watch.versions(CONFIG_MAP, namespace) is not None, "the watch never listed"
        )
        labels = {NAME_LABEL: "app", NAMESPACE_LABEL: "apps"}
        body = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"phase": "pending"}}
        await kube.create(CONFIG_MAP, {**body, "metadata": {"name": "other"}}, namespace=namespace)
        created = await kube.create(
            CONFIG_MAP,
            {**body, "metadata": {"name": "owned", "labels": labels}},
            namespace=namespace,
        )
        patched = await kube.merge_patch(
            CONFIG_MAP, "owned", {"data": {"phase": "ready"}}, namespace=namespace
        )
        await until(lambda: len(changed) >= 2, "the watch never told of the create and the change")
        # Created, then changed, each at its version; the ConfigMap nobody applied
        # is not watched.
        subject = f"ConfigMap/{namespace}/owned"
        assert changed == [
            ("apps/app", subject, created["metadata"]["resourceVersion"]),
            ("apps/app", subject, patched["metadata"]["resourceVersion"]),
        ]
    finally:
        await watch.close()


IN_PROGRESS = Health(
    "InProgress", "Deployment generation is 2, but latest observed generation is 1"
)
CURRENT = Health("Current", "")


def a_wait(**fields: Any) -> HealthWait:
    """WEB in progress as the apply answered it (version 5), DB Current; both applied
    by this Kustomization; 60 s to go, the fallback read due at 5 s."""
    defaults: dict[str, Any] = {
        "fingerprint": (),
        "targets": [WEB, DB],
        "started": 0.0,
        "deadline": 60.0,
        "delay": 0.5,
        "inventory": None,
        "applied_versions": {WEB.id: "5", DB.id: "6"},
        "read_versions": {WEB.id: "5", DB.id: "6"},
        "current": {DB: CURRENT},
        "pending": {WEB: IN_PROGRESS},
        "read_due": 5.0,
        "gap": 10.0,
        "show_at": 3.5,
    }
    return HealthWait(**{**defaults, **fields})


@pytest.mark.parametrize(
    ("oid", "version", "moved"),
    [
        pytest.param(WEB.id, "7", True, id="rolled-out-since-the-apply"),
        pytest.param(WEB.id, "5", False, id="the-applys-own-write"),
        pytest.param(WEB.id, "4", False, id="an-older-write-seen-late"),
        pytest.param(WEB.id, "abc", True, id="an-opaque-version-that-differs"),
        pytest.param(DB.id, "9", False, id="already-current"),
        pytest.param(ObjectRef.to(CONFIG_MAP, "other", "apps").id, "3", False, id="not-waited-for"),
    ],
)
def test_which_changes_re_check_a_wait_at_once(oid: ObjectId, version: str, moved: bool) -> None:
    assert a_wait().moved(oid, version) is moved


def test_a_change_past_a_re_checks_read_is_news_and_one_at_it_is_not() -> None:
    wait = a_wait(read_versions={WEB.id: "8", DB.id: "6"})
    assert not wait.moved(WEB.id, "7")
    assert not wait.moved(WEB.id, "8")
    assert wait.moved(WEB.id, "9")


@pytest.mark.parametrize(
    ("version", "than", "newer"),
    [
        pytest.param("10", "9", True, id="numerically-not-lexically"),
        pytest.param("9", "10", False, id="older"),
        pytest.param("9", "9", False, id="same"),
        pytest.param("9", "", True, id="nothing-read-yet"),
        pytest.param("a", "b", True, id="opaque-and-different"),
        pytest.param("a", "a", False, id="opaque-and-same"),
    ],
)
def test_which_resource_versions_are_newer(version: str, than: str, newer: bool) -> None:
    assert context.newer(version, than) is newer


NOT_WATCHED: dict[ObjectRef, str | None] = {WEB: None}


@pytest.mark.parametrize(
    ("wait", "live", "now", "read"),
    [
        pytest.param(a_wait(), {WEB: "5"}, 1.0, [], id="watched-and-unchanged-reads-nothing"),
        pytest.param(a_wait(), {WEB: "4"}, 1.0, [], id="the-watch-lagging-reads-nothing"),
        pytest.param(a_wait(), {WEB: ""}, 1.0, [], id="not-seen-by-the-watch-yet"),
        pytest.param(a_wait(), {WEB: "7"}, 1.0, [WEB], id="changed-since-read"),
        pytest.param(a_wait(), NOT_WATCHED, 1.0, [WEB], id="not-watched-is-polled"),
        pytest.param(a_wait(), {WEB: "5"}, 5.0, [WEB], id="the-fallback-is-due"),
        pytest.param(a_wait(read_due=90.0), {WEB: "5"}, 60.0, [WEB], id="timed-out"),
        pytest.param(a_wait(pending={}), {WEB: "5"}, 1.0, [WEB], id="no-reading-yet"),
        pytest.param(
            a_wait(targets=[WEB, DB, API], pending={WEB: IN_PROGRESS, API: IN_PROGRESS}),
            {WEB: "5", API: "12"},
            1.0,
            [API],
            id="only-what-changed",
        ),
    ],
)
def test_what_a_re_check_reads(
    wait: HealthWait, live: dict[ObjectRef, str | None], now: float, read: list[ObjectRef]
) -> None:
    assert wait.to_read(live, now=now) == read


@pytest.mark.parametrize(
    ("wait", "live", "now", "delay"),
    [
        pytest.param(a_wait(shown=True), {WEB: "5"}, 1.0, 4.0, id="watched-waits-for-the-fallback"),
        pytest.param(a_wait(), {WEB: "5"}, 1.0, 2.5, id="watched-wakes-to-show-the-wait"),
        pytest.param(a_wait(), {WEB: "7"}, 1.0, 0.0, id="moved-before-it-was-registered"),
        pytest.param(a_wait(shown=True), {WEB: "4"}, 1.0, 4.0, id="the-watch-lagging-is-no-news"),
        pytest.param(a_wait(shown=True), {WEB: ""}, 1.0, 4.0, id="not-seen-by-the-watch-yet"),
        pytest.param(a_wait(), NOT_WATCHED, 1.0, 0.5, id="not-watched-polls"),
        pytest.param(
            a_wait(shown=True, read_due=90.0), {WEB: "5"}, 58.0, 2.0, id="never-past-the-timeout"
        ),
        pytest.param(a_wait(delay=2.0), NOT_WATCHED, 59.0, 1.0, id="polls-never-past-the-timeout"),
    ],
)
def test_when_a_wait_is_re_checked(
    wait: HealthWait, live: dict[ObjectRef, str | None], now: float, delay: float
) -> None:
    assert wait.next_recheck(live, now=now) == delay


@pytest.mark.parametrize(
    ("seconds", "interval", "at"),
    [
        pytest.param(2.0, 2.0, 3.5, id="the-defaults"),
        pytest.param(1.5, 2.0, 1.5, id="on-a-poll"),
        pytest.param(0.0, 2.0, 0.0, id="at-once"),
        pytest.param(10.0, 2.0, 11.5, id="every-interval-after-the-doubling"),
        pytest.param(3600.0, 0.1, 3600.0, id="an-interval-below-the-first-re-check"),
    ],
)
def test_when_a_wait_is_shown(seconds: float, interval: float, at: float) -> None:
    assert health_checking.polled_after(seconds, interval) == at


async def watch_only(d: Delivery) -> Services:
    """The Services of `d`'s controller, its waits moved by the applied Deployments'
    watch (synced) alone: neither the status shown after a while nor the fallback
    read comes into a test, however slow the machine."""
    services: Services = d.controller().runner.reconciler.context.keywords["services"]
    services.health_progress_after = 3600.0
    services.health_fallback = 3600.0
    await synced(services, DEPLOYMENT, d.namespace)
    return services


async def synced(services: Services, rt: ResourceType, namespace: str) -> None:
    """Until the applied-object watch of `rt` has listed, as in a controller that has
    been running a while."""
    deadline = time.monotonic() + 30
    while services.live is None or services.live.versions(rt, namespace) is None:
        assert time.monotonic() < deadline, f"the applied {rt.kind} watch never listed"
        await asyncio.sleep(0.05)


async def test_a_rollout_the_watch_saw_before_the_wait_began_ends_it(delivery: Delivery) -> None:
    """The race a watch-driven wait must close: the rollout reaches the watch after
    the apply answered but before the wait is registered, so no re-check is queued
    for it. Registering the wait compares the watch's version with the apply's
    and re-checks at once, rather than at the fallback read (never, here)."""
    d = delivery
    ns = d.namespace
    services = await watch_only(d)
    reconciler = d.controller().runner.reconciler
    original = next(s for s in reconciler.steps if s.name == "reconcile_health")

    async def rolled_out_first(ctx: KustomizationContext) -> Result | None:
        # Between the apply's answer and the wait: the rollout, seen by the watch.
        rolled = await roll_out_now(d.kube, ns, "web")
        deadline = time.monotonic() + 30
        while (services.live.versions(DEPLOYMENT, ns) or {}).get("web") != rolled:
            assert time.monotonic() < deadline, "the watch never saw the rollout"
            await asyncio.sleep(0.02)
        return await original(ctx)

    reconciler.steps = [
        replace(s, fn=rolled_out_first) if s is original else s for s in reconciler.steps
    ]
    repo = d.repo("app")
    repo.commit("v1", files={"web.yaml": deployment("web", ns)})
    repo.push()
    await d.git_repository("app")
    # Its artifact in place first: no new revision queues the Kustomization again.
    await d.observe.wait_ready(GITREPO, "app")
    await d.kustomization("app", source="app", wait=True, timeout="10m")
    ready = await d.observe.wait_ready(KUSTOMIZATION, "app")
    assert (condition(ready, "Healthy") or {}).get("status") == "True"


async def roll_out_now(kube: KubeClient, namespace: str, name: str) -> str:
    """Roll the Deployment out; its resourceVersion after."""
    obj = await kube.get(DEPLOYMENT, name, namespace)
    patched = await kube.merge_patch(
        DEPLOYMENT,
        name,
        {"status": rolled_out_status(obj)},
        namespace=namespace,
        subresource="status",
    )
    return str(patched["metadata"]["resourceVersion"])


async def test_an_object_the_watch_does_not_tell_of_is_polled(delivery: Delivery) -> None:
    """`healthChecks` naming a Deployment this Kustomization did not apply: its watch
    reports nothing to this Kustomization, so the wait polls (the fallback read
    would come only after an hour here)."""
    d = delivery
    ns = d.namespace
    services = await watch_only(d)
    await d.kube.create(DEPLOYMENT, yaml.safe_load(deployment("web", ns)), namespace=ns)
    repo = d.repo("app")
    repo.commit("v1", files={"cm.yaml": config_map("a", ns)})
    repo.push()
    await d.git_repository("app")
    await d.kustomization(
        "app",
        source="app",
        timeout="10m",
        healthChecks=[{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
    )
    key = f"{ns}/app"
    await until(lambda: key in services.health_waits, "no health wait started", timeout=60)
    await roll_out_now(d.kube, ns, "web")
    ready = await d.observe.wait_ready(KUSTOMIZATION, "app")
    assert (condition(ready, "Healthy") or {}).get("status") == "True"


@pytest.mark.parametrize("ending", ["new-revision", "deleted"])
async def test_what_a_wait_not_shown_yet_applied_is_still_pruned(
    delivery: Delivery, ending: str
) -> None:
    """Until status shows a wait, its inventory is the controller's: a full reconcile
    that replaces the wait, or a deletion, must still find the Deployment it applied."""
    d = delivery
    ns = d.namespace
    services = d.controller().runner.reconciler.context.keywords["services"]
    services.health_progress_after = 3600.0  # never shown: the inventory stays unwritten
    repo = d.repo("app")
    repo.commit("v1", files={"web.yaml": deployment("web", ns), "cm.yaml": config_map("a", ns)})
    repo.push()
    await d.git_repository("app")
    await d.kustomization("app", source="app", wait=True, timeout="10m")
    key = f"{ns}/app"
    await until(lambda: key in services.health_waits, "no health wait started", timeout=60)
    waiting = await d.kube.get(KUSTOMIZATION, "app", ns)
    assert not (waiting.get("status") or {}).get("inventory"), "the wait is not shown yet"
    assert await exists(d.kube, DEPLOYMENT, "web", ns)

    if ending == "new-revision":
        v2 = repo.commit("v2", remove=["web.yaml"])
        repo.push()
        await d.observe.poke(GITREPO, "app", "fetch")
        ready = await d.observe.wait_ready(KUSTOMIZATION, "app")
        assert ready["status"]["lastAppliedRevision"] == f"main@sha1:{v2}"
    else:
        await d.kube.delete(KUSTOMIZATION, "app", namespace=ns)
        await gone(d, KUSTOMIZATION, "app")
    await gone(d, DEPLOYMENT, "web")


async def gone(d: Delivery, rt: ResourceType, name: str) -> None:
    deadline = time.monotonic() + 60
    while await exists(d.kube, rt, name, d.namespace):
        assert time.monotonic() < deadline, f"{rt.kind}/{name} is still there"
        await asyncio.sleep(0.1)


class _Collect:
    def __init__(self, key: str, seen: list[Request]) -> None:
        self.key = key
        self.seen = seen

    def requested(self, request: Request) -> None:
        if request.key == self.key:
            self.seen.append(request)
