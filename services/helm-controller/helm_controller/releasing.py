"""The release step: decide whether anything changed, then install or upgrade.

It reads the release history from Helm's own storage Secrets, decides
whether anything changed (chart version, config digest, generation,
forceAt/resetAt) and only then runs `helm install` or `helm upgrade` (then
`helm test` when enabled); failures are counted and remediated
(`remediating`) until the retries are exhausted, which stalls. A steady
release (nothing to install or upgrade) is checked for drift instead, when
`driftDetection` asks (`drifting`).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from helm_controller import correcting, deciding
from helm_controller.contexts import (
    HelmReleaseContext,
    announce,
    duration,
    helm,
    history,
    record_action_duration,
    record_history,
    wait_args,
)
from helm_controller.crds import apply_crds
from helm_controller.deciding import Next
from helm_controller.remediating import (
    count_failure,
    ignore_test_failures,
    reinstall,
    retries_of,
    run_tests,
)
from sluice_api.helm import (
    FORCE_REQUESTED_AT_ANNOTATION,
    RESET_REQUESTED_AT_ANNOTATION,
    HelmReleaseCondition,
    HelmReleaseReason,
    HelmReleaseStatus,
    Snapshot,
)
from sluice_runtime.helming import HelmError, postrendering
from sluice_runtime.reconciling.errors import Stalling
from sluice_runtime.reconciling.steps import Result, step

Condition = HelmReleaseCondition
Reason = HelmReleaseReason


ATTEMPT_FIELDS = (
    "last_attempted_generation",
    "last_attempted_revision",
    "last_attempted_revision_digest",
    "last_attempted_config_digest",
    "last_attempted_release_action",
    "last_handled_force_at",
    "last_handled_reset_at",
    "failures",
    "install_failures",
    "upgrade_failures",
)
"""Status fields that decide whether the next reconcile runs helm."""


# Released, Remediated and TestSuccess describe the last release action and must
# survive steady-state reconciles, so this step manages them itself.
@step()
async def reconcile_release(ctx: HelmReleaseContext) -> Result | None:
    """Decide and run the release action, from the freshest record of the last attempt.

    The informer cache can lag this process's own last status write (a
    reconcile queued by a HelmChart event runs as soon as the previous one
    ends); read from it, the last attempt would look undone and a steady
    release would be upgraded again. This process is the only writer of
    these fields, so its own memory of them is never older than the cache.
    """
    status = ctx.obj.status
    uid = ctx.obj.metadata.uid or ctx.obj.key
    remembered = ctx.services.attempts.get(uid)
    if remembered is not None:
        for name, value in remembered.items():
            if name in ATTEMPT_FIELDS:
                setattr(status, name, value)
        # The conditions that tell the last action's story are as fresh as the
        # fields: a stalled install must keep naming why it failed.
        ctx.conditions.delete(*RELEASE_CONDITIONS)
        for kept in remembered.get(_CONDITIONS) or []:
            ctx.conditions.set(kept.type, kept.status, kept.reason, kept.message)
    try:
        return await _release(ctx)
    finally:
        memory = {name: getattr(status, name) for name in ATTEMPT_FIELDS}
        memory[_CONDITIONS] = [
            c for t in RELEASE_CONDITIONS if (c := ctx.conditions.get(t)) is not None
        ]
        ctx.services.attempts[uid] = memory


_CONDITIONS = "conditions"
RELEASE_CONDITIONS = (Condition.RELEASED, Condition.TEST_SUCCESS, Condition.REMEDIATED)


async def _release(ctx: HelmReleaseContext) -> Result | None:
    hr = ctx.obj
    status = hr.status
    generation = hr.metadata.generation or 0
    assert ctx.artifact is not None and ctx.chart_dir is not None
    chart = f"{ctx.chart_meta.get('name')}@{ctx.chart_meta.get('version')}"

    found = await history(ctx)  # read once: the decision's and the status's
    record_history(ctx, found)
    latest = found[0][1] if found else None
    decision = deciding.decide(wanted(ctx), attempt(status), latest)
    if decision.clear_failures:
        status.failures = status.install_failures = status.upgrade_failures = None
    if decision.handled_reset_at is not None:
        status.last_handled_reset_at = decision.handled_reset_at
    if decision.handled_force_at is not None:
        status.last_handled_force_at = decision.handled_force_at

    if decision.next is Next.RETRIES_EXHAUSTED:
        released = ctx.conditions.get(Condition.RELEASED)
        tested = ctx.conditions.get(Condition.TEST_SUCCESS)
        last = next(
            (c.message for c in (tested, released) if c is not None and c.status == "False"),
            "",
        )
        raise Stalling(
            Reason.RETRIES_EXCEEDED,
            f"Failed to {decision.action} after {decision.failures} attempt(s)"
            + (f": {last}" if last else ""),
        )
    if decision.next is Next.TEST_FAILED:
        assert latest is not None
        raise Stalling(
            Reason.TEST_FAILED,
            f"Helm test failed for release {latest.namespace}/{latest.name}.v{latest.version}"
            f": {', '.join(decision.failed_tests)}",
        )
    if decision.next is Next.STEADY:
        # Nothing to release. Keep Released as it was and check for drift.
        assert latest is not None
        ctx.ready_reason = _kept_reason(ctx)
        ctx.ready_message = _release_message(ctx, latest, "succeeded", chart=chart)
        ctx.conditions.mark_true(Condition.RELEASED, ctx.ready_reason, ctx.ready_message)
        await correcting.check_drift(ctx, found[0][0], latest)
        return None
    if decision.next is Next.REINSTALL:
        await reinstall(ctx, chart=chart)
    action = "upgrade" if decision.next is Next.UPGRADE else "install"

    status.last_attempted_generation = generation
    status.last_attempted_revision = ctx.revision
    status.last_attempted_revision_digest = ctx.artifact.digest
    status.last_attempted_config_digest = ctx.config_digest
    status.last_attempted_release_action = action  # type: ignore[assignment]
    status.storage_namespace = ctx.release_namespace
    ctx.conditions.delete(Condition.REMEDIATED, Condition.TEST_SUCCESS)

    work = Path(ctx.cleanup.enter_context(tempfile.TemporaryDirectory(prefix="hr-values-")))
    values_file = work / "values.json"
    values_file.write_text(json.dumps(ctx.values))
    values_file.chmod(0o600)
    args, timeout = _release_args(ctx, action, values_file)
    reasons = {
        "install": (Reason.INSTALL_SUCCEEDED, Reason.INSTALL_FAILED),
        "upgrade": (Reason.UPGRADE_SUCCEEDED, Reason.UPGRADE_FAILED),
    }
    ok_reason, failed_reason = reasons[action]
    target = f"{ctx.release_namespace}/{ctx.release_name}"
    if action == "install" or latest is None:
        doing = f"installing chart {chart} as release {target}"
    else:
        doing = (
            f"upgrading release {target} from chart {latest.chart_name}@{latest.chart_version}"
            f" to {chart}"
        )
    # Shown before helm runs (the attempt fields, history and Reconciling in one
    # patch): an install of minutes must not show the last attempt's story. A
    # reconcile that follows this one at once reads the attempt fields from
    # `services.attempts`, not from a cache that may still hold this patch.
    await announce(ctx, action, doing, timeout=timeout)
    started = time.monotonic()
    try:
        await apply_crds(ctx, action, timeout=timeout)
        await helm(ctx, args, timeout=timeout)
    except HelmError as error:
        record_action_duration(ctx, started)
        message = (
            f"Helm {action} failed for release {ctx.release_namespace}/{ctx.release_name} "
            f"with chart {chart}: {error}"
        )
        ctx.events.warning(failed_reason, message, metadata=ctx.event_metadata)
        ctx.conditions.mark_false(Condition.RELEASED, failed_reason, message)
        await count_failure(ctx, action, failed_reason, message, chart=chart)

    record_action_duration(ctx, started)
    found = await history(ctx)
    record_history(ctx, found)
    assert found
    current = found[0][1]
    message = _release_message(ctx, current, "succeeded", chart=chart, action=action)
    ctx.events.normal(ok_reason, message, metadata=ctx.event_metadata)
    ctx.conditions.mark_true(Condition.RELEASED, ok_reason, message)
    ctx.ready_reason, ctx.ready_message = ok_reason, message
    failure = await run_tests(ctx, current, chart=chart)
    if failure is not None:
        await count_failure(ctx, action, Reason.TEST_FAILED, failure, chart=chart)
    status.failures = status.install_failures = status.upgrade_failures = None
    return None


def wanted(ctx: HelmReleaseContext) -> deciding.Wanted:
    """What the spec, its chart, its values and its annotations ask of the release."""
    hr = ctx.obj
    annotations = hr.metadata.annotations or {}
    upgrade = hr.spec.upgrade
    test = hr.spec.test
    return deciding.Wanted(
        generation=hr.metadata.generation or 0,
        revision=ctx.revision,
        config_digest=ctx.config_digest,
        chart_name=str(ctx.chart_meta.get("name")),
        chart_version=str(ctx.chart_meta.get("version")),
        reset_at=annotations.get(RESET_REQUESTED_AT_ANNOTATION),
        force_at=annotations.get(FORCE_REQUESTED_AT_ANNOTATION),
        install_retries=retries_of(ctx, "install")[0],
        upgrade_retries=retries_of(ctx, "upgrade")[0],
        reinstall_on_rename=(upgrade.chart_name_change_strategy if upgrade else None)
        != "InPlaceUpdate",
        tests_count=bool(test and test.enable) and not ignore_test_failures(ctx),
    )


def attempt(status: HelmReleaseStatus) -> deciding.Attempt:
    """The last attempt, as status records it."""
    return deciding.Attempt(
        generation=status.last_attempted_generation,
        revision=status.last_attempted_revision,
        config_digest=status.last_attempted_config_digest,
        action=status.last_attempted_release_action,
        install_failures=status.install_failures or 0,
        upgrade_failures=status.upgrade_failures or 0,
        handled_reset_at=status.last_handled_reset_at,
        handled_force_at=status.last_handled_force_at,
    )


def _release_args(
    ctx: HelmReleaseContext, action: str, values_file: Path
) -> tuple[list[str], float]:
    spec = ctx.obj.spec
    assert ctx.chart_dir is not None
    args = [action, ctx.release_name, str(ctx.chart_dir), "--values", str(values_file)]
    args += ["--description", f"{action} by Sluice helm-controller"]
    if action == "install":
        opts = spec.install
        timeout = duration(opts.timeout if opts else None, ctx.timeout)
        if opts is not None:
            if opts.create_namespace:
                args.append("--create-namespace")
            # CreateReplace: the controller has applied them (_apply_crds).
            if opts.skip_crds or opts.crds in ("Skip", "CreateReplace"):
                args.append("--skip-crds")
            if opts.replace:
                args.append("--replace")
    else:
        up = spec.upgrade
        timeout = duration(up.timeout if up else None, ctx.timeout)
        history = ctx.max_history
        args += ["--history-max", str(history), "--skip-crds"]
        if up is not None:
            if up.force:
                args.append("--force")
            if up.preserve_values:
                args.append("--reuse-values")
            else:
                args.append("--reset-values")
            if up.cleanup_on_fail:
                args.append("--cleanup-on-fail")
        else:
            args.append("--reset-values")
    opts_any: Any = spec.install if action == "install" else spec.upgrade
    args += wait_args(opts_any)
    # Flux takes ownership of objects the chart renders unless told not to.
    if opts_any is None or not opts_any.disable_take_ownership:
        args.append("--take-ownership")
    if opts_any is not None:
        if opts_any.disable_hooks:
            args.append("--no-hooks")
        if opts_any.disable_open_api_validation:
            args.append("--disable-openapi-validation")
        if opts_any.disable_schema_validation:
            args.append("--skip-schema-validation")
    args += ["--timeout", f"{int(timeout)}s"]
    args += postrendering.helm_args(
        spec.post_renderers or [], spec.common_metadata, values_file.parent / "post-render"
    )
    return args, timeout


def _kept_reason(ctx: HelmReleaseContext) -> str:
    released = ctx.conditions.get(Condition.RELEASED)
    if released is not None and released.status == "True":
        return released.reason
    if ctx.obj.status.last_attempted_release_action == "upgrade":
        return Reason.UPGRADE_SUCCEEDED
    return Reason.INSTALL_SUCCEEDED


def _release_message(
    ctx: HelmReleaseContext, snap: Snapshot, outcome: str, *, chart: str, action: str | None = None
) -> str:
    verb = action or ctx.obj.status.last_attempted_release_action or "install"
    return (
        f"Helm {verb} {outcome} for release {snap.namespace}/{snap.name}.v{snap.version} "
        f"with chart {snap.chart_name}@{snap.chart_version}"
    )
