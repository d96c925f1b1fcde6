"""What a HelmRelease reconcile does next, decided from what it knows, with no I/O.

`decide` reads what the spec asks for (`Wanted`), the record of the last
attempt that status keeps (`Attempt`) and the newest release in Helm's
storage, and answers one `Decision`: install, upgrade, reinstall (the chart's
name changed), nothing (the release is what the spec asks; drift is checked),
or stall (the last action's retries are exhausted, or a test of this very
release failed). `after_failure` decides what a failed action leads to:
retried later as it is (`RetryOnFailure`), undone (a failed install
uninstalled, a failed upgrade rolled back or uninstalled) and retried,
undone and stalled, or stalled. The steps in `releasing` and `remediating`
do what these say, one helm action at a time, and own the conditions.

The rules are Flux's: a new generation, chart revision or values digest, or
a new `reconcile.fluxcd.io/resetAt`, starts counting failures again; a new
`forceAt` upgrades once whatever the release is; a steady release (same
chart, values and generation) is never upgraded; retries exhausted stall
until one of those changes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from helm_controller.releases import Desired, next_action
from sluice_api.helm import Snapshot

FOREVER = -1
"""Retries of a `RetryOnFailure` action: never exhausted."""


class Next(enum.StrEnum):
    """What the reconcile does; each value says which status it leads to."""

    INSTALL = "install"
    UPGRADE = "upgrade"
    REINSTALL = "reinstall"
    """Uninstall the release of another chart, then install (Released from the install)."""
    STEADY = "steady"
    """No release action: Released kept, drift checked."""
    RETRIES_EXHAUSTED = "retries-exhausted"
    """Stalled: the last action failed more often than its retries allow."""
    TEST_FAILED = "test-failed"
    """Stalled: a test of the current release failed, and failures are not ignored."""


@dataclass(frozen=True, slots=True)
class Wanted:
    """What the spec and its annotations ask for."""

    generation: int
    revision: str
    """The chart revision to release: the HelmChart's, or an OCI chart's digest-suffixed
    version."""
    config_digest: str
    chart_name: str
    chart_version: str
    reset_at: str | None = None
    """`reconcile.fluxcd.io/resetAt`: count failures again from zero."""
    force_at: str | None = None
    """`reconcile.fluxcd.io/forceAt`: upgrade once, whatever the release is."""
    install_retries: int = 0
    """How many failed installs are retried (FOREVER for RetryOnFailure)."""
    upgrade_retries: int = 0
    reinstall_on_rename: bool = True
    """`upgrade.chartNameChangeStrategy` is Reinstall (Flux's default), not InPlaceUpdate."""
    tests_count: bool = False
    """`test.enable`, and the last action's test failures are not ignored."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """The last attempt, as status records it (`status.lastAttempted*`, the failure counts)."""

    generation: int | None = None
    revision: str | None = None
    config_digest: str | None = None
    action: str | None = None
    install_failures: int = 0
    upgrade_failures: int = 0
    handled_reset_at: str | None = None
    handled_force_at: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    next: Next
    clear_failures: bool = False
    """status.failures, installFailures, upgradeFailures go back to none."""
    handled_reset_at: str | None = None
    """status.lastHandledResetAt to record (None: leave it)."""
    handled_force_at: str | None = None
    """status.lastHandledForceAt to record (None: leave it)."""
    failures: int = 0
    """For RETRIES_EXHAUSTED: how many times `action` failed."""
    action: str | None = None
    """For RETRIES_EXHAUSTED: the action that failed."""
    failed_tests: tuple[str, ...] = ()
    """For TEST_FAILED: the failed test hooks, sorted."""


def decide(wanted: Wanted, attempt: Attempt, latest: Snapshot | None) -> Decision:
    """The next thing to do for a HelmRelease (see the module's docstring)."""
    reset = wanted.reset_at is not None and wanted.reset_at != attempt.handled_reset_at
    changed = (
        attempt.generation != wanted.generation
        or attempt.revision != wanted.revision
        or attempt.config_digest != wanted.config_digest
        or reset
    )
    forced = wanted.force_at is not None and wanted.force_at != attempt.handled_force_at
    base = Decision(
        Next.STEADY,
        clear_failures=changed,
        handled_reset_at=wanted.reset_at,
        handled_force_at=wanted.force_at,
    )
    if attempt.action is not None and not changed and not forced:
        install = attempt.action == "install"
        failures = attempt.install_failures if install else attempt.upgrade_failures
        retries = wanted.install_retries if install else wanted.upgrade_retries
        if failures and exhausted(failures, retries):
            return replace(
                base, next=Next.RETRIES_EXHAUSTED, failures=failures, action=attempt.action
            )
    action = next_action(
        latest,
        Desired(wanted.chart_name, wanted.chart_version, wanted.config_digest),
        generation_changed=attempt.generation != wanted.generation,
        forced=forced,
        reinstall_on_rename=wanted.reinstall_on_rename,
    )
    if action is not None:
        return replace(base, next=Next(action))
    assert latest is not None  # next_action installs when there is no release
    failed = tuple(
        sorted(name for name, hook in (latest.test_hooks or {}).items() if hook.phase == "Failed")
    )
    if failed and wanted.tests_count:
        return replace(base, next=Next.TEST_FAILED, failed_tests=failed)
    return base


def exhausted(failures: int, retries: int) -> bool:
    return retries != FOREVER and failures > retries


@dataclass(frozen=True, slots=True)
class Remedy:
    """What a failed install or upgrade leads to."""

    undo: str | None
    """`uninstall` or `rollback` to run first, or None."""
    stall: bool
    """Stalled (RetriesExceeded) after the undo; else retried."""
    requeue_after: float | None = None
    """RetryOnFailure: retry as it is after this many seconds, undoing nothing."""


def after_failure(
    action: str,
    *,
    failures: int,
    retries: int,
    remediate_last: bool,
    retry_interval: float | None,
    upgrade_strategy: str | None,
) -> Remedy:
    """What the `failures`-th failure of `action` leads to.

    `retries` and `remediate_last` are the action's remediation settings,
    `retry_interval` is set for RetryOnFailure, `upgrade_strategy` is
    `upgrade.remediation.strategy` (rollback when unset).
    """
    if retry_interval is not None:
        return Remedy(undo=None, stall=False, requeue_after=retry_interval)
    stall = exhausted(failures, retries)
    undo = "uninstall" if action == "install" else (upgrade_strategy or "rollback")
    return Remedy(undo=undo if not stall or remediate_last else None, stall=stall)
