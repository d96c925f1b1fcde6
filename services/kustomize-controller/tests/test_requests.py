"""API requests per Kustomization, counted (a count, not a timing, so it can be asserted).

The MTTP benchmark's app shape (four objects, `wait`, `prune`, a tenant service
account, post-build substitution) is reconciled once from scratch and once
with nothing changed; every request the kustomize-controller sends on behalf
of that Kustomization (finalizer, steps, status patches, its Events) is
counted by verb and phase through the client's request observer.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from sluice_envtest.gitserver import WorkRepo
from sluice_envtest.harness import condition
from sluice_envtest.workloads import roll_out, simulated_rollouts
from sluice_runtime.informing.queueing import Lane
from sluice_runtime.kube.attributing import Request

from .conftest import (
    CONFIG_MAP,
    DEPLOYMENT,
    GITREPO,
    KUSTOMIZATION,
    SERVICE,
    Delivery,
    make_tenant,
    until,
)

APP = """apiVersion: v1
kind: ConfigMap
metadata:
  name: app-${INDEX}
data:
  greeting: hello
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: app-${INDEX}
---
apiVersion: v1
kind: Service
metadata:
  name: app-${INDEX}
spec:
  selector:
    app: app-${INDEX}
  ports:
    - name: http
      port: 9898
      protocol: TCP
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: app-${INDEX}
spec:
  rules:
    - host: app.example.com
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service:
                name: app-${INDEX}
                port:
                  number: 9898
"""


WITH_DEPLOYMENT = APP.replace(
    "apiVersion: v1\nkind: ConfigMap", "apiVersion: apps/v1\nkind: Deployment"
).replace(
    "data:\n  greeting: hello",
    "spec:\n  replicas: 0\n  selector:\n    matchLabels: {app: app}\n"
    "  template:\n    metadata:\n      labels: {app: app}\n"
    "    spec:\n      containers:\n        - {name: app, image: nginx:1.25}",
)
"""The MTTP app itself: its Deployment (`app-1`) is the one object not Current when applied."""


class Requests:
    """Requests sent for one Kustomization, by (phase, verb)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.counts: Counter[tuple[str, str]] = Counter()
        self.queries: dict[tuple[str, str], list[list[tuple[str, str]]]] = {}
        """The query of each request, by (phase, verb), in order."""

    def requested(self, request: Request) -> None:
        if request.key != self.key:
            return
        # Reading a group's discovery document is the controller's, once per
        # process and group; a fresh controller's first reconcile pays it.
        parts = request.path.strip("/").split("/")
        discovery = (parts[0] == "api" and len(parts) <= 2) or (
            parts[0] == "apis" and len(parts) <= 3
        )
        counted = ("discovery" if discovery else request.phase, request.verb)
        self.counts[counted] += 1
        self.queries.setdefault(counted, []).append(list(request.query))

    def total(self) -> int:
        return sum(n for (phase, _), n in self.counts.items() if phase != "discovery")


async def published(d: Delivery, manifests: str) -> WorkRepo:
    """`manifests` committed and pushed, and fetched by a Ready GitRepository `app`."""
    repo = d.repo("app")
    repo.commit("app", files={"app.yaml": manifests})
    repo.push()
    await d.git_repository("app")
    await d.observe.wait_ready(GITREPO, "app")
    return repo


async def reconciled(d: Delivery, key: str, count: int, timeout: float = 30.0) -> None:
    """Until `count` reconciles of `key` ran and the Events they recorded were written."""
    deadline = time.monotonic() + timeout
    while d.reconciles.counts[key] < count:
        assert time.monotonic() < deadline, f"{key}: {d.reconciles.counts[key]} reconciles"
        await asyncio.sleep(0.05)
    await asyncio.wait_for(d.kustomize.recorder.flushed(), timeout)


async def succeeded(d: Delivery, key: str, timeout: float = 30.0) -> None:
    """Until the reconcile that wrote Ready has returned and its Events were written:
    its requests are all counted."""
    deadline = time.monotonic() + timeout
    while d.reconciles.last_outcome[key].result != "success":
        assert time.monotonic() < deadline, d.reconciles.last_outcome[key]
        await asyncio.sleep(0.05)
    await asyncio.wait_for(d.kustomize.recorder.flushed(), timeout)


