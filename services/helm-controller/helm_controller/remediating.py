"""Counting failed actions and undoing them: remediation, uninstall and `helm test`.

A failed install is uninstalled; a failed upgrade is rolled back (or
uninstalled, as `upgrade.remediation.strategy` says) until the action's
retries are exhausted, which stalls the HelmRelease. With the action's
`strategy.name: RetryOnFailure` nothing is undone and nothing is exhausted:
the failed release is retried with an upgrade every `retryInterval`.
"""

from __future__ import annotations

from typing import Any, NoReturn

from helm_controller import deciding, releases
from helm_controller.contexts import (
    HelmReleaseContext,
    announce,
    duration,
    helm,
    history,
    record_history,
    wait_args,
)
from sluice_api.helm import HelmReleaseCondition, HelmReleaseReason, Snapshot
from sluice_runtime.helming import HelmError
from sluice_runtime.reconciling.errors import Stalling, StepError

Condition = HelmReleaseCondition
Reason = HelmReleaseReason


DEFAULT_RETRY_INTERVAL = 300.0


def retry_interval(ctx: HelmReleaseContext, action: str) -> float | None:
    """Seconds between retries when the action's strategy is RetryOnFailure, else None."""
    spec = ctx.obj.spec
    options = spec.install if action == "install" else spec.upgrade
    strategy = options.strategy if options is not None else None
    if strategy is None or strategy.name != "RetryOnFailure":
        return None
    return duration(strategy.retry_interval, DEFAULT_RETRY_INTERVAL)


def retries_of(ctx: HelmReleaseContext, action: str) -> tuple[int, bool]:
    """(retries, remediate the last failure) of the action's remediation;
    RetryOnFailure retries forever and remediates nothing."""
    if retry_interval(ctx, action) is not None:
        return -1, False
    spec = ctx.obj.spec
    remediation: Any = (
        (spec.install.remediation if spec.install else None)
        if action == "install"
        else (spec.upgrade.remediation if spec.upgrade else None)
    )
    retries = remediation.retries if remediation is not None else 0
    last = remediation.remediate_last_failure if remediation is not None else None
    return retries, (retries > 0 if last is None else last)


async def count_failure(
    ctx: HelmReleaseContext, action: str, reason: str, message: str, *, chart: str
) -> NoReturn:
    """Count a failed action (or test), do what `deciding.after_failure` says of it,
    and raise: Stalling once the retries are exhausted, else a retried StepError."""
    status = ctx.obj.status
    retries, remediate_last = retries_of(ctx, action)
    status.failures = (status.failures or 0) + 1
    if action == "install":
        status.install_failures = failures = (status.install_failures or 0) + 1
    else:
        status.upgrade_failures = failures = (status.upgrade_failures or 0) + 1
    upgrade = ctx.obj.spec.upgrade
    remedy = deciding.after_failure(
        action,
        failures=failures,
        retries=retries,
        remediate_last=remediate_last,
        retry_interval=retry_interval(ctx, action),
        upgrade_strategy=upgrade.remediation.strategy if upgrade and upgrade.remediation else None,
    )
    if remedy.undo is not None:
        await remediate(ctx, remedy.undo, chart=chart, failed=(reason, message))
    record_history(ctx, await history(ctx))
    if remedy.stall:
        raise Stalling(
            Reason.RETRIES_EXCEEDED, f"Failed to {action} after {failures} attempt(s): {message}"
        )
    raise StepError(reason, message, requeue_after=remedy.requeue_after)


async def remediate(
    ctx: HelmReleaseContext, strategy: str, *, chart: str, failed: tuple[str, str]
) -> None:
    """Undo a failed action: `rollback` to the last successful release, or `uninstall`.

    `failed` is the failure's (reason, message): Ready shows it while helm undoes it."""
    spec = ctx.obj.spec
    target = f"{ctx.release_namespace}/{ctx.release_name}"
    try:
        if strategy == "rollback":
            found = await history(ctx)
            previous = releases.last_successful(found[1:])
            if previous is None:
                return
            rb = spec.rollback
            timeout = duration(rb.timeout if rb else None, ctx.timeout)
            args = [
                "rollback",
                ctx.release_name,
                str(previous.version),
                "--timeout",
                f"{int(timeout)}s",
            ]
            args += wait_args(rb)
            if rb is not None:
                args += [
                    f
                    for f, on in (
                        ("--no-hooks", rb.disable_hooks),
                        ("--recreate-pods", rb.recreate),
                        ("--force", rb.force),
                        ("--cleanup-on-fail", rb.cleanup_on_fail),
                    )
                    if on
                ]
            args += [
                "--history-max",
                str(ctx.max_history),
            ]
            doing = (
                f"rolling back release {target} to revision {previous.version} with chart "
                f"{previous.chart_name}@{previous.chart_version}"
            )
            await announce(ctx, "rollback", doing, timeout=timeout, failed=failed)
            await helm(ctx, args, timeout=timeout)
            message = (
                f"Helm rollback to previous release {target}.v{previous.version} with chart "
                f"{previous.chart_name}@{previous.chart_version} succeeded"
            )
            reason = Reason.ROLLBACK_SUCCEEDED
        else:
            await uninstall(ctx, failed=failed)
            message = f"Helm uninstall succeeded for release {target} with chart {chart}"
            reason = Reason.UNINSTALL_SUCCEEDED
    except HelmError as error:
        undo_failed = Reason.ROLLBACK_FAILED if strategy == "rollback" else Reason.UNINSTALL_FAILED
        message = f"Helm {strategy} failed for release {target}: {error}"
        ctx.events.warning(undo_failed, message, metadata=ctx.event_metadata)
        ctx.conditions.mark_false(Condition.REMEDIATED, undo_failed, message)
        return
    ctx.events.normal(reason, message, metadata=ctx.event_metadata)
    ctx.conditions.mark_true(Condition.REMEDIATED, reason, message)


