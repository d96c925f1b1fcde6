"""Step 10 of a Kustomization: waiting for what it applied (`wait`) or named
(`healthChecks`) to become healthy, by kstatus rules or `healthCheckExprs`.

The wait does not hold a worker. The reconcile that applied reads only what
the apply's answers did not show (objects it did not apply, kinds judged by
expressions, objects without a reading): an answer a few milliseconds old is
the very state a read would find. If something is still on its way, it
ends as waiting, and the wait is continued by re-checks
(`reconcile_health_recheck`) that only read, without building, dry-running
or applying again, and end as the wait would have: Ready, or
HealthCheckFailed once an object is Failed or the timeout has passed. Their
requeue goes ahead of first reconciles (`Lane.FOLLOW_UP`): it is what turns
an applied app Ready. Anything that would have interrupted a blocking wait
(a new source revision, a spec change, a requested reconcile) makes the next
reconcile a full one instead.

What triggers a re-check, and what it reads, depends on whether the
applied-object watch (`watching_applied`) tells of the objects waited for,
i.e. they are in the local cluster, this Kustomization applied them, and the
watch of their kind is synced:

- Watched: the watch is the signal. A change to an object waited for, past
  the resourceVersion of its latest reading, queues a re-check that reads
  that object (`HealthWait.moved`); so does a change the watch saw before
  the wait was registered or while a re-check read, found by comparing the
  watch's versions with the readings' when the wait is (re-)registered
  (`HealthWait.next_recheck`). Nothing is read on a timer but a fallback,
  in case the watch missed a change: every object not Current is read
  `Services.health_fallback` (5 s) after the apply, then at doubling gaps
  up to `FALLBACK_LONGEST` times that (20 s), and at the timeout. A watch misses changes
  only across a relist (its connection lost for longer than the API
  server keeps history), which is rare; 5 s lets most rollouts under load
  (2-4 s in the 1000-app MTTP run) end on the watch's word alone, and 20 s
  bounds how long a wait outlives a rollout the watch missed. A rollout
  the watch sees finish costs one GET of the object that was not Current,
  with the resourceVersion the watch told of ("not older than"): the API
  server answers it from its watch cache instead of a quorum read through
  etcd (a GET without one), 1.20 as 1.30 and later.
- Not watched (another cluster through `kubeConfig`, a kind the watch was
  refused or has not listed yet, an object another Kustomization applied):
  the objects are polled, 0.5 s after the apply, doubling up to the health
  interval, never past `spec.timeout`.

Each re-check decides again, so a wait that starts before its kind's watch
has listed moves from polling to the watch.

Status, as Flux shows it: Reconciling=True and Ready=Unknown "Running health
checks for revision ... with a timeout of ...", once the wait has lasted
`Services.health_progress_after` (2 s), written by the first re-check after
that: the poll's (3.5 s in), and a watched wait is re-checked at that same
moment to be shown (`polled_after`), reading nothing the watch has not seen
change. Not sooner: in the 1000-app MTTP run most rollouts end between 2
and 3.5 s, and showing each of those waits would cost a status write. A
rollout done sooner costs no status patch of its own, as with the blocking
wait before (the reconcile that applied leaves status to the re-check that
ends the wait, inventory included); one that takes longer costs one.
Until status shows the wait, the inventory lives in `HealthWait.inventory`:
a full reconcile that replaces the wait, and a deletion, start from it; a
restart forgets it, which costs one full reconcile, as a restart during a
blocking wait did.
"""

from __future__ import annotations

import time
from datetime import timedelta

from kustomize_controller.applying import reconcile_target
from kustomize_controller.context import (
    Condition,
    HealthWait,
    KustomizationContext,
    Live,
    Reason,
)
from sluice_api.meta import RECONCILE_REQUESTED_AT_ANNOTATION, format_duration
from sluice_runtime.kube.discovery import UnknownKind
from sluice_runtime.kube.health import Health, HealthReport, check_health, compute_status
from sluice_runtime.kube.resources import ObjectRef
from sluice_runtime.reconciling.errors import StepError, Waiting
from sluice_runtime.reconciling.steps import Result, done, step

FIRST_RECHECK = 0.5
"""Seconds before the first timed re-check while an object waited for is not watched
(then doubling up to the health interval)."""
FALLBACK_LONGEST = 4
"""The longest gap between a watched wait's fallback reads, in first gaps
(`Services.health_fallback`, doubling)."""


