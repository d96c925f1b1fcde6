"""Is an applied object done? kstatus rules, and a poller that waits for a set.

A Kustomization with `wait: true` (and the staged apply, for CRDs and
Namespaces) must tell "still rolling out" from "broken" from "ready" for any
kind. kstatus (sigs.k8s.io/cli-utils) is the shared vocabulary for that:
generic rules first (deletion, observedGeneration, the Stalled/Reconciling/
Ready conditions), then per-kind rules for built-ins whose controllers
predate those conditions. `compute_status` is a pure function over the
object dict so the rules are unit-tested as a table; `wait_for_health`
polls the API server.

Deliberate differences from kstatus: a Job is InProgress until it
completes (kstatus calls a started Job Current), a Pod in phase Failed is
Failed (kstatus: Current), a LoadBalancer Service needs an ingress address,
and a Namespace is judged by its phase.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeGuard

from sluice_api.meta import parse_time
from sluice_runtime.describing import describe
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import ApiError, ApiUnavailable, NotFound
from sluice_runtime.kube.resources import ObjectRef

Status = Literal["Current", "InProgress", "Failed", "Terminating", "NotFound", "Unknown"]

# A Pod may wait this long for a node before "Unschedulable" means Failed.
SCHEDULE_WINDOW = timedelta(seconds=15)


@dataclass(frozen=True, slots=True)
class Health:
    status: Status
    message: str

    @property
    def is_current(self) -> bool:
        return self.status == "Current"


def current(message: str) -> Health:
    return Health("Current", message)


def in_progress(message: str) -> Health:
    return Health("InProgress", message)


def failed(message: str) -> Health:
    return Health("Failed", message)


# -- field access -------------------------------------------------------------


def _get(obj: Mapping[str, Any], path: str, default: Any = None) -> Any:
    value: Any = obj
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return default
        value = value[key]
    return default if value is None else value


def _int(obj: Mapping[str, Any], path: str, default: int) -> int:
    value = _get(obj, path)
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return value


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    found: dict[str, Mapping[str, Any]] = {}
    for condition in _get(obj, "status.conditions", []) or []:
        if isinstance(condition, Mapping) and condition.get("type"):
            found.setdefault(str(condition["type"]), condition)
    return found


def _is(condition: Mapping[str, Any] | None, status: str) -> TypeGuard[Mapping[str, Any]]:
    return condition is not None and condition.get("status") == status


def _says(condition: Mapping[str, Any], fallback: str) -> str:
    """The condition's own words, which usually say more than we could."""
    message = str(condition.get("message") or "").strip()
    reason = str(condition.get("reason") or "").strip()
    return message or reason or fallback


# -- generic rules --------------------------------------------------------------


def compute_status(obj: Mapping[str, Any], *, now: datetime | None = None) -> Health:
    """The kstatus of one object as read from the API server (with its status).

    `now` is only consulted for a Pending Pod's scheduling grace period.
    """
    kind = str(obj.get("kind") or "Resource")
    if _get(obj, "metadata.deletionTimestamp"):
        return Health("Terminating", f"{kind} is being deleted")

    generation = _get(obj, "metadata.generation")
    observed = _get(obj, "status.observedGeneration")
    if generation is not None and observed is not None and observed != generation:
        return in_progress(
            f"{kind} generation {generation}, observed {observed}: "
            "its controller has not acted on the latest spec yet"
        )

    conditions = _conditions(obj)
    stalled = conditions.get("Stalled")
    if _is(stalled, "True"):
        return failed(_says(stalled, f"{kind} is stalled"))
    reconciling = conditions.get("Reconciling")
    if _is(reconciling, "True"):
        return in_progress(_says(reconciling, f"{kind} is reconciling"))

    rule = BUILT_IN.get(_group_kind(obj))
    if rule is not None:
        return rule(obj, now or datetime.now(UTC))

    ready = conditions.get("Ready")
    if ready is not None:
        if _is(ready, "True"):
            return current(_says(ready, f"{kind} is ready"))
        # Ready=False alone is not a failure: only Stalled says retrying cannot help.
        return in_progress(_says(ready, f"{kind} is not ready yet"))
    return current(f"{kind} is current")


