"""The helm arguments every action shares, as pure functions of its options."""

from __future__ import annotations

import pytest

from helm_controller.contexts import Waits, wait_args
from sluice_api.helm import Install, Rollback, Upgrade


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        pytest.param(None, ["--wait", "--wait-for-jobs"], id="no-options-wait-for-everything"),
        pytest.param(Install(), ["--wait", "--wait-for-jobs"], id="install-defaults"),
        pytest.param(
            Upgrade.model_validate({"disableWaitForJobs": True}), ["--wait"], id="upgrade-no-jobs"
        ),
        pytest.param(Rollback.model_validate({"disableWait": True}), [], id="rollback-no-wait"),
        pytest.param(
            Install.model_validate({"disableWait": True, "disableWaitForJobs": False}),
            [],
            id="no-wait-means-no-job-wait-either",
        ),
    ],
)
def test_wait_args_follow_the_actions_switches(options: Waits | None, expected: list[str]) -> None:
    assert wait_args(options) == expected