def _fingerprint(ctx: KustomizationContext) -> tuple[str, ...]:
    assert ctx.artifact is not None
    meta = ctx.raw.get("metadata") or {}
    requested = (meta.get("annotations") or {}).get(RECONCILE_REQUESTED_AT_ANNOTATION)
    return (
        str(meta.get("uid") or ""),
        str(meta.get("generation") or ""),
        ctx.artifact.revision,
        ctx.artifact.digest or "",
        str(requested or ""),
    )


@step(Condition.HEALTHY)
async def reconcile_health(ctx: KustomizationContext) -> Result | None:
    ctx.services.health_waits.pop(ctx.key, None)
    targets, known = await _health_targets(ctx)
    if not targets:
        return None
    now = time.monotonic()
    fallback = ctx.services.health_fallback
    applied = ctx.changeset.versions()
    wait = HealthWait(
        fingerprint=_fingerprint(ctx),
        targets=targets,
        started=now,
        deadline=now + ctx.timeout,
        delay=FIRST_RECHECK,
        inventory=ctx.obj.status.inventory,
        applied_versions=applied,
        read_versions=dict(applied),
        current={t: h for t, h in known.items() if h.is_current},
        pending={t: h for t, h in known.items() if not h.is_current},
        read_due=now + fallback,
        gap=fallback * 2,
        show_at=now
        + polled_after(ctx.services.health_progress_after, ctx.services.health_interval),
    )
    # The apply's answers are readings a few milliseconds old: only what they
    # did not show is read now; the rest waits for the watch (or the timer).
    await _judge(ctx, wait, read=[t for t in targets if t not in known])
    return None


@step()
async def reconcile_health_recheck(ctx: KustomizationContext) -> Result | None:
    """Continue a health wait a previous reconcile started, if nothing changed since;
    ends the reconcile (the apply, prune and status steps have nothing to add)."""
    wait = ctx.services.health_waits.get(ctx.key)
    if wait is None:
        return None
    # Status shows what the apply left only once the wait is shown; until then
    # this reconcile carries it, whether it continues the wait or replaces it.
    ctx.obj.status.inventory = wait.inventory
    if wait.fingerprint != _fingerprint(ctx):
        del ctx.services.health_waits[ctx.key]
        return None
    wait.judging = True
    try:
        # The reads go to the target cluster as the tenant, as the apply's did.
        await reconcile_target(ctx)
        ctx.conditions.delete(Condition.HEALTHY)
        live = _live(ctx, wait)
        # What the watch saw change is read as of that change or later: from the
        # API server's watch cache, not a quorum read through etcd. The fallback's
        # and the poll's reads, where the watch told of nothing, stay quorum reads.
        seen = {t: str(live[t]) for t in wait.changed(live)}
        await _judge(ctx, wait, read=wait.to_read(live, now=time.monotonic()), seen=seen)
    finally:
        wait.judging = False
    ctx.applied()
    return done()


