"""Step 10 of a Kustomization: waiting for what it applied (`wait`) or named
(`healthChecks`) to become healthy, by kstatus rules or `healthCheckExprs`.

A new source revision ends a long wait, so that it is reconciled instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from datetime import timedelta

from kustomize_controller.context import Condition, KustomizationContext, Reason
from sluice_api.meta import format_duration
from sluice_runtime.kube.discovery import UnknownKind
from sluice_runtime.kube.health import Health, wait_for_health
from sluice_runtime.kube.resources import ObjectRef
from sluice_runtime.reconciling.errors import StepError, Waiting
from sluice_runtime.reconciling.steps import Result, step

FIRST_POLL = 0.25
"""Seconds before the first read of what the apply's answer did not show Current
(then doubling up to the health interval)."""
PROGRESS_AFTER = 2.0
"""A health wait longer than this shows Reconciling ("Running health checks")."""


@step(Condition.HEALTHY)
async def reconcile_health(ctx: KustomizationContext) -> Result | None:
    targets, known = await _health_targets(ctx)
    if not targets:
        return None
    assert ctx.manager is not None and ctx.artifact is not None
    timeout = ctx.timeout
    revision = ctx.artifact.revision

    progress: list[asyncio.Task[None]] = []
    patches: list[asyncio.Future[None]] = []

    async def publish_progress() -> None:
        await asyncio.sleep(PROGRESS_AFTER)
        # Once sent, the patch is waited for, never cancelled: a cancelled request can
        # still reach the API server after this reconcile's final status patch and
        # leave "Running health checks" (Ready=Unknown) standing until the next
        # interval (seen in a 300-app MTTP run: one Kustomization stuck for 5 minutes).
        patch = asyncio.ensure_future(
            ctx.progress(
                f"Running health checks for revision '{revision}' "
                f"with a timeout of {format_duration(timedelta(seconds=timeout))}"
            )
        )
        patches.append(patch)
        await asyncio.shield(patch)

    async def show_progress() -> None:
        # Reconciling is shown only for waits that last: a rollout done a
        # moment after the apply costs no extra status patch.
        progress.append(asyncio.create_task(publish_progress(), name="health-progress"))

    cancel = asyncio.Event()
    try:
        with _cancel_on_new_revision(ctx, cancel):
            report = await wait_for_health(
                ctx.manager.client,
                targets,
                timeout=timeout,
                interval=ctx.services.health_interval,
                first_interval=FIRST_POLL,
                cancel=cancel,
                on_waiting=show_progress,
                known=known,
                status=ctx.health_rules.status,
            )
    finally:
        for task in progress:
            if not task.done():
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for patch in patches:
            await patch  # landed before the final status patch is sent
    if report.cancelled:
        raise Waiting(
            Reason.PROGRESSING,
            "a new source revision arrived while waiting for health checks",
            requeue_after=0,
        )
    if not report.healthy:
        raise StepError(
            Reason.HEALTH_CHECK_FAILED,
            ("health check timed out: " if report.timed_out else "health check failed: ")
            + report.summary(),
            condition=Condition.HEALTHY,
            requeue_after=ctx.retry_after,
        )
    ctx.conditions.mark_true(Condition.HEALTHY, Reason.SUCCEEDED, "Health check passed")
    return None


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


@contextlib.contextmanager
def _cancel_on_new_revision(ctx: KustomizationContext, cancel: asyncio.Event) -> Iterator[None]:
    """A new artifact of our source ends a long health wait: reconcile it instead."""
    assert ctx.source_key is not None and ctx.artifact is not None
    kind, key = ctx.source_key
    store = ctx.services.sources[kind]
    revision = ctx.artifact.revision

    async def watch() -> None:
        while not cancel.is_set():
            current = ((store.get(key) or {}).get("status") or {}).get("artifact") or {}
            if current.get("revision") not in (None, revision):
                cancel.set()
            await asyncio.sleep(0.2)

    task = asyncio.get_running_loop().create_task(watch(), name="health-cancel-watch")
    try:
        yield
    finally:
        task.cancel()