def _group_kind(obj: Mapping[str, Any]) -> str:
    group = str(obj.get("apiVersion") or "").rpartition("/")[0]
    kind = str(obj.get("kind") or "")
    return f"{group}/{kind}" if group else kind


# -- built-in kinds ---------------------------------------------------------------

Rule = Callable[[Mapping[str, Any], datetime], Health]


def _always_current(obj: Mapping[str, Any], _now: datetime) -> Health:
    return current(f"{obj.get('kind')} has no status to wait for")


def _deployment(obj: Mapping[str, Any], _now: datetime) -> Health:
    conditions = _conditions(obj)
    progressing = conditions.get("Progressing")
    if progressing is not None and progressing.get("reason") == "ProgressDeadlineExceeded":
        return failed(
            "Deployment exceeded its progress deadline: "
            + _says(progressing, "ProgressDeadlineExceeded")
        )
    want = _int(obj, "spec.replicas", 1)
    have = _int(obj, "status.replicas", 0)
    updated = _int(obj, "status.updatedReplicas", 0)
    ready = _int(obj, "status.readyReplicas", 0)
    available = _int(obj, "status.availableReplicas", 0)
    if want > have:
        return in_progress(f"Deployment is scaling up: {have} of {want} replicas exist")
    if want > updated:
        return in_progress(f"Deployment rollout in progress: {updated} of {want} replicas updated")
    if have > want:
        return in_progress(
            f"Deployment rollout in progress: {have - want} old replicas pending termination"
        )
    if updated > available:
        return in_progress(
            f"Deployment does not have minimum availability: "
            f"{available} of {updated} replicas available"
        )
    if want > ready:
        return in_progress(f"Deployment has {ready} of {want} replicas ready")
    # With a progress deadline (the API's default) the controller reports the
    # finished rollout as Progressing=True/NewReplicaSetAvailable.
    deadline = _get(obj, "spec.progressDeadlineSeconds")
    if deadline is not None and not (
        _is(progressing, "True") and progressing.get("reason") == "NewReplicaSetAvailable"
    ):
        return in_progress("Deployment rollout in progress: new ReplicaSet is not available yet")
    if not _is(conditions.get("Available"), "True"):
        return in_progress(
            f"Deployment does not have minimum availability: "
            f"{available} of {want} replicas available"
        )
    return current(f"Deployment is available: {available} of {want} replicas")


def _statefulset(obj: Mapping[str, Any], _now: datetime) -> Health:
    if _get(obj, "spec.updateStrategy.type") == "OnDelete":
        return current("StatefulSet uses the OnDelete update strategy: pods are updated by hand")
    want = _int(obj, "spec.replicas", 1)
    have = _int(obj, "status.replicas", 0)
    ready = _int(obj, "status.readyReplicas", 0)
    current_ = _int(obj, "status.currentReplicas", 0)
    updated = _int(obj, "status.updatedReplicas", 0)
    partition = _int(obj, "spec.updateStrategy.rollingUpdate.partition", -1)
    if want > have:
        return in_progress(f"StatefulSet is scaling up: {have} of {want} replicas exist")
    if want > ready:
        return in_progress(f"StatefulSet has {ready} of {want} replicas ready")
    if have > want:
        return in_progress(
            f"StatefulSet is scaling down: {have - want} replicas pending termination"
        )
    if partition >= 0:
        target = max(want - partition, 0)
        if updated < target:
            return in_progress(
                f"StatefulSet partitioned rollout in progress: "
                f"{updated} of {target} replicas updated"
            )
        return current(f"StatefulSet partitioned rollout complete: {updated} replicas updated")
    if want > current_:
        return in_progress(
            f"StatefulSet rollout in progress: {current_} of {want} replicas current"
        )
    if _get(obj, "status.currentRevision", "") != _get(obj, "status.updateRevision", ""):
        return in_progress(
            "StatefulSet rollout in progress: current revision is not the update revision"
        )
    return current(f"StatefulSet is ready: {have} replicas")


