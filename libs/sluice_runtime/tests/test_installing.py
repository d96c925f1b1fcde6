"""CRD installation: CEL rules only where the API server evaluates them."""

from __future__ import annotations

from typing import Any

import pytest

from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.installing import install_crds, supports_cel
from sluice_runtime.kube.resources import CRD

from .test_discovery import crd_manifest, unique_group


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        pytest.param({"major": "1", "minor": "20"}, False, id="1.20"),
        pytest.param({"major": "1", "minor": "24"}, False, id="1.24"),
        pytest.param({"major": "1", "minor": "25"}, True, id="1.25"),
        pytest.param({"major": "1", "minor": "31+"}, True, id="eks-style-minor"),
        pytest.param({"major": "2", "minor": "0"}, True, id="2.0"),
        pytest.param({}, False, id="unknown"),
    ],
)
def test_supports_cel(version: dict[str, Any], expected: bool) -> None:
    assert supports_cel(version) is expected


async def test_cel_rules_are_left_out_on_a_server_without_cel(kube: KubeClient) -> None:
    version = await kube.request("GET", "/version")
    assert not supports_cel(version), "this test needs the 1.20 control plane"
    crd = crd_manifest(unique_group(), "Ruled")
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"]["x-kubernetes-validations"] = [
        {"rule": "has(self.a)", "message": "a is required"}
    ]
    # Applying the keyword as it is would fail: "field not declared in schema".
    await install_crds(kube, [crd])
    stored = await kube.get(CRD, crd["metadata"]["name"])
    spec_schema = stored["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert "x-kubernetes-validations" not in spec_schema
    await kube.delete(CRD, crd["metadata"]["name"])
