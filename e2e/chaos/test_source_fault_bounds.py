"""The source-fault test's bounds, table by table (see `source_faults`)."""

from __future__ import annotations

import pytest

from e2e.chaos.source_faults import attempts_bound, convergence_bound, fault_window


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        pytest.param(0.0, 6, id="no-time"),
        pytest.param(10.0, 7, id="ten-seconds"),
        pytest.param(60.0, 17, id="a-minute"),
    ],
)
def test_attempts_bound(window: float, expected: int) -> None:
    assert attempts_bound(window) == expected


@pytest.mark.parametrize(
    ("count", "hang", "expected"),
    [
        pytest.param(2, False, 10.0, id="ci-size"),
        pytest.param(2, True, 12.0, id="ci-size-hang: one round of 3s + 5s, half again"),
        pytest.param(50, False, 60.0, id="chaos-size"),
        pytest.param(50, True, 112.5, id="chaos-size-hang: five rounds of 10s + 5s, half again"),
    ],
)
def test_fault_window(count: int, hang: bool, expected: float) -> None:
    assert fault_window(count, hang=hang) == expected


@pytest.mark.parametrize(
    ("count", "first_delivery", "expected"),
    [
        pytest.param(2, 5.0, 124.0, id="ci-size: the fixed allowance"),
        pytest.param(50, 40.0, 220.0, id="quiet-chaos-size: the fixed allowance"),
        pytest.param(50, 125.0, 270.0, id="loaded: cap 5s + attempt 15s + twice 125s"),
    ],
)
def test_convergence_bound(count: int, first_delivery: float, expected: float) -> None:
    assert convergence_bound(count, first_delivery) == expected
