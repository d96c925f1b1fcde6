"""Which builds are reused (the same artifact and build-relevant spec only), and
which source changes put their Kustomizations ahead of the queue."""

from __future__ import annotations

from typing import Any

import pytest

from kustomize_controller.kustomization import answers_a_request
from kustomize_controller.reusing import Builds, build_key
from sluice_api.kustomize import Kustomization
from sluice_runtime.informing.watching import Change

BASE: dict[str, Any] = {
    "interval": "10m",
    "path": "./apps",
    "prune": True,
    "sourceRef": {"kind": "OCIRepository", "name": "a"},
    "targetNamespace": "team",
}


def key(digest: str = "sha256:aa", name: str = "app", **spec: Any) -> str | None:
    obj = Kustomization.from_obj(
        {"metadata": {"name": name, "namespace": "apps"}, "spec": {**BASE, **spec}}
    )
    return build_key(obj, digest=digest, flags="refuse-plugins")


@pytest.mark.parametrize(
    ("other", "same"),
    [
        pytest.param({"name": "other-app"}, True, id="another-kustomization"),
        pytest.param({"postBuild": {"substitute": {"INDEX": "2"}}}, True, id="substitution-after"),
        pytest.param({"sourceRef": {"kind": "OCIRepository", "name": "b"}}, True, id="source-name"),
        pytest.param({"interval": "1m", "wait": True, "timeout": "2m"}, True, id="scheduling"),
        pytest.param({"serviceAccountName": "tenant"}, True, id="identity"),
        pytest.param({"digest": "sha256:bb"}, False, id="another-artifact"),
        pytest.param({"targetNamespace": "other"}, False, id="target-namespace"),
        pytest.param({"path": "./other"}, False, id="path"),
        pytest.param({"namePrefix": "x-"}, False, id="name-prefix"),
        pytest.param({"images": [{"name": "nginx", "newTag": "2"}]}, False, id="images"),
        pytest.param({"commonMetadata": {"labels": {"team": "a"}}}, False, id="common-metadata"),
        pytest.param({"components": ["../c"]}, False, id="components"),
    ],
)
def test_builds_are_reused_only_for_the_same_artifact_and_build_spec(
    other: dict[str, Any], same: bool
) -> None:
    assert (key(**other) == key()) is same


def test_builds_with_decryption_are_never_kept() -> None:
    assert key(decryption={"provider": "sops", "secretRef": {"name": "keys"}}) is None


def test_a_reused_build_is_a_fresh_copy_and_the_cache_stays_bounded() -> None:
    builds = Builds(max_bytes=4000)
    builds.put("a", [{"kind": "ConfigMap", "metadata": {"name": "a"}}])
    first = builds.get("a")
    assert first is not None
    first[0]["metadata"]["name"] = "edited"
    assert builds.get("a") == [{"kind": "ConfigMap", "metadata": {"name": "a"}}]
    for index in range(100):
        builds.put(f"k{index}", [{"data": {"x": "y" * 200}}])
    assert builds.get("a") is None, "least recently used goes first"
    assert builds.get("k99") is not None


def _source(handled: str | None, revision: str) -> dict[str, Any]:
    status: dict[str, Any] = {"artifact": {"revision": revision}}
    if handled is not None:
        status["lastHandledReconcileAt"] = handled
    return {"metadata": {"name": "s", "namespace": "apps"}, "status": status}


@pytest.mark.parametrize(
    ("old", "new", "urgent"),
    [
        pytest.param(_source(None, "a"), _source("t1", "b"), True, id="webhook-fetch"),
        pytest.param(_source("t1", "b"), _source("t2", "c"), True, id="second-request"),
        pytest.param(_source("t1", "b"), _source("t1", "c"), False, id="interval-fetch"),
        pytest.param(_source(None, "a"), _source(None, "b"), False, id="never-requested"),
    ],
)
def test_kustomizations_of_a_requested_fetch_go_first(
    old: dict[str, Any], new: dict[str, Any], urgent: bool
) -> None:
    assert answers_a_request(Change("updated", "apps/s", old, new)) is urgent
