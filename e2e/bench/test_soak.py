"""The soak's trend: a least-squares slope per hour."""

from __future__ import annotations

import math

import pytest

from e2e.bench.soak import slope_per_hour


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        pytest.param([(0.0, 5.0), (60.0, 5.0), (120.0, 5.0)], 0.0, id="flat"),
        pytest.param([(0.0, 0.0), (1800.0, 1.0), (3600.0, 2.0)], 2.0, id="two-per-hour"),
        pytest.param([(0.0, 10.0), (3600.0, 9.0)], -1.0, id="falling"),
        pytest.param([(0.0, 1.0), (10.0, 3.0), (20.0, 1.0), (30.0, 3.0)], 144.0, id="noisy"),
    ],
)
def test_slope_per_hour(samples: list[tuple[float, float]], expected: float) -> None:
    assert slope_per_hour(samples) == pytest.approx(expected)


@pytest.mark.parametrize(
    "samples",
    [pytest.param([], id="none"), pytest.param([(5.0, 1.0)], id="one"),
     pytest.param([(5.0, 1.0), (5.0, 2.0)], id="same-time")],
)  # fmt: skip
def test_no_slope_without_two_moments(samples: list[tuple[float, float]]) -> None:
    assert math.isnan(slope_per_hour(samples))
