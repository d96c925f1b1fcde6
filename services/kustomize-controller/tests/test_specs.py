"""A Kustomization's durations, computed once per reconcile from its spec."""

from __future__ import annotations

from typing import Any

import pytest

from kustomize_controller.specs import intervals
from sluice_api.kustomize import Kustomization


def ks(**spec: Any) -> Kustomization:
    return Kustomization.from_obj(
        {
            "metadata": {"name": "app", "namespace": "apps"},
            "spec": {"prune": True, "sourceRef": {"kind": "GitRepository", "name": "a"}, **spec},
        }
    )


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({"interval": "10m"}, (600.0, 600.0, 600.0), id="interval-only"),
        pytest.param(
            {"interval": "10m", "retryInterval": "30s"}, (600.0, 30.0, 600.0), id="retry-interval"
        ),
        pytest.param({"interval": "10m", "timeout": "2m"}, (600.0, 600.0, 120.0), id="timeout"),
        # Never retried sooner than a second, whatever the spec says.
        pytest.param(
            {"interval": "1h", "retryInterval": "100ms", "timeout": "1m30s"},
            (3600.0, 1.0, 90.0),
            id="retry-floor",
        ),
        pytest.param({"interval": "500ms"}, (0.5, 1.0, 0.5), id="short-interval"),
    ],
)
def test_intervals(spec: dict[str, Any], expected: tuple[float, float, float]) -> None:
    assert intervals(ks(**spec)) == expected
