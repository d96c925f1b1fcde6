"""The HelmRelease decision core (`deciding`), as a table: every transition it makes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from helm_controller.deciding import (
    FOREVER,
    Attempt,
    Decision,
    Next,
    Remedy,
    Wanted,
    after_failure,
    decide,
)
from sluice_api.helm import Snapshot

WANTED = Wanted(
    generation=2,
    revision="1.0.0",
    config_digest="sha256:values",
    chart_name="web",
    chart_version="1.0.0",
    install_retries=1,
    upgrade_retries=2,
)
ATTEMPTED = Attempt(generation=2, revision="1.0.0", config_digest="sha256:values", action="install")


def release(**fields: Any) -> Snapshot:
    base: dict[str, Any] = {
        "name": "web", "namespace": "apps", "version": 1, "status": "deployed",
        "chartName": "web", "chartVersion": "1.0.0", "configDigest": "sha256:values",
        "digest": "sha256:r", "firstDeployed": "2026-01-01T00:00:00Z",
        "lastDeployed": "2026-01-01T00:00:00Z",
    }  # fmt: skip
    return Snapshot.model_validate({**base, **fields})


FAILED_TEST = {"web-test": {"phase": "Failed"}, "web-ok": {"phase": "Succeeded"}}


@pytest.mark.parametrize(
    ("wanted", "attempt", "latest", "expected"),
    [
        # -- first install and steady state
        pytest.param(WANTED, Attempt(), None, Next.INSTALL, id="no-release-installs"),
        pytest.param(WANTED, ATTEMPTED, release(status="uninstalled"), Next.INSTALL,
                     id="uninstalled-installs-again"),
        pytest.param(WANTED, ATTEMPTED, release(), Next.STEADY, id="steady-does-nothing"),
        # -- what makes an upgrade
        pytest.param(replace(WANTED, chart_version="1.1.0", revision="1.1.0"), ATTEMPTED,
                     release(), Next.UPGRADE, id="new-chart-version"),
        pytest.param(replace(WANTED, config_digest="sha256:other"), ATTEMPTED, release(),
                     Next.UPGRADE, id="new-values"),
        pytest.param(replace(WANTED, generation=3), ATTEMPTED, release(), Next.UPGRADE,
                     id="new-generation"),
        pytest.param(replace(WANTED, force_at="t1"), ATTEMPTED, release(), Next.UPGRADE,
                     id="forceAt-upgrades-once"),
        pytest.param(replace(WANTED, force_at="t1"), replace(ATTEMPTED, handled_force_at="t1"),
                     release(), Next.STEADY, id="forceAt-handled-is-steady"),
        pytest.param(WANTED, ATTEMPTED, release(status="failed"), Next.UPGRADE,
                     id="failed-release-upgrades"),
        pytest.param(WANTED, ATTEMPTED, release(status="pending-upgrade"), Next.UPGRADE,
                     id="pending-release-upgrades"),
        # -- a new chart name
        pytest.param(replace(WANTED, chart_name="site"), ATTEMPTED, release(), Next.REINSTALL,
                     id="renamed-chart-reinstalls"),
        pytest.param(replace(WANTED, chart_name="site", reinstall_on_rename=False), ATTEMPTED,
                     release(), Next.UPGRADE, id="renamed-chart-in-place"),
        # -- retries
        pytest.param(WANTED, replace(ATTEMPTED, install_failures=2), release(status="failed"),
                     Next.RETRIES_EXHAUSTED, id="install-retries-exhausted"),
        pytest.param(WANTED, replace(ATTEMPTED, install_failures=1), release(status="failed"),
                     Next.UPGRADE, id="install-retry-left"),
        pytest.param(WANTED, replace(ATTEMPTED, action="upgrade", upgrade_failures=3),
                     release(status="failed"), Next.RETRIES_EXHAUSTED,
                     id="upgrade-retries-exhausted"),
        pytest.param(replace(WANTED, upgrade_retries=FOREVER),
                     replace(ATTEMPTED, action="upgrade", upgrade_failures=50),
                     release(status="failed"), Next.UPGRADE, id="retry-on-failure-never-exhausts"),
        pytest.param(replace(WANTED, generation=3), replace(ATTEMPTED, install_failures=2),
                     release(status="failed"), Next.UPGRADE, id="new-generation-counts-again"),
        pytest.param(replace(WANTED, reset_at="r1"), replace(ATTEMPTED, install_failures=2),
                     release(status="failed"), Next.UPGRADE, id="resetAt-counts-again"),
        pytest.param(replace(WANTED, reset_at="r1"),
                     replace(ATTEMPTED, install_failures=2, handled_reset_at="r1"),
                     release(status="failed"), Next.RETRIES_EXHAUSTED, id="resetAt-handled-stalls"),
        pytest.param(replace(WANTED, force_at="f1"), replace(ATTEMPTED, install_failures=2),
                     release(status="failed"), Next.UPGRADE, id="forceAt-past-exhaustion"),
        # -- tests of the current release
        pytest.param(replace(WANTED, tests_count=True), ATTEMPTED, release(testHooks=FAILED_TEST),
                     Next.TEST_FAILED, id="failed-test-stalls"),
        pytest.param(WANTED, ATTEMPTED, release(testHooks=FAILED_TEST), Next.STEADY,
                     id="failed-test-ignored"),
    ],
)  # fmt: skip
def test_decide(wanted: Wanted, attempt: Attempt, latest: Snapshot | None, expected: Next) -> None:
    assert decide(wanted, attempt, latest).next is expected


def test_what_is_recorded_with_the_decision() -> None:
    changed = decide(replace(WANTED, generation=3, reset_at="r", force_at="f"), ATTEMPTED, None)
    assert changed == Decision(
        Next.INSTALL, clear_failures=True, handled_reset_at="r", handled_force_at="f"
    )
    assert not decide(WANTED, ATTEMPTED, release()).clear_failures
    stalled = decide(WANTED, replace(ATTEMPTED, install_failures=2), release(status="failed"))
    assert (stalled.action, stalled.failures) == ("install", 2)
    tested = decide(replace(WANTED, tests_count=True), ATTEMPTED, release(testHooks=FAILED_TEST))
    assert tested.failed_tests == ("web-test",)


@pytest.mark.parametrize(
    ("action", "failures", "retries", "remediate_last", "interval", "strategy", "expected"),
    [
        pytest.param("install", 1, 0, False, None, None, Remedy(None, stall=True),
                     id="install-no-retries-stalls-as-is"),
        pytest.param("install", 1, 0, True, None, None, Remedy("uninstall", stall=True),
                     id="install-no-retries-remediated-last"),
        pytest.param("install", 1, 2, True, None, None, Remedy("uninstall", stall=False),
                     id="install-retried-after-uninstall"),
        pytest.param("install", 3, 2, False, None, None, Remedy(None, stall=True),
                     id="install-exhausted-left-as-is"),
        pytest.param("install", 3, 2, True, None, None, Remedy("uninstall", stall=True),
                     id="install-exhausted-remediated"),
        pytest.param("upgrade", 1, 1, True, None, None, Remedy("rollback", stall=False),
                     id="upgrade-rolled-back"),
        pytest.param("upgrade", 1, 1, True, None, "uninstall", Remedy("uninstall", stall=False),
                     id="upgrade-uninstalled-by-strategy"),
        pytest.param("upgrade", 2, 1, False, None, "rollback", Remedy(None, stall=True),
                     id="upgrade-exhausted"),
        pytest.param("upgrade", 9, FOREVER, False, 60.0, None,
                     Remedy(None, stall=False, requeue_after=60.0), id="retry-on-failure"),
    ],
)  # fmt: skip
def test_after_failure(
    action: str,
    failures: int,
    retries: int,
    remediate_last: bool,
    interval: float | None,
    strategy: str | None,
    expected: Remedy,
) -> None:
    got = after_failure(
        action,
        failures=failures,
        retries=retries,
        remediate_last=remediate_last,
        retry_interval=interval,
        upgrade_strategy=strategy,
    )
    assert got == expected