async def reinstall(ctx: HelmReleaseContext, *, chart: str) -> None:
    """Uninstall a release of another chart before installing this one, as Flux's
    default `upgrade.chartNameChangeStrategy: Reinstall` does."""
    target = f"{ctx.release_namespace}/{ctx.release_name}"
    try:
        await uninstall(ctx)
    except HelmError as error:
        message = f"Helm uninstall failed for release {target}: {error}"
        ctx.events.warning(Reason.UNINSTALL_FAILED, message, metadata=ctx.event_metadata)
        raise StepError(Reason.UNINSTALL_FAILED, message) from None
    message = (
        f"Helm uninstall succeeded for release {target} before installing chart {chart}: "
        "the chart name changed"
    )
    ctx.events.normal(Reason.UNINSTALL_SUCCEEDED, message, metadata=ctx.event_metadata)


async def uninstall(ctx: HelmReleaseContext, *, failed: tuple[str, str] | None = None) -> None:
    """`helm uninstall`, announced first (`failed`: the failure it remedies)."""
    un = ctx.obj.spec.uninstall
    timeout = duration(un.timeout if un else None, ctx.timeout)
    args = ["uninstall", ctx.release_name, "--timeout", f"{int(timeout)}s", "--ignore-not-found"]
    if un is None or not un.disable_wait:
        args.append("--wait")
    if un is not None:
        if un.disable_hooks:
            args.append("--no-hooks")
        if un.keep_history:
            args.append("--keep-history")
        args += ["--cascade", un.deletion_propagation]
    doing = f"uninstalling release {ctx.release_namespace}/{ctx.release_name}"
    await announce(ctx, "uninstall", doing, timeout=timeout, failed=failed)
    await helm(ctx, args, timeout=timeout)


async def run_tests(ctx: HelmReleaseContext, current: Snapshot, *, chart: str) -> str | None:
    """Run `helm test` when enabled; the failure message when it failed and counts."""
    test = ctx.obj.spec.test
    if test is None or not test.enable:
        return None
    timeout = duration(test.timeout, ctx.timeout)
    args = ["test", ctx.release_name, "--timeout", f"{int(timeout)}s"]
    for flt in test.filters or []:
        args += ["--filter", f"{'!' if flt.exclude else ''}name={flt.name}"]
    target = f"{current.namespace}/{current.name}.v{current.version}"
    await announce(ctx, "test", f"testing release {target}", timeout=timeout)
    try:
        await helm(ctx, args, timeout=timeout)
    except HelmError as error:
        message = f"Helm test failed for release {target} with chart {chart}: {error}"
        ctx.events.warning(Reason.TEST_FAILED, message, metadata=ctx.event_metadata)
        ctx.conditions.mark_false(Condition.TEST_SUCCESS, Reason.TEST_FAILED, message)
        record_history(ctx, await history(ctx))
        return None if ignore_test_failures(ctx) else message
    message = f"Helm test succeeded for release {target} with chart {chart}"
    ctx.events.normal(Reason.TEST_SUCCEEDED, message, metadata=ctx.event_metadata)
    ctx.conditions.mark_true(Condition.TEST_SUCCESS, Reason.TEST_SUCCEEDED, message)
    record_history(ctx, await history(ctx))
    return None


def ignore_test_failures(ctx: HelmReleaseContext) -> bool:
    """The action's remediation.ignoreTestFailures, else test.ignoreFailures."""
    spec = ctx.obj.spec
    action = ctx.obj.status.last_attempted_release_action
    remediation: Any = (
        (spec.install.remediation if spec.install else None)
        if action == "install"
        else (spec.upgrade.remediation if spec.upgrade else None)
    )
    if remediation is not None and remediation.ignore_test_failures is not None:
        return bool(remediation.ignore_test_failures)
    return bool(spec.test and spec.test.ignore_failures)
