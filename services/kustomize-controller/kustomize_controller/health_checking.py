"""Step 10 of a Kustomization: waiting for what it applied (`wait`) or named
(`healthChecks`) to become healthy, by kstatus rules or `healthCheckExprs`.

The wait does not hold a worker. The reconcile that applied reads once what
the apply's answers did not already show; if something is still on its way,
it ends as waiting and the Kustomization is looked at again shortly (0.5 s,
doubling up to the health interval, never past `spec.timeout`), or at once
when the applied-object watch sees one of the objects waited for change
(`HealthWait.moved`). That re-check (`reconcile_health_recheck`) continues
the same wait: it only reads what is not Current yet, without building,
dry-running or applying again, and ends as the wait would have: Ready, or
HealthCheckFailed once an object is Failed or the timeout has passed. Its
requeue goes ahead of first reconciles (`Lane.FOLLOW_UP`): it is what turns
an applied app Ready. Anything that would have interrupted a blocking wait
(a new source revision, a spec change, a requested reconcile) makes the next
reconcile a full one instead.

Status, as Flux shows it: Reconciling=True and Ready=Unknown "Running health
checks for revision ... with a timeout of ...", once the wait has lasted
`Services.health_progress_after`; a rollout done sooner costs no status
patch of its own, as with the blocking wait before (the reconcile that
applied leaves status to the re-check that ends the wait, inventory
included). Until status shows the wait, the inventory lives in
`HealthWait.inventory`: a full reconcile that replaces the wait, and a
deletion, start from it; a restart forgets it, which costs one full
reconcile, as a restart during a blocking wait did.
"""

from __future__ import annotations

import time
from datetime import timedelta

from kustomize_controller.applying import reconcile_target
from kustomize_controller.context import Condition, HealthWait, KustomizationContext, Reason
from sluice_api.meta import RECONCILE_REQUESTED_AT_ANNOTATION, format_duration
from sluice_runtime.kube.discovery import UnknownKind
from sluice_runtime.kube.health import Health, HealthReport, check_health
from sluice_runtime.kube.resources import ObjectRef
from sluice_runtime.reconciling.errors import StepError, Waiting
from sluice_runtime.reconciling.steps import Result, done, step

FIRST_RECHECK = 0.5
"""Seconds before the first re-check of what the apply's answer did not show Current
(then doubling up to the health interval)."""


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
    wait = HealthWait(
        fingerprint=_fingerprint(ctx),
        targets=targets,
        started=now,
        deadline=now + ctx.timeout,
        delay=FIRST_RECHECK,
        inventory=ctx.obj.status.inventory,
        applied_versions=ctx.changeset.versions(),
    )
    await _judge(ctx, wait, known)
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
    # The reads go to the target cluster as the tenant, as the apply's did.
    await reconcile_target(ctx)
    ctx.conditions.delete(Condition.HEALTHY)
    await _judge(ctx, wait, wait.current)
    ctx.applied()
    return done()


async def _judge(
    ctx: KustomizationContext, wait: HealthWait, known: dict[ObjectRef, Health]
) -> None:
    """Read what `known` does not show; mark Healthy, or raise: Waiting to look again,
    StepError when an object Failed or the wait timed out."""
    assert ctx.manager is not None and ctx.artifact is not None
    waits = ctx.services.health_waits
    wait.nudged = False
    report = await check_health(
        ctx.manager.client,
        wait.targets,
        known=known,
        status=ctx.health_rules.status,
        concurrency=ctx.manager.concurrency,
    )
    if report.healthy:
        waits.pop(ctx.key, None)
        ctx.conditions.mark_true(Condition.HEALTHY, Reason.SUCCEEDED, "Health check passed")
        return
    now = time.monotonic()
    remaining = wait.deadline - now
    if report.failed or remaining <= 0:
        waits.pop(ctx.key, None)
        raise _failed(ctx, HealthReport(report.objects, timed_out=not report.failed))
    wait.current = {
        target: reading.health
        for target, reading in zip(wait.targets, report.objects, strict=True)
        if reading.health.is_current
    }
    # A change seen while reading may be the one waited for: no need to sleep on it.
    delay = 0.0 if wait.nudged else min(wait.delay, remaining)
    wait.delay = min(wait.delay * 2, max(ctx.services.health_interval, FIRST_RECHECK))
    wait.shown = wait.shown or now - wait.started >= ctx.services.health_progress_after
    waits[ctx.key] = wait
    raise Waiting(
        Reason.PROGRESSING,
        f"Running health checks for revision '{ctx.artifact.revision}' "
        f"with a timeout of {format_duration(timedelta(seconds=ctx.timeout))}",
        requeue_after=delay,
        in_progress=True,
        publish=wait.shown,
    )


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