def _daemonset(obj: Mapping[str, Any], _now: datetime) -> Health:
    # The DaemonSet controller always writes observedGeneration; without it
    # nothing has looked at the object yet.
    if _get(obj, "status.observedGeneration") is None:
        return in_progress("DaemonSet has not been observed by its controller yet")
    desired = _int(obj, "status.desiredNumberScheduled", -1)
    if desired < 0:
        return in_progress("DaemonSet has no desired number of pods yet")
    for path, what in (
        ("status.currentNumberScheduled", "scheduled"),
        ("status.updatedNumberScheduled", "updated"),
        ("status.numberAvailable", "available"),
        ("status.numberReady", "ready"),
    ):
        count = _int(obj, path, 0)
        if desired > count:
            return in_progress(f"DaemonSet has {count} of {desired} pods {what}")
    return current(f"DaemonSet is ready: {desired} pods")


def _replicaset(obj: Mapping[str, Any], _now: datetime) -> Health:
    failure = _conditions(obj).get("ReplicaFailure")
    if _is(failure, "True"):
        return in_progress("ReplicaSet cannot create pods: " + _says(failure, "ReplicaFailure"))
    want = _int(obj, "spec.replicas", 1)
    for path, what in (
        ("status.fullyLabeledReplicas", "labelled"),
        ("status.availableReplicas", "available"),
        ("status.readyReplicas", "ready"),
    ):
        count = _int(obj, path, 0)
        if want > count:
            return in_progress(f"ReplicaSet has {count} of {want} replicas {what}")
    have = _int(obj, "status.replicas", 0)
    if have > want:
        return in_progress(
            f"ReplicaSet is scaling down: {have - want} replicas pending termination"
        )
    return current(f"ReplicaSet is available: {have} replicas")


def _pod(obj: Mapping[str, Any], now: datetime) -> Health:
    phase = _get(obj, "status.phase", "")
    conditions = _conditions(obj)
    if phase == "Succeeded":
        return current("Pod has completed successfully")
    if phase == "Failed":
        reason = _get(obj, "status.message") or _get(obj, "status.reason") or "a container failed"
        return failed(f"Pod has failed: {reason}")
    if phase == "Running":
        if _is(conditions.get("Ready"), "True"):
            return current("Pod is ready")
        looping = [
            str(status.get("name"))
            for status in _get(obj, "status.containerStatuses", []) or []
            if _get(status, "state.waiting.reason") == "CrashLoopBackOff"
        ]
        if looping:
            return failed(f"Pod containers are crash-looping: {', '.join(looping)}")
        return in_progress("Pod is running but not ready")
    if phase == "Pending":
        scheduled = conditions.get("PodScheduled")
        if _is(scheduled, "False") and scheduled.get("reason") == "Unschedulable":
            created = _timestamp(_get(obj, "metadata.creationTimestamp"))
            if created is not None and now - created < SCHEDULE_WINDOW:
                return in_progress("Pod has not been scheduled yet")
            return failed("Pod cannot be scheduled: " + _says(scheduled, "Unschedulable"))
        return in_progress("Pod is pending")
    if not phase:
        return in_progress("Pod has no phase yet: no node has picked it up")
    return Health("Unknown", f"Pod is in unknown phase {phase!r}")


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def _job(obj: Mapping[str, Any], _now: datetime) -> Health:
    conditions = _conditions(obj)
    parallelism = _int(obj, "spec.parallelism", 1)
    completions = _int(obj, "spec.completions", parallelism)
    succeeded = _int(obj, "status.succeeded", 0)
    active = _int(obj, "status.active", 0)
    failures = _int(obj, "status.failed", 0)
    complete = conditions.get("Complete")
    if _is(complete, "True"):
        return current(f"Job has completed: {succeeded} of {completions} succeeded")
    job_failed = conditions.get("Failed")
    if _is(job_failed, "True"):
        return failed("Job has failed: " + _says(job_failed, f"{failures} pods failed"))
    backoff_limit = _int(obj, "spec.backoffLimit", 6)
    if failures > backoff_limit:
        return failed(f"Job has failed: {failures} pods failed, backoff limit is {backoff_limit}")
    if _is(conditions.get("Suspended"), "True"):
        return current("Job is suspended")
    if not _get(obj, "status.startTime"):
        return in_progress("Job has not started yet")
    return in_progress(
        f"Job has not completed: {succeeded} of {completions} succeeded, "
        f"{active} active, {failures} failed"
    )


