"""The pure half of drift detection: reading a release manifest."""

from __future__ import annotations

import pytest

from helm_controller import drifting


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        pytest.param("", [], id="empty"),
        pytest.param(
            "---\n# Source: app/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\n"
            "metadata:\n  name: a\n",
            [("ConfigMap", "rel", "a")],
            id="namespace-defaults-to-the-release-namespace",
        ),
        pytest.param(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: other\n",
            [("ConfigMap", "other", "a")],
            id="own-namespace-kept",
        ),
        pytest.param(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels:\n"
            "    helm.toolkit.fluxcd.io/driftDetection: disabled\n---\n"
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n  annotations:\n"
            "    helm.toolkit.fluxcd.io/driftDetection: Disabled\n---\n"
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n",
            [("ConfigMap", "rel", "c")],
            id="opted-out-by-label-or-annotation",
        ),
    ],
)
def test_manifest_objects(manifest: str, expected: list[tuple[str, str, str]]) -> None:
    objects = drifting.manifest_objects(manifest, namespace="rel")
    found = [(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects]
    assert found == expected


@pytest.mark.parametrize(
    "manifest",
    [
        pytest.param("a: [", id="not-yaml"),
        pytest.param("- 1\n- 2\n", id="a-list"),
        pytest.param("kind: ConfigMap\nmetadata: x\n", id="metadata-not-a-map"),
    ],
)
def test_an_unreadable_manifest_is_an_error(manifest: str) -> None:
    with pytest.raises(drifting.ManifestError):
        drifting.manifest_objects(manifest, namespace="rel")
