"""kstatus rules as a table, and the poller against the real API server."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from sluice_runtime.kube.attributing import Request
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.health import Health, check_health, compute_status, wait_for_health
from sluice_runtime.kube.resources import CONFIG_MAP, ObjectRef, ResourceType

from .test_ssa_manager import deployment as deployment_manifest

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
DEPLOYMENT = ResourceType("apps", "v1", "deployments", "Deployment")


def obj(
    api_version: str, kind: str, *, meta: Any = None, spec: Any = None, status: Any = None
) -> Any:
    o: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "x", "namespace": "ns", **(meta or {})},
    }
    if spec is not None:
        o["spec"] = spec
    if status is not None:
        o["status"] = status
    return o


def cond(type_: str, status: str, reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def deployment(want: int = 1, **status: Any) -> Any:
    conditions = status.pop("conditions", None)
    st: dict[str, Any] = {"observedGeneration": 1, **status}
    if conditions is not None:
        st["conditions"] = conditions
    return obj(
        "apps/v1",
        "Deployment",
        meta={"generation": 1},
        spec={"replicas": want, "progressDeadlineSeconds": 600},
        status=st,
    )


ROLLED_OUT = [
    cond("Progressing", "True", "NewReplicaSetAvailable"),
    cond("Available", "True", "MinimumReplicasAvailable"),
]


CASES = [
    # generic rules
    pytest.param(
        obj("v1", "ConfigMap", meta={"deletionTimestamp": "2026-01-01T00:00:00Z"}),
        "Terminating",
        "being deleted",
        id="deletion-timestamp",
    ),
    pytest.param(
        obj("example.com/v1", "Widget", meta={"generation": 3}, status={"observedGeneration": 2}),
        "InProgress",
        "generation 3, observed 2",
        id="generation-not-observed",
    ),
    pytest.param(
        obj(
            "example.com/v1",
            "Widget",
            status={"conditions": [cond("Stalled", "True", "Bad", "spec.url is invalid")]},
        ),
        "Failed",
        "spec.url is invalid",
        id="stalled",
    ),
    pytest.param(
        obj(
            "example.com/v1",
            "Widget",
            status={"conditions": [cond("Reconciling", "True", "Progressing", "fetching")]},
        ),
        "InProgress",
        "fetching",
        id="reconciling",
    ),
    pytest.param(
        obj(
            "example.com/v1",
            "Widget",
            status={"conditions": [cond("Ready", "False", "Nope", "not yet")]},
        ),
        "InProgress",
        "not yet",
        id="ready-false-is-not-failed",
    ),
    pytest.param(
        obj(
            "example.com/v1",
            "Widget",
            status={
                "conditions": [cond("Ready", "False"), cond("Stalled", "True", "X", "give up")]
            },
        ),
        "Failed",
        "give up",
        id="ready-false-and-stalled",
    ),
    pytest.param(
        obj(
            "example.com/v1", "Widget", status={"conditions": [cond("Ready", "True", "Ok", "done")]}
        ),
        "Current",
        "done",
        id="ready-true",
    ),
    pytest.param(obj("example.com/v1", "Widget"), "Current", "current", id="no-status"),
    # Deployment
    pytest.param(
        obj("apps/v1", "Deployment", meta={"generation": 1}, spec={"replicas": 1}),
        "InProgress",
        "0 of 1 replicas exist",
        id="deployment-no-status",
    ),
    pytest.param(
        deployment(2, replicas=2, updatedReplicas=1),
        "InProgress",
        "1 of 2 replicas updated",
        id="deployment-rolling",
    ),
    pytest.param(
        deployment(1, replicas=1, updatedReplicas=1, readyReplicas=0, availableReplicas=0),
        "InProgress",
        "Deployment does not have minimum availability: 0 of 1 replicas available",
        id="deployment-unavailable",
    ),
    pytest.param(
        deployment(1, replicas=2, updatedReplicas=1),
        "InProgress",
        "1 old replicas pending termination",
        id="deployment-old-pods",
    ),
    pytest.param(
        deployment(
            1,
            conditions=[cond("Progressing", "False", "ProgressDeadlineExceeded", "rs too slow")],
        ),
        "Failed",
        "progress deadline: rs too slow",
        id="deployment-deadline-exceeded",
    ),
    pytest.param(
        deployment(
            1,
            replicas=1,
            updatedReplicas=1,
            readyReplicas=1,
            availableReplicas=1,
            conditions=[cond("Progressing", "True", "ReplicaSetUpdated")],
        ),
        "InProgress",
        "new ReplicaSet is not available yet",
        id="deployment-progressing-not-finished",
    ),
    pytest.param(
        deployment(
            1,
            replicas=1,
            updatedReplicas=1,
            readyReplicas=1,
            availableReplicas=1,
            conditions=ROLLED_OUT,
        ),
        "Current",
        "Deployment is available",
        id="deployment-available",
    ),
    # StatefulSet, DaemonSet, ReplicaSet
    pytest.param(
        obj(
            "apps/v1",
            "StatefulSet",
            spec={"replicas": 3},
            status={"replicas": 3, "readyReplicas": 1},
        ),
        "InProgress",
        "1 of 3 replicas ready",
        id="statefulset-not-ready",
    ),
    pytest.param(
        obj(
            "apps/v1",
            "StatefulSet",
            spec={"replicas": 2},
            status={
                "replicas": 2,
                "readyReplicas": 2,
                "currentReplicas": 2,
                "currentRevision": "a",
                "updateRevision": "a",
            },
        ),
        "Current",
        "ready",
        id="statefulset-ready",
    ),
    pytest.param(
        obj("apps/v1", "StatefulSet", spec={"updateStrategy": {"type": "OnDelete"}}, status={}),
        "Current",
        "OnDelete",
        id="statefulset-ondelete",
    ),
    pytest.param(
        obj("apps/v1", "DaemonSet", status={"desiredNumberScheduled": 2}),
        "InProgress",
        "not been observed",
        id="daemonset-unobserved",
    ),
    pytest.param(
        obj(
            "apps/v1",
            "DaemonSet",
            meta={"generation": 1},
            status={
                "observedGeneration": 1,
                "desiredNumberScheduled": 2,
                "currentNumberScheduled": 2,
                "updatedNumberScheduled": 2,
                "numberAvailable": 1,
                "numberReady": 2,
            },
        ),
        "InProgress",
        "1 of 2 pods available",
        id="daemonset-unavailable",
    ),
    pytest.param(
        obj(
            "apps/v1",
            "ReplicaSet",
            spec={"replicas": 1},
            status={"conditions": [cond("ReplicaFailure", "True", "FailedCreate", "quota")]},
        ),
        "InProgress",
        "cannot create pods: quota",
        id="replicaset-failure",
    ),
    pytest.param(
        obj(
            "apps/v1",
            "ReplicaSet",
            spec={"replicas": 1},
            status={
                "replicas": 1,
                "fullyLabeledReplicas": 1,
                "availableReplicas": 1,
                "readyReplicas": 1,
            },
        ),
        "Current",
        "available",
        id="replicaset-ready",
    ),
    # Pod
    pytest.param(obj("v1", "Pod"), "InProgress", "no phase", id="pod-unobserved"),
    pytest.param(
        obj("v1", "Pod", status={"phase": "Succeeded"}), "Current", "completed", id="pod-succeeded"
    ),
    pytest.param(
        obj("v1", "Pod", status={"phase": "Failed", "message": "OOMKilled"}),
        "Failed",
        "OOMKilled",
        id="pod-failed",
    ),
    pytest.param(
        obj(
            "v1",
            "Pod",
            status={
                "phase": "Running",
                "containerStatuses": [
                    {"name": "app", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
                ],
            },
        ),
        "Failed",
        "crash-looping: app",
        id="pod-crashloop",
    ),
    pytest.param(
        obj("v1", "Pod", status={"phase": "Running", "conditions": [cond("Ready", "True")]}),
        "Current",
        "ready",
        id="pod-ready",
    ),
    pytest.param(
        obj(
            "v1",
            "Pod",
            meta={"creationTimestamp": "2026-01-01T11:59:55Z"},
            status={
                "phase": "Pending",
                "conditions": [cond("PodScheduled", "False", "Unschedulable", "0/3 nodes")],
            },
        ),
        "InProgress",
        "not been scheduled yet",
        id="pod-unschedulable-within-grace",
    ),
    pytest.param(
        obj(
            "v1",
            "Pod",
            meta={"creationTimestamp": "2026-01-01T11:00:00Z"},
            status={
                "phase": "Pending",
                "conditions": [cond("PodScheduled", "False", "Unschedulable", "0/3 nodes")],
            },
        ),
        "Failed",
        "cannot be scheduled: 0/3 nodes",
        id="pod-unschedulable",
    ),
    # Job, CronJob
    pytest.param(
        obj("batch/v1", "Job", spec={}), "InProgress", "not started", id="job-not-started"
    ),
    pytest.param(
        obj("batch/v1", "Job", spec={}, status={"startTime": "t", "active": 1}),
        "InProgress",
        "0 of 1 succeeded, 1 active",
        id="job-running",
    ),
    pytest.param(
        obj(
            "batch/v1",
            "Job",
            spec={"completions": 1},
            status={"succeeded": 1, "conditions": [cond("Complete", "True")]},
        ),
        "Current",
        "completed: 1 of 1",
        id="job-complete",
    ),
    pytest.param(
        obj(
            "batch/v1",
            "Job",
            spec={},
            status={"conditions": [cond("Failed", "True", "BackoffLimitExceeded", "too many")]},
        ),
        "Failed",
        "too many",
        id="job-failed-condition",
    ),
    pytest.param(
        obj("batch/v1", "Job", spec={"backoffLimit": 1}, status={"startTime": "t", "failed": 2}),
        "Failed",
        "backoff limit is 1",
        id="job-beyond-backoff-limit",
    ),
    pytest.param(obj("batch/v1", "CronJob", spec={}), "Current", "", id="cronjob"),
    # storage, networking, namespaces, CRDs, PDBs
    pytest.param(
        obj("v1", "PersistentVolumeClaim", status={"phase": "Pending"}),
        "InProgress",
        "not bound: phase is Pending",
        id="pvc-pending",
    ),
    pytest.param(
        obj("v1", "PersistentVolumeClaim", status={"phase": "Bound"}),
        "Current",
        "bound",
        id="pvc-bound",
    ),
    pytest.param(
        obj("v1", "Service", spec={"type": "LoadBalancer"}, status={"loadBalancer": {}}),
        "InProgress",
        "no ingress address",
        id="service-lb-pending",
    ),
    pytest.param(
        obj(
            "v1",
            "Service",
            spec={"type": "LoadBalancer"},
            status={"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}},
        ),
        "Current",
        "ingress",
        id="service-lb-ready",
    ),
    pytest.param(
        obj("v1", "Service", spec={"type": "ClusterIP"}), "Current", "", id="service-clusterip"
    ),
    pytest.param(
        obj("v1", "Namespace", status={"phase": "Active"}),
        "Current",
        "active",
        id="namespace-active",
    ),
    pytest.param(
        obj("v1", "Namespace", status={"phase": "Terminating"}),
        "Terminating",
        "terminating",
        id="namespace-terminating",
    ),
    pytest.param(
        obj(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            status={"conditions": [cond("NamesAccepted", "True"), cond("Established", "True")]},
        ),
        "Current",
        "established",
        id="crd-established",
    ),
    pytest.param(
        obj(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            status={"conditions": [cond("Established", "False", "Installing")]},
        ),
        "InProgress",
        "not established",
        id="crd-installing",
    ),
    pytest.param(
        obj(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            status={"conditions": [cond("NamesAccepted", "False", "Conflict", "kind is taken")]},
        ),
        "Failed",
        "kind is taken",
        id="crd-names-conflict",
    ),
    pytest.param(
        obj(
            "policy/v1beta1",
            "PodDisruptionBudget",
            meta={"generation": 2},
            status={"observedGeneration": 2},
        ),
        "Current",
        "",
        id="pdb",
    ),
    pytest.param(obj("v1", "Secret"), "Current", "", id="secret"),
    pytest.param(obj("v1", "ServiceAccount"), "Current", "", id="serviceaccount"),
    pytest.param(
        obj("rbac.authorization.k8s.io/v1", "ClusterRole"), "Current", "", id="clusterrole"
    ),
]


@pytest.mark.parametrize(("o", "status", "message"), CASES)
def test_compute_status(o: Any, status: str, message: str) -> None:
    health = compute_status(o, now=NOW)
    assert health.status == status, health
    assert message in health.message, health


# -- wait_for_health against the API server -------------------------------------------


async def test_wait_ends_when_all_current(kube: KubeClient, namespace: str) -> None:
    await kube.create(CONFIG_MAP, {"metadata": {"name": "c", "namespace": namespace}})
    report = await wait_for_health(
        kube, [ObjectRef.to(CONFIG_MAP, "c", namespace)], timeout=5, interval=0.1
    )
    assert report.healthy and not report.timed_out, report


async def test_wait_times_out_naming_unhealthy_objects(kube: KubeClient, namespace: str) -> None:
    await kube.create(CONFIG_MAP, {"metadata": {"name": "c", "namespace": namespace}})
    await kube.create(DEPLOYMENT, deployment_manifest("web", namespace))
    report = await wait_for_health(
        kube,
        [
            ObjectRef.to(CONFIG_MAP, "c", namespace),
            ObjectRef.to(DEPLOYMENT, "web", namespace),
            ObjectRef.to(CONFIG_MAP, "missing", namespace),
        ],
        timeout=0.5,
        interval=0.1,
    )
    assert report.timed_out and not report.healthy
    text = report.summary()
    assert text.startswith("timeout waiting for health")
    assert f"Deployment/{namespace}/web: InProgress: Deployment is scaling up" in text
    assert f"ConfigMap/{namespace}/missing: NotFound" in text
    assert f"ConfigMap/{namespace}/c" not in text


async def test_wait_follows_a_rollout_to_current(kube: KubeClient, namespace: str) -> None:
    await kube.create(DEPLOYMENT, deployment_manifest("web", namespace))

    async def roll_out() -> None:
        # No controller-manager here: play the Deployment controller.
        await asyncio.sleep(0.3)
        await kube.merge_patch(
            DEPLOYMENT,
            "web",
            {
                "status": {
                    "observedGeneration": 1,
                    "replicas": 1,
                    "updatedReplicas": 1,
                    "readyReplicas": 1,
                    "availableReplicas": 1,
                    "conditions": [
                        {
                            **c,
                            "lastUpdateTime": "2026-01-01T00:00:00Z",
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                        }
                        for c in ROLLED_OUT
                    ],
                }
            },
            namespace=namespace,
            subresource="status",
        )

    task = asyncio.create_task(roll_out())
    report = await wait_for_health(
        kube, [ObjectRef.to(DEPLOYMENT, "web", namespace)], timeout=10, interval=0.1
    )
    await task
    assert report.healthy, report


async def test_failed_ends_the_wait_early(kube: KubeClient, namespace: str) -> None:
    await kube.create(DEPLOYMENT, deployment_manifest("web", namespace))
    await kube.merge_patch(
        DEPLOYMENT,
        "web",
        {
            "status": {
                "observedGeneration": 1,
                "conditions": [
                    {
                        **cond("Progressing", "False", "ProgressDeadlineExceeded", "too slow"),
                        "lastUpdateTime": "2026-01-01T00:00:00Z",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
            }
        },
        namespace=namespace,
        subresource="status",
    )
    started = time.monotonic()
    report = await wait_for_health(
        kube, [ObjectRef.to(DEPLOYMENT, "web", namespace)], timeout=30, interval=0.1
    )
    assert time.monotonic() - started < 5
    assert not report.timed_out and not report.healthy
    assert [o.health.status for o in report.failed] == ["Failed"]
    assert "health check failed" in report.summary()


async def test_cancel_stops_the_wait(kube: KubeClient, namespace: str) -> None:
    cancel = asyncio.Event()
    asyncio.get_running_loop().call_later(0.3, cancel.set)
    started = time.monotonic()
    report = await wait_for_health(
        kube, [ObjectRef.to(CONFIG_MAP, "never", namespace)], timeout=30, interval=5, cancel=cancel
    )
    assert time.monotonic() - started < 5
    assert report.cancelled and not report.timed_out and not report.healthy
    assert "wait cancelled" in report.summary()
    assert f"ConfigMap/{namespace}/never: NotFound" in report.summary()


async def test_known_readings_replace_the_first_read(kube: KubeClient, namespace: str) -> None:
    await kube.create(CONFIG_MAP, {"metadata": {"name": "later", "namespace": namespace}})
    gone = ObjectRef.to(CONFIG_MAP, "gone", namespace)
    later = ObjectRef.to(CONFIG_MAP, "later", namespace)
    before = kube.request_count
    report = await wait_for_health(
        kube,
        [gone, later],
        timeout=5,
        interval=0.1,
        # "gone" does not exist: it is healthy only because it is not read.
        known={gone: Health("Current", "as applied"), later: Health("InProgress", "as applied")},
    )
    assert report.healthy, report
    assert [o.health.message for o in report.objects] == [
        "as applied",
        "ConfigMap has no status to wait for",
    ]
    # Only the object that was not yet Current was read, once.
    assert kube.request_count - before == 1


async def test_a_reading_carries_the_version_it_read(kube: KubeClient, namespace: str) -> None:
    """What lets a wait tell a watch event it has already read from news."""
    created = await kube.create(CONFIG_MAP, {"metadata": {"name": "c", "namespace": namespace}})
    report = await check_health(
        kube,
        [ObjectRef.to(CONFIG_MAP, "c", namespace), ObjectRef.to(CONFIG_MAP, "gone", namespace)],
    )
    assert [o.resource_version for o in report.objects] == [
        created["metadata"]["resourceVersion"],
        "",
    ]


class Queries:
    """The query of every GET of one path, in order."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.seen: list[list[tuple[str, str]]] = []

    def requested(self, request: Request) -> None:
        if request.verb == "get" and request.path == self.path:
            self.seen.append(list(request.query))


@pytest.mark.parametrize(
    ("ahead", "reads"),
    [
        # As of the version a watch told of: served from the API server's watch cache.
        pytest.param(0, 1, id="as-of-the-watched-version"),
        # A version this server's cache has not reached (an API server behind the
        # one whose watch told of it): it answers 504 after a few seconds, and a
        # quorum read has the object.
        pytest.param(10**9, 2, id="a-version-the-cache-lacks-falls-back-to-a-quorum-read"),
    ],
)
async def test_a_reading_not_older_than_a_version(
    kube: KubeClient, namespace: str, ahead: int, reads: int
) -> None:
    created = await kube.create(CONFIG_MAP, {"metadata": {"name": "c", "namespace": namespace}})
    version = str(int(created["metadata"]["resourceVersion"]) + ahead)
    target = ObjectRef.to(CONFIG_MAP, "c", namespace)
    queries = Queries(CONFIG_MAP.path(namespace=namespace, name="c"))
    stop = kube.observe(queries)
    try:
        report = await check_health(kube, [target], not_older_than={target: version})
    finally:
        stop()
    assert report.healthy, report
    assert report.objects[0].resource_version == created["metadata"]["resourceVersion"]
    assert queries.seen == [[("resourceVersion", version)], []][:reads]