def _pvc(obj: Mapping[str, Any], _now: datetime) -> Health:
    phase = _get(obj, "status.phase", "")
    if phase == "Bound":
        return current("PersistentVolumeClaim is bound")
    return in_progress(f"PersistentVolumeClaim is not bound: phase is {phase or 'not set'}")


def _service(obj: Mapping[str, Any], _now: datetime) -> Health:
    if _get(obj, "spec.type") == "LoadBalancer":
        if not _get(obj, "status.loadBalancer.ingress"):
            return in_progress("Service of type LoadBalancer has no ingress address yet")
        return current("Service load balancer has an ingress address")
    return current("Service is ready")


def _namespace(obj: Mapping[str, Any], _now: datetime) -> Health:
    phase = _get(obj, "status.phase", "")
    if phase == "Active":
        return current("Namespace is active")
    if phase == "Terminating":
        return Health("Terminating", "Namespace is terminating")
    return in_progress(f"Namespace is not active: phase is {phase or 'not set'}")


def _crd(obj: Mapping[str, Any], _now: datetime) -> Health:
    conditions = _conditions(obj)
    names = conditions.get("NamesAccepted")
    if _is(names, "False"):
        return failed("CustomResourceDefinition names not accepted: " + _says(names, "conflict"))
    established = conditions.get("Established")
    if _is(established, "True"):
        if names is None or _is(names, "True"):
            return current("CustomResourceDefinition is established")
        return in_progress("CustomResourceDefinition names are not accepted yet")
    if _is(established, "False") and established.get("reason") not in (None, "", "Installing"):
        return failed("CustomResourceDefinition is not established: " + _says(established, ""))
    return in_progress("CustomResourceDefinition is not established yet")


def _pdb(obj: Mapping[str, Any], _now: datetime) -> Health:
    # The generic observedGeneration rule already waited for the controller.
    return current("PodDisruptionBudget is current")


BUILT_IN: dict[str, Rule] = {
    "apps/Deployment": _deployment,
    "extensions/Deployment": _deployment,
    "apps/StatefulSet": _statefulset,
    "apps/DaemonSet": _daemonset,
    "extensions/DaemonSet": _daemonset,
    "apps/ReplicaSet": _replicaset,
    "extensions/ReplicaSet": _replicaset,
    "Pod": _pod,
    "batch/Job": _job,
    "batch/CronJob": _always_current,
    "PersistentVolumeClaim": _pvc,
    "Service": _service,
    "Namespace": _namespace,
    "apiextensions.k8s.io/CustomResourceDefinition": _crd,
    "policy/PodDisruptionBudget": _pdb,
    "ConfigMap": _always_current,
    "Secret": _always_current,
    "ServiceAccount": _always_current,
    "rbac.authorization.k8s.io/Role": _always_current,
    "rbac.authorization.k8s.io/RoleBinding": _always_current,
    "rbac.authorization.k8s.io/ClusterRole": _always_current,
    "rbac.authorization.k8s.io/ClusterRoleBinding": _always_current,
}


# -- waiting ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ObjectHealth:
    subject: str
    health: Health

    def __str__(self) -> str:
        return f"{self.subject}: {self.health.status}: {self.health.message}"


@dataclass(frozen=True, slots=True)
class HealthReport:
    """The last reading of every object, and why the wait ended."""

    objects: list[ObjectHealth] = field(default_factory=list)
    timed_out: bool = False
    cancelled: bool = False

    @property
    def healthy(self) -> bool:
        return all(o.health.is_current for o in self.objects) and not self.cancelled

    @property
    def unhealthy(self) -> list[ObjectHealth]:
        return [o for o in self.objects if not o.health.is_current]

    @property
    def failed(self) -> list[ObjectHealth]:
        return [o for o in self.objects if o.health.status == "Failed"]

    def summary(self) -> str:
        if self.healthy:
            return f"{len(self.objects)} objects are healthy"
        if self.cancelled:
            why = "wait cancelled"
        elif self.timed_out:
            why = "timeout waiting for health"
        else:
            why = "health check failed"
        return "\n".join([f"{why}:", *(str(o) for o in self.unhealthy)])

    def __str__(self) -> str:
        return self.summary()


