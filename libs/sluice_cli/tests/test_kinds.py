"""Which source `reconcile --with-source` follows from each kind."""

from __future__ import annotations

from typing import Any

import pytest

from sluice_cli.kinds import source_of


def obj(kind: str, spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "kind": kind,
        "metadata": {"name": "web", "namespace": "apps"},
        "spec": spec,
        "status": status or {},
    }


CHART_SPEC = {"chart": {"spec": {"chart": "app", "sourceRef": {"kind": "HelmRepository", "name": "charts"}}}}  # fmt: skip


@pytest.mark.parametrize(
    ("given", "source"),
    [
        pytest.param(obj("Kustomization", {"sourceRef": {"kind": "GitRepository", "name": "fleet"}}),
                     ("GitRepository", "apps", "fleet"), id="kustomization"),
        pytest.param(obj("Kustomization", {"sourceRef": {"kind": "OCIRepository", "name": "o", "namespace": "x"}}),
                     ("OCIRepository", "x", "o"), id="kustomization-other-namespace"),
        pytest.param(obj("HelmRelease", CHART_SPEC, {"helmChart": "apps/apps-web"}),
                     ("HelmChart", "apps", "apps-web"), id="helmrelease-chart-its-helmchart"),
        pytest.param(obj("HelmRelease", CHART_SPEC),
                     ("HelmChart", "apps", "apps-web"), id="helmrelease-chart-not-yet-made"),
        pytest.param(obj("HelmRelease", {"chart": {"spec": {"chart": "app", "sourceRef": {"kind": "HelmRepository", "name": "charts", "namespace": "shared"}}}}),
                     ("HelmChart", "shared", "apps-web"), id="helmrelease-chart-source-elsewhere"),
        pytest.param(obj("HelmRelease", {"chartRef": {"kind": "OCIRepository", "name": "podinfo"}}),
                     ("OCIRepository", "apps", "podinfo"), id="helmrelease-chartref-oci"),
        pytest.param(obj("HelmRelease", {"chartRef": {"kind": "HelmChart", "name": "c", "namespace": "s"}}),
                     ("HelmChart", "s", "c"), id="helmrelease-chartref-helmchart"),
        pytest.param(obj("HelmChart", {"chart": "app", "sourceRef": {"kind": "HelmRepository", "name": "charts"}}),
                     ("HelmRepository", "apps", "charts"), id="helmchart"),
        pytest.param(obj("Kustomization", {"sourceRef": {"kind": "Nope", "name": "x"}}), None, id="unknown-kind"),
        pytest.param(obj("Kustomization", {"sourceRef": {"kind": "ExternalArtifact", "name": "x"}}),
                     None, id="external-artifact-is-its-producers-to-refresh"),
        pytest.param(obj("Gate", {}), None, id="no-source"),
    ],
)  # fmt: skip
def test_source_of(given: dict[str, Any], source: tuple[str, str, str] | None) -> None:
    found = source_of(given)
    assert (None if found is None else (found[0].rt.kind, found[1], found[2])) == source