async def waited_app(d: Delivery, **spec: Any) -> None:
    """The MTTP shape's Kustomization `app`: `wait`, post-build substitution."""
    await d.kustomization(
        "app",
        source="app",
        wait=True,
        timeout="1m",
        targetNamespace=d.namespace,
        postBuild={"substitute": {"INDEX": "1"}},
        **spec,
    )


async def test_a_first_reconcile_and_a_no_change_one_cost_few_requests(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    await make_tenant(
        d,
        ["get", "list", "watch", "create", "update", "patch", "delete"],
        ("configmaps", "serviceaccounts", "services"),
    )
    await d.kube.request(
        "PATCH",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles/tenant",
        body=[{"op": "add", "path": "/rules/-", "value": {
            "apiGroups": ["networking.k8s.io"], "resources": ["ingresses"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}}],
        content_type="application/json-patch+json",
    )  # fmt: skip
    repo = await published(d, APP)
    key = f"{ns}/app"
    counted = Requests(key)
    stop = d.kustomize.client.observe(counted)
    try:
        await waited_app(d, serviceAccountName="tenant")
        await d.observe.wait_ready(KUSTOMIZATION, "app")
        await reconciled(d, key, 1)
        first, by_phase = counted.total(), dict(counted.counts)
        counted.counts.clear()

        await d.observe.poke(KUSTOMIZATION, "app", "now")
        await reconciled(d, key, 2)
        again, again_by_phase = counted.total(), dict(counted.counts)
        counted.counts.clear()

        # Two objects leave the set.
        kept = "---".join(APP.split("---")[:2])
        commit = repo.commit("only two", files={"app.yaml": kept})
        repo.push()
        await d.observe.poke(GITREPO, "app", "fetch")
        await d.observe.wait(
            KUSTOMIZATION,
            "app",
            lambda o: commit in str((o.get("status") or {}).get("lastAppliedRevision")),
            what="the new revision applied",
        )
        pruned = dict(counted.counts)
    finally:
        stop()
    # First: the finalizer, a dry-run and an apply of each object (no GET: the
    # dry-run's answer says whether it exists), no health GET (the apply's
    # answers show all four Current), one status patch and two Events (what
    # was created; Ready), as Flux records them. Today's: 18.
    assert first <= 12, by_phase
    assert not {p for p, verb in by_phase if verb == "get"} - {"discovery"}, by_phase
    # Nothing changed (same artifact, spec and inventory; no object written
    # since it was applied, as the controller's metadata watches of applied
    # kinds show): no dry-run, no read; the status patch records the handled
    # request. Today's: 9 (a GET and a dry-run per object).
    assert again <= 2, again_by_phase
    assert ("reconcile_apply", "dry-run") not in again_by_phase, again_by_phase
    # Pruning what the last apply left as it was is one DELETE each, with the uid
    # and resourceVersion as preconditions instead of a read first.
    assert pruned.get(("reconcile_prune", "delete")) == 2, pruned
    assert ("reconcile_prune", "get") not in pruned, pruned


async def test_a_kustomization_created_with_its_source_writes_no_waiting_status(
    delivery: Delivery,
) -> None:
    """Created together, as a commit or the MTTP benchmark creates them: the first
    reconcile finds no artifact, and "has no artifact yet" would be a status patch
    the apply replaces a moment later. The status is written once, Ready."""
    d = delivery
    ns = d.namespace
    repo = d.repo("app")
    repo.commit("app", files={"app.yaml": APP})
    repo.push()
    # However slow the machine, the source is ready within the grace: a count
    # stays a count (the grace's end is `test_running_quiet_waits`'s).
    d.controller().runner.reconciler.quiet_first_wait = 3600.0
    key = f"{ns}/app"
    counted = Requests(key)
    stop = d.kustomize.client.observe(counted)
    try:
        # The Kustomization first: it is reconciled before its source exists.
        await d.kustomization("app", source="app", targetNamespace=ns,
                              postBuild={"substitute": {"INDEX": "1"}})  # fmt: skip
        await until(lambda: d.reconciles.counts[key] >= 1, "the Kustomization never reconciled")
        assert "conditions" not in (await d.kube.get(KUSTOMIZATION, "app", ns))["status"]
        await d.git_repository("app")
        await d.observe.wait_ready(KUSTOMIZATION, "app")
        await succeeded(d, key)
    finally:
        stop()
    assert d.reconciles.counts[key] >= 2  # one waited, one applied
    assert counted.counts[("status", "patch")] == 1, dict(counted.counts)


async def test_drift_is_still_corrected_after_a_no_change_reconcile(delivery: Delivery) -> None:
    """Remembering what was applied must not hide a change made since by someone else."""
    d = delivery
    ns = d.namespace
    repo = d.repo("app")
    repo.commit("app", files={"app.yaml": APP})
    repo.push()
    await d.git_repository("app")
    await d.kustomization(
        "app", source="app", targetNamespace=ns, postBuild={"substitute": {"INDEX": "1"}}
    )
    await d.observe.wait_ready(KUSTOMIZATION, "app")
    await d.observe.poke(KUSTOMIZATION, "app", "idle")  # remembered now
    await d.kube.merge_patch(CONFIG_MAP, "app-1", {"data": {"greeting": "edited"}}, namespace=ns)
    await d.kube.delete(SERVICE, "app-1", namespace=ns)
    await d.observe.poke(KUSTOMIZATION, "app", "after-drift")
    assert (await d.kube.get(CONFIG_MAP, "app-1", ns))["data"] == {"greeting": "hello"}
    assert (await d.kube.get(SERVICE, "app-1", ns))["metadata"]["labels"]


async def test_kustomizations_of_one_artifact_reuse_its_build(delivery: Delivery) -> None:
    """The MTTP shape: one artifact, apps told apart by post-build substitution."""
    d = delivery
    ns = d.namespace
    await published(d, APP)
    builds = d.controller().runner.reconciler.context.keywords["services"].builds
    hits = builds.hits
    for index in ("1", "2"):
        await d.kustomization(
            f"app-{index}",
            source="app",
            targetNamespace=ns,
            postBuild={"substitute": {"INDEX": index}},
        )
        await d.observe.wait_ready(KUSTOMIZATION, f"app-{index}")
    assert builds.hits > hits
    for index in ("1", "2"):
        applied = await d.kube.get(CONFIG_MAP, f"app-{index}", ns)
        labels = applied["metadata"]["labels"]
        assert labels["kustomize.toolkit.fluxcd.io/name"] == f"app-{index}"
        assert (await d.kube.get(SERVICE, f"app-{index}", ns))["spec"]["selector"] == {
            "app": f"app-{index}"
        }


async def test_a_rollout_waited_for_costs_one_status_patch(delivery: Delivery) -> None:
    """The MTTP shape with its Deployment: the health wait ends in a re-check that
    only reads the Deployment and writes the status, once; the reconcile that
    applied writes none of its own, since status shows a wait only once it lasts."""
    d = delivery
    ns = d.namespace
    services = d.controller().runner.reconciler.context.keywords["services"]
    # However slow the machine, the wait is not shown: the count stays a count.
    services.health_progress_after = 3600.0
    await published(d, WITH_DEPLOYMENT)
    key = f"{ns}/app"
    counted = Requests(key)
    stop = d.kustomize.client.observe(counted)
    try:
        async with simulated_rollouts(d.kube, namespace=ns):
            await waited_app(d)
            ready = await d.observe.wait_ready(KUSTOMIZATION, "app")
            await succeeded(d, key)
    finally:
        stop()
    assert (condition(ready, "Healthy") or {}).get("status") == "True"
    by_phase = dict(counted.counts)
    shown = sorted(by_phase.items())
    assert by_phase.get(("status", "patch")) == 1, shown
    # The apply's answer showed the Deployment in progress: it is read by the
    # re-checks only, never at once by the reconcile that applied it.
    assert ("reconcile_health", "get") not in by_phase, shown
    assert by_phase.get(("reconcile_health_recheck", "get"), 0) >= 1, shown
    rechecks = sum(n for (phase, _), n in by_phase.items() if phase == "reconcile_health_recheck")
    assert rechecks == by_phase[("reconcile_health_recheck", "get")], shown
    # One dry-run per object: the rollout seen by the watch while the re-check
    # that ended the wait ran does not queue a full reconcile after it.
    assert by_phase[("reconcile_apply", "dry-run")] == 4, shown
    assert ("events", "patch") not in by_phase, shown
    # Everything but the re-checks' reads: as the first reconcile above.
    assert counted.total() - rechecks <= 12, shown


async def only_the_watch_moves_waits(d: Delivery) -> Any:
    """The controller's services, with the WITH_DEPLOYMENT revision published once
    its applied-Deployment watch has listed, and neither the status shown after
    a while nor the fallback read coming into a wait however slow the machine:
    only the watch moves it, and a count stays a count."""
    services = d.controller().runner.reconciler.context.keywords["services"]
    services.health_progress_after = 3600.0
    services.health_fallback = 3600.0
    # A controller that has run a while watches applied Deployments already; this
    # fresh one starts the watch now, and the wait is not to start before it lists.
    await until(
        lambda: services.live.versions(DEPLOYMENT, d.namespace) is not None,
        "the applied Deployments' watch never listed",
    )
    await published(d, WITH_DEPLOYMENT)
    return services


async def test_a_deployment_waited_for_is_read_once(delivery: Delivery) -> None:
    """The apply's answer shows the Deployment in progress; the applied-object watch
    tells when it has rolled out. However long that takes, the wait reads it once:
    polling read it 0.5 s after the apply, and 1.5 s, and on (2.6 GETs per app in
    the 1000-app MTTP run), each time finding what the apply had answered."""
    d = delivery
    ns = d.namespace
    services = await only_the_watch_moves_waits(d)
    key = f"{ns}/app"
    counted = Requests(key)
    stop = d.kustomize.client.observe(counted)
    try:
        await waited_app(d)
        await until(lambda: key in services.health_waits, "no health wait started")
        # A controller-manager under load takes its time: a poll would have read twice.
        await asyncio.sleep(1.5)
        await roll_out(d.kube, ns, "app-1")
        ready = await d.observe.wait_ready(KUSTOMIZATION, "app")
        await succeeded(d, key)
    finally:
        stop()
    assert (condition(ready, "Healthy") or {}).get("status") == "True"
    shown = sorted(counted.counts.items())
    gets = {
        phase: n
        for (phase, verb), n in counted.counts.items()
        if verb == "get" and phase != "discovery"
    }
    assert gets == {"reconcile_health_recheck": 1}, shown
    # That GET asks for the Deployment as of the rollout the watch told of, or
    # later: the API server answers from its watch cache, not a quorum read.
    rolled_out = (await d.kube.get(DEPLOYMENT, "app-1", ns))["metadata"]["resourceVersion"]
    assert counted.queries[("reconcile_health_recheck", "get")] == [
        [("resourceVersion", rolled_out)]
    ], shown


async def test_a_timed_recheck_due_while_the_watch_ends_the_wait_costs_nothing(
    delivery: Delivery,
) -> None:
    """The wait's timer (the fallback read, or the moment it is shown) comes due
    while the re-check the watch queued is ending the wait. In the 1000-app MTTP
    run 9% of the apps then got a full reconcile right after (a dry-run of the
    rolled-out Deployment, the apply step's reads): the timer marked the key
    dirty, and with the wait over the next reconcile was a full one."""
    d = delivery
    ns = d.namespace
    controller = d.controller()
    # The timer comes due when this test says.
    services = await only_the_watch_moves_waits(d)
    key = f"{ns}/app"
    counted = Requests(key)

    class TimerDueMeanwhile:
        """Once the watch's re-check has read, the wait's timer comes due (1 ms
        on, while the re-check writes status)."""

        def requested(self, request: Request) -> None:
            if (request.key, request.phase, request.verb) == (
                key, "reconcile_health_recheck", "get",
            ):  # fmt: skip
                controller.queue.requeue_after(key, 0.001, lane=Lane.FOLLOW_UP)

    stops = [d.kustomize.client.observe(counted), d.kustomize.client.observe(TimerDueMeanwhile())]
    try:
        await waited_app(d)
        await until(lambda: key in services.health_waits, "no health wait started")
        await roll_out(d.kube, ns, "app-1")
        ready = await d.observe.wait_ready(KUSTOMIZATION, "app")
        await succeeded(d, key)
        # A reconcile the timer would have queued is queued by now (the worker
        # requeues a dirty key as the reconcile returns); let it run.
        await until(
            lambda: not (len(controller.queue) or key in controller.queue.processing),
            "the queue never went idle",
        )
        await asyncio.wait_for(d.kustomize.recorder.flushed(), 30)
    finally:
        for stop in stops:
            stop()
    assert (condition(ready, "Healthy") or {}).get("status") == "True"
    shown = sorted(counted.counts.items())
    assert counted.counts[("reconcile_health_recheck", "get")] == 1, shown
    # The reconcile that applied, and the re-check that ended the wait: no third.
    assert d.reconciles.counts[key] == 2, shown
    assert counted.counts[("reconcile_apply", "dry-run")] == 4, shown
    assert counted.counts[("reconcile_apply", "apply")] == 4, shown