async def _judge(
    ctx: KustomizationContext,
    wait: HealthWait,
    *,
    read: list[ObjectRef],
    seen: dict[ObjectRef, str] | None = None,
) -> None:
    """Read `read` (the other objects' latest readings stand; those in `seen` as of
    the resourceVersion the watch told of, or later); mark Healthy, or raise:
    Waiting to look again, StepError when an object Failed or the wait timed out."""
    assert ctx.manager is not None and ctx.artifact is not None
    services = ctx.services
    readings = {**wait.current, **wait.pending}
    due = time.monotonic() >= wait.read_due and set(wait.pending) <= set(read)
    report = await check_health(
        ctx.manager.client,
        wait.targets,
        known={t: h for t, h in readings.items() if t not in read},
        # kstatus itself unless there are CEL rules, which read_health runs off the loop.
        status=ctx.health_rules.status if ctx.health_rules else compute_status,
        concurrency=ctx.manager.concurrency,
        not_older_than=seen,
    )
    if report.healthy:
        services.health_waits.pop(ctx.key, None)
        ctx.conditions.mark_true(Condition.HEALTHY, Reason.SUCCEEDED, "Health check passed")
        return
    now = time.monotonic()
    if report.failed or now >= wait.deadline:
        services.health_waits.pop(ctx.key, None)
        raise _failed(ctx, HealthReport(report.objects, timed_out=not report.failed))
    wait.current, wait.pending = {}, {}
    for target, reading in zip(wait.targets, report.objects, strict=True):
        (wait.current if reading.health.is_current else wait.pending)[target] = reading.health
        if reading.resource_version:
            wait.read_versions[target.id] = reading.resource_version
    if due:
        longest = services.health_fallback * FALLBACK_LONGEST
        wait.read_due, wait.gap = now + wait.gap, min(wait.gap * 2, longest)
    wait.shown = wait.shown or now - wait.started >= services.health_progress_after
    # Registered and checked against the watch in one go (no await between): a
    # change the watch saw before, or while this read, is not lost.
    services.health_waits[ctx.key] = wait
    live = _live(ctx, wait)
    delay = wait.next_recheck(live, now=now)
    if not wait.watched(live):
        wait.delay = _next_poll(wait.delay, services.health_interval)
    raise Waiting(
        Reason.PROGRESSING,
        f"Running health checks for revision '{ctx.artifact.revision}' "
        f"with a timeout of {format_duration(timedelta(seconds=ctx.timeout))}",
        requeue_after=delay,
        in_progress=True,
        publish=wait.shown,
    )


def polled_after(seconds: float, interval: float) -> float:
    """The first moment the poll (FIRST_RECHECK, doubling up to `interval`) re-checks a
    wait `seconds` or more in: when a wait is shown, polled or watched."""
    at, delay = 0.0, FIRST_RECHECK
    while at < seconds:
        at += delay
        delay = _next_poll(delay, interval)
    return at


def _next_poll(delay: float, interval: float) -> float:
    """The poll's gap after `delay`: doubling, up to the health interval."""
    return min(delay * 2, max(interval, FIRST_RECHECK))


def _live(ctx: KustomizationContext, wait: HealthWait) -> Live:
    """What the applied-object watch knows of the objects not Current yet."""
    assert ctx.manager is not None
    watch = ctx.manager.live  # None for another cluster
    live: dict[ObjectRef, str | None] = {}
    for target in wait.targets:
        if target in wait.current:
            continue
        versions = None
        # Only what this Kustomization applied carries its labels: the watch
        # tells it of nothing else.
        if watch is not None and target.id in wait.applied_versions:
            versions = watch.versions(target.rt, target.namespace or "")
        live[target] = None if versions is None else versions.get(target.name, "")
    return live


def _failed(ctx: KustomizationContext, report: HealthReport) -> StepError:
    return StepError(
        Reason.HEALTH_CHECK_FAILED,
        ("health check timed out: " if report.timed_out else "health check failed: ")
        + report.summary(),
        condition=Condition.HEALTHY,
        requeue_after=ctx.retry_after,
    )


async def _health_targets(
    ctx: KustomizationContext,
) -> tuple[list[ObjectRef], dict[ObjectRef, Health]]:
    """What to wait for (everything applied with `wait`, else `healthChecks`), and the
    health the apply already showed of it."""
    assert ctx.manager is not None
    if ctx.obj.spec.wait:
        refs = ctx.changeset.health_refs()
        return refs, _without_custom(ctx, ctx.changeset.observed(refs))
    mapper = ctx.manager.mapper
    targets: list[ObjectRef] = []
    for check in ctx.obj.spec.health_checks or []:
        try:
            # v1beta1 health checks may name only a kind (`kind: Deployment`).
            rt = await (
                mapper.resource_for(check.api_version, check.kind)
                if check.api_version
                else mapper.resource_for_any_group(check.kind)
            )
        except UnknownKind as error:
            raise ctx.failed(Reason.HEALTH_CHECK_FAILED, str(error)) from None
        targets.append(ObjectRef.to(rt, check.name, check.namespace or ctx.obj.namespace))
    return targets, _without_custom(ctx, ctx.changeset.observed(targets))


def _without_custom(
    ctx: KustomizationContext, known: dict[ObjectRef, Health]
) -> dict[ObjectRef, Health]:
    """The apply's readings were judged by kstatus; kinds with expressions are read again."""
    rules = ctx.health_rules
    return {r: h for r, h in known.items() if not rules.covers(r.rt.api_version, r.rt.kind)}