StatusRule = Callable[[Mapping[str, Any]], Health]


async def read_health(
    client: KubeClient, target: ObjectRef, status: StatusRule = compute_status
) -> ObjectHealth:
    """One reading of `target`; `status` judges it (kstatus unless a caller has its own rules)."""
    rt, subject = target.rt, target.display
    try:
        obj = await client.get(rt, target.name, target.namespace)
    except NotFound:
        return ObjectHealth(subject, Health("NotFound", f"{rt.kind} not found"))
    except (ApiError, ApiUnavailable) as error:
        # A 403 or a blip is not a verdict on the object; keep polling.
        return ObjectHealth(subject, Health("Unknown", f"cannot read {rt.kind}: {describe(error)}"))
    obj.setdefault("kind", rt.kind)
    obj.setdefault("apiVersion", rt.api_version)
    return ObjectHealth(subject, status(obj))


async def wait_for_health(
    client: KubeClient,
    objects: Sequence[ObjectRef],
    *,
    timeout: float,
    interval: float = 2.0,
    cancel: asyncio.Event | None = None,
    concurrency: int = 8,
    clock: Callable[[], float] = time.monotonic,
    on_waiting: Callable[[], Awaitable[None]] | None = None,
    known: Mapping[ObjectRef, Health] | None = None,
    status: StatusRule = compute_status,
    first_interval: float | None = None,
) -> HealthReport:
    """Poll until every object is Current, one is Failed, `timeout` passes or `cancel` is set.

    Failed ends the wait at once: waiting cannot fix what kstatus calls
    Failed. NotFound counts as unhealthy (it may still be on its way).
    `on_waiting` runs once, when the first reading shows there is something
    to wait for (a caller reports progress then, not for instant successes).
    `known` holds first readings the caller already has (the API's answers to
    an apply): those objects are not read in the first round. `status` judges
    each reading (kstatus by default; custom health checks replace it).
    `first_interval` starts the polling sooner, doubling up to `interval`: most
    objects that are not Current in the apply's answer are a moment later,
    and a reconcile should not hold its worker for a whole interval then.
    """
    limit = asyncio.Semaphore(max(concurrency, 1))

    async def read(target: ObjectRef) -> ObjectHealth:
        async with limit:
            return await read_health(client, target, status)

    deadline = clock() + timeout
    results: dict[ObjectRef, ObjectHealth] = {
        t: ObjectHealth(t.display, known[t]) for t in objects if known and t in known
    }
    unread = [t for t in objects if t not in results]
    delay = min(first_interval, interval) if first_interval else interval
    while True:
        if cancel is not None and cancel.is_set():
            return HealthReport([results.get(t) or _unread(t) for t in objects], cancelled=True)
        readings = await asyncio.gather(*(read(t) for t in unread))
        results.update(zip(unread, readings, strict=True))
        # Current objects are not read again: a rollout that finished stays finished
        # for the purpose of this wait, and it halves the requests of big sets.
        pending = [t for t in objects if not results[t].health.is_current]
        report = [results[t] for t in objects]
        if not pending or any(r.health.status == "Failed" for r in report):
            return HealthReport(report)
        remaining = deadline - clock()
        if remaining <= 0:
            return HealthReport(report, timed_out=True)
        if on_waiting is not None:
            await on_waiting()
            on_waiting = None
        await _sleep_or_cancel(min(delay, remaining), cancel)
        delay = min(delay * 2, interval)
        unread = pending


def _unread(target: ObjectRef) -> ObjectHealth:
    return ObjectHealth(target.display, Health("Unknown", "not read yet"))


async def _sleep_or_cancel(seconds: float, cancel: asyncio.Event | None) -> None:
    if cancel is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(cancel.wait(), timeout=seconds)
