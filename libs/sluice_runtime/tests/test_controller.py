"""Informer, queue and runner, proven against the real API server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.conditions import condition_of as condition
from sluice_runtime.informing.queueing import ExponentialBackoff
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import SERVICE_ACCOUNT, ResourceType
from sluice_runtime.reconciling.errors import Stalling, StepError
from sluice_runtime.reconciling.steps import Result, Step

from .conftest import (
    GITREPO,
    Harness,
    Journal,
    RecordingContext,
    eventually,
    gitrepo,
    running_controller,
)

ROLE = ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDING = ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")


async def ready(kube: KubeClient, namespace: str, name: str) -> bool:
    obj = await kube.get(GITREPO, name, namespace)
    cond = condition(obj, "Ready")
    return cond is not None and cond["status"] == "True"


async def test_objects_created_while_running_are_reconciled_once_each(
    kube: KubeClient, namespace: str, harness: Harness
) -> None:
    names = [f"repo-{i}" for i in range(20)]
    for name in names:
        await kube.create(GITREPO, gitrepo(name, namespace, url=f"https://example.com/{name}.git"))

    async def all_ready() -> bool:
        return all([await ready(kube, namespace, n) for n in names])

    await eventually(all_ready, message="all objects Ready")
    # Our own writes (finalizer, status) must not trigger more reconciles.
    await asyncio.sleep(1.0)
    counts = {n: harness.journal.count(f"{namespace}/{n}") for n in names}
    assert counts == dict.fromkeys(names, 1)

    obj = await kube.get(GITREPO, "repo-3", namespace)
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    assert "finalizers.fluxcd.io" in obj["metadata"]["finalizers"]
    ready_cond = condition(obj, "Ready")
    assert ready_cond is not None
    assert ready_cond["reason"] == "Succeeded"
    assert ready_cond["message"] == "recorded https://example.com/repo-3.git"
    assert ready_cond["observedGeneration"] == obj["metadata"]["generation"]
    assert condition(obj, "Reconciling") is None
    assert condition(obj, "Stalled") is None


async def test_a_failing_reconcile_backs_off_and_does_not_block_other_keys(
    kube: KubeClient, namespace: str
) -> None:
    broken = {"on": True}

    async def fail_when_broken(ctx: RecordingContext) -> Result | None:
        if ctx.obj.metadata.name == "broken" and broken["on"]:
            raise StepError("GitOperationFailed", "remote hung up", condition="FetchFailed")
        return None

    step = Step(fn=fail_when_broken, name="maybe_fail", conditions=("FetchFailed",))
    # One worker: if the failing key blocked the queue, nothing else would run.
    async with running_controller(
        kube,
        namespace,
        extra_steps=[step],
        concurrency=1,
        backoff=ExponentialBackoff(base=0.1, cap=1.0),
    ) as harness:
        await kube.create(GITREPO, gitrepo("broken", namespace))
        for i in range(5):
            await kube.create(GITREPO, gitrepo(f"fine-{i}", namespace))

        async def fine_ready() -> bool:
            return all([await ready(kube, namespace, f"fine-{i}") for i in range(5)])

        await eventually(fine_ready, message="healthy objects Ready despite a failing one")
        key = f"{namespace}/broken"
        await eventually(lambda: harness.controller.queue.failures(key) >= 3, message="retries")
        attempts_before = harness.journal.count(key)
        await asyncio.sleep(2.0)
        attempts = harness.journal.count(key) - attempts_before
        # Backoff 0.1s doubling to 1s allows about 4 attempts in 2s; a hot loop would be hundreds.
        assert attempts <= 8, f"{attempts} attempts in 2s: no backoff"

        obj = await kube.get(GITREPO, "broken", namespace)
        ready_cond, fetch, reconciling = (
            condition(obj, "Ready"),
            condition(obj, "FetchFailed"),
            condition(obj, "Reconciling"),
        )
        assert ready_cond is not None and fetch is not None and reconciling is not None
        assert (ready_cond["status"], ready_cond["reason"]) == ("False", "GitOperationFailed")
        assert ready_cond["message"] == "remote hung up"
        assert (fetch["status"], fetch["reason"]) == ("True", "GitOperationFailed")
        assert (reconciling["status"], reconciling["reason"]) == ("True", "ProgressingWithRetry")
        # The error is said by Ready and FetchFailed; Reconciling says what happens next.
        assert reconciling["message"] == "reconciliation failed, retrying with backoff"

        broken["on"] = False
        await eventually(lambda: ready(kube, namespace, "broken"), message="recovered")
        obj = await kube.get(GITREPO, "broken", namespace)
        assert condition(obj, "FetchFailed") is None, "a step's condition clears on success"
        assert condition(obj, "Reconciling") is None
        assert harness.controller.queue.failures(key) == 0


async def test_requested_at_annotation_reconciles_promptly_and_is_recorded(
    kube: KubeClient, namespace: str, harness: Harness
) -> None:
    await kube.create(GITREPO, gitrepo("poke", namespace))
    await eventually(lambda: ready(kube, namespace, "poke"))
    await kube.merge_patch(
        GITREPO,
        "poke",
        {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": "2026-11-21T10:00:00Z"}}},
        namespace=namespace,
    )

    async def handled() -> bool:
        obj = await kube.get(GITREPO, "poke", namespace)
        return bool(obj["status"].get("lastHandledReconcileAt") == "2026-11-21T10:00:00Z")

    await eventually(handled, timeout=5, message="lastHandledReconcileAt recorded")
    assert harness.journal.count(f"{namespace}/poke") == 2


async def test_a_requested_reconcile_runs_while_every_worker_is_busy(
    kube: KubeClient, namespace: str
) -> None:
    release = asyncio.Event()

    async def hold_busy(ctx: RecordingContext) -> Result | None:
        if ctx.obj.metadata.name == "busy":
            await release.wait()
        return None

    step = Step(fn=hold_busy, name="hold_busy", conditions=())
    async with running_controller(kube, namespace, extra_steps=[step], concurrency=1) as harness:
        await kube.create(GITREPO, gitrepo("busy", namespace))
        busy = f"{namespace}/busy"
        await eventually(
            lambda: busy in harness.controller.queue.processing, message="the worker is busy"
        )
        await kube.create(GITREPO, gitrepo("queued", namespace))
        await kube.create(GITREPO, gitrepo("asked", namespace))
        await kube.merge_patch(
            GITREPO,
            "asked",
            {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": "now"}}},
            namespace=namespace,
        )
        # The one worker is held; the asked-for key is reconciled anyway, the
        # merely queued one is not (the kept worker takes requests only).
        await eventually(lambda: ready(kube, namespace, "asked"), message="requested key Ready")
        assert harness.journal.count(f"{namespace}/queued") == 0
        assert busy in harness.controller.queue.processing
        release.set()
        await eventually(lambda: ready(kube, namespace, "queued"), message="the rest goes on")


async def test_a_stalling_error_is_not_retried_until_the_spec_changes(
    kube: KubeClient, namespace: str
) -> None:
    async def stall_on_bad_url(ctx: RecordingContext) -> Result | None:
        if "invalid" in ctx.obj.spec.url:
            raise Stalling("URLInvalid", f"URL {ctx.obj.spec.url!r} is not a Git URL")
        return None

    step = Step(fn=stall_on_bad_url, name="validate", conditions=())
    async with running_controller(kube, namespace, extra_steps=[step]) as harness:
        await kube.create(GITREPO, gitrepo("stuck", namespace, url="https://invalid.example/x"))

        async def stalled() -> bool:
            cond = condition(await kube.get(GITREPO, "stuck", namespace), "Stalled")
            return cond is not None and cond["status"] == "True"

        await eventually(stalled, message="Stalled=True")
        obj = await kube.get(GITREPO, "stuck", namespace)
        ready_cond = condition(obj, "Ready")
        assert ready_cond is not None and ready_cond["reason"] == "URLInvalid"
        assert condition(obj, "Reconciling") is None
        assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
        await asyncio.sleep(1.5)
        key = f"{namespace}/stuck"
        assert harness.journal.count(key) == 1, "a stalled object must not be retried"

        await kube.merge_patch(
            GITREPO, "stuck", {"spec": {"url": "https://example.com/ok.git"}}, namespace=namespace
        )
        await eventually(
            lambda: ready(kube, namespace, "stuck"), message="recovered on spec change"
        )
        assert condition(await kube.get(GITREPO, "stuck", namespace), "Stalled") is None


async def test_a_suspended_object_is_left_alone_until_resumed(
    kube: KubeClient, namespace: str, harness: Harness
) -> None:
    await kube.create(GITREPO, gitrepo("paused", namespace, suspend=True))
    await kube.create(GITREPO, gitrepo("marker", namespace))
    await eventually(lambda: ready(kube, namespace, "marker"))
    await asyncio.sleep(0.5)
    assert harness.journal.count(f"{namespace}/paused") == 0
    assert "status" not in await kube.get(GITREPO, "paused", namespace) or not condition(
        await kube.get(GITREPO, "paused", namespace), "Ready"
    )
    await kube.merge_patch(GITREPO, "paused", {"spec": {"suspend": False}}, namespace=namespace)
    await eventually(lambda: ready(kube, namespace, "paused"), message="reconciled once resumed")


async def test_deleting_runs_finalize_then_releases_the_object(
    kube: KubeClient, namespace: str, harness: Harness
) -> None:
    await kube.create(GITREPO, gitrepo("doomed", namespace))
    await eventually(lambda: ready(kube, namespace, "doomed"))
    await kube.delete(GITREPO, "doomed", namespace=namespace)

    async def gone() -> bool:
        try:
            await kube.get(GITREPO, "doomed", namespace)
        except NotFound:
            return True
        return False

    await eventually(gone, message="object deleted after finalization")
    assert harness.journal.finalized == [f"{namespace}/doomed"]


@pytest.mark.parametrize("concurrency", [pytest.param(8, id="eight-workers")])
async def test_one_key_never_runs_on_two_workers(
    kube: KubeClient, namespace: str, concurrency: int
) -> None:
    journal = Journal()
    async with running_controller(
        kube, namespace, journal=journal, concurrency=concurrency, delay=0.05
    ):
        await kube.create(GITREPO, gitrepo("hot", namespace))
        for i in range(20):
            await kube.merge_patch(
                GITREPO, "hot", {"spec": {"url": f"https://example.com/{i}"}}, namespace=namespace
            )
            await asyncio.sleep(0.01)
        await eventually(
            lambda: journal.urls.get(f"{namespace}/hot", [""])[-1] == "https://example.com/19"
        )
    assert journal.max_parallel_per_key == 1


async def test_watch_label_selector_shards_objects_between_replicas(
    kube: KubeClient, namespace: str
) -> None:
    from sluice_runtime.controller import Controller, Informers

    from .conftest import recording_reconciler

    journal = Journal()
    informers = Informers(kube, namespace=namespace, label_selector="shard=a")
    controller = Controller(
        recording_reconciler(journal), client=kube, informers=informers, recorder=None
    )
    await informers.start()
    await informers.wait_synced()
    await controller.start()
    try:
        mine = gitrepo("mine", namespace)
        mine["metadata"]["labels"] = {"shard": "a"}
        theirs = gitrepo("theirs", namespace)
        theirs["metadata"]["labels"] = {"shard": "b"}
        await kube.create(GITREPO, mine)
        await kube.create(GITREPO, theirs)
        await eventually(lambda: ready(kube, namespace, "mine"))
        await asyncio.sleep(0.5)
        assert journal.count(f"{namespace}/theirs") == 0
        assert condition(await kube.get(GITREPO, "theirs", namespace), "Ready") is None
    finally:
        await controller.stop()
        await informers.stop()


async def test_an_unchanged_object_is_reconciled_again_after_its_interval(
    kube: KubeClient, namespace: str, harness: Harness
) -> None:
    await kube.create(GITREPO, gitrepo("idle", namespace))  # gitrepo()'s 1h interval
    await eventually(lambda: harness.journal.count(f"{namespace}/idle") == 1)
    await kube.create(GITREPO, gitrepo("ticking", namespace, interval="1s"))
    key = f"{namespace}/ticking"
    await eventually(
        lambda: harness.journal.count(key) >= 3, timeout=15, message="requeued after interval"
    )
    obj = await kube.get(GITREPO, "ticking", namespace)
    assert obj["metadata"]["generation"] == 1, "nothing changed the object between reconciles"
    assert harness.journal.urls[key] == ["https://example.com/r.git"] * len(
        harness.journal.urls[key]
    )
    assert harness.journal.count(f"{namespace}/idle") == 1, "a 1h interval must not requeue"


async def restricted_client(
    kube: KubeClient, namespace: str, kubeconfig: Path, tmp_path: Path
) -> KubeClient:
    """A client as ServiceAccount `runner`, which may do anything to GitRepositories
    and Events of `namespace` but, until `grant_status`, not write their status."""
    await kube.create(
        SERVICE_ACCOUNT,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "runner", "namespace": namespace},
        },
    )
    await kube.create(
        ROLE,
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "objects", "namespace": namespace},
         "rules": [{"apiGroups": ["source.toolkit.fluxcd.io"], "resources": ["gitrepositories"], "verbs": ["*"]},
                   {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["*"]}]},
    )  # fmt: skip
    await bind(kube, namespace, "objects")
    answer = await kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/runner/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
              "spec": {"expirationSeconds": 600}},
    )  # fmt: skip
    config = yaml.safe_load(kubeconfig.read_text())
    config["users"] = [{"name": "runner", "user": {"token": answer["status"]["token"]}}]
    config["contexts"][0]["context"]["user"] = "runner"
    path = tmp_path / "runner.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return await KubeClient.connect(kubeconfig=str(path), qps=0)


async def bind(kube: KubeClient, namespace: str, role: str) -> None:
    await kube.create(
        ROLE_BINDING,
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": role, "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
         "subjects": [{"kind": "ServiceAccount", "name": "runner", "namespace": namespace}]},
    )  # fmt: skip


async def test_a_failed_status_write_is_retried_with_backoff_not_at_the_interval(
    kube: KubeClient, namespace: str, cluster: Cluster, tmp_path: Path
) -> None:
    """Found by the chaos suite: when the API server restarted between a reconcile's
    work and its status patch, the failed patch was only logged, and the object
    showed its old revision until its interval (1h here) came round."""
    client = await restricted_client(kube, namespace, cluster.kubeconfig, tmp_path)
    try:
        async with running_controller(
            client, namespace, backoff=ExponentialBackoff(base=0.1, cap=1.0)
        ) as harness:
            await kube.create(GITREPO, gitrepo("app", namespace))
            key = f"{namespace}/app"
            await eventually(lambda: harness.journal.count(key) >= 1, message="reconciled")
            await eventually(lambda: harness.controller.queue.failures(key) >= 1, message="retried")
            assert condition(await kube.get(GITREPO, "app", namespace), "Ready") is None
            await kube.create(
                ROLE,
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                 "metadata": {"name": "status", "namespace": namespace},
                 "rules": [{"apiGroups": ["source.toolkit.fluxcd.io"],
                            "resources": ["gitrepositories/status"], "verbs": ["*"]}]},
            )  # fmt: skip
            await bind(kube, namespace, "status")
            await eventually(
                lambda: ready(kube, namespace, "app"), message="status written on a retry"
            )
    finally:
        await client.close()


async def test_progress_is_published_mid_reconcile_and_the_final_write_replaces_it(
    kube: KubeClient, namespace: str
) -> None:
    # One StatusPatcher per reconcile: `progress` writes through it while the
    # step still runs, and the final write patches from what it published.
    release = asyncio.Event()

    async def long_step(ctx: RecordingContext) -> Result | None:
        await ctx.progress("fetching the big one")
        await release.wait()
        ctx.ready_message = "fetched"
        return None

    step = Step(fn=long_step, name="long", conditions=())
    async with running_controller(kube, namespace, extra_steps=[step]):
        await kube.create(GITREPO, gitrepo("slow", namespace))

        async def in_progress() -> bool:
            cond = condition(await kube.get(GITREPO, "slow", namespace), "Reconciling")
            return cond is not None and cond["message"] == "fetching the big one"

        await eventually(in_progress, message="Reconciling published mid-reconcile")
        obj = await kube.get(GITREPO, "slow", namespace)
        shown = condition(obj, "Ready")
        assert shown is not None and (shown["status"], shown["reason"]) == (
            "Unknown",
            "Progressing",
        )

        release.set()
        await eventually(lambda: ready(kube, namespace, "slow"), message="Ready after the step")
        obj = await kube.get(GITREPO, "slow", namespace)
        final = condition(obj, "Ready")
        assert final is not None and final["message"] == "fetched"
        assert condition(obj, "Reconciling") is None
        assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
