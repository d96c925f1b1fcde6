"""Pure rules over manifests: validation, what is sent, stages, drift."""

from __future__ import annotations

from typing import Any

import pytest

from sluice_api.meta import ObjectId
from sluice_runtime.ssa.errors import ValidationFailed
from sluice_runtime.ssa.normalizing import (
    crd_kinds,
    desired,
    has_drifted,
    namespaces,
    prune_stage_of,
    stage_of,
    validate,
)


def configmap(name: str, namespace: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, **meta},
        "data": {"key": "value"},
    }


@pytest.mark.parametrize(
    ("objects", "errors"),
    [
        pytest.param(
            [{"kind": "ConfigMap", "metadata": {"name": "a"}}],
            ["ConfigMap/a (object #1): apiVersion not set"],
            id="no-api-version",
        ),
        pytest.param(
            [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}},
                {"apiVersion": "v1", "metadata": {"name": "b"}},
            ],
            [
                "ConfigMap/<no name> (object #1): metadata.name not set",
                "<no kind>/b (object #2): kind not set",
            ],
            id="no-name-no-kind",
        ),
        pytest.param(
            [
                configmap("a", "ns"),
                configmap("b", "ns"),
                configmap("a", "ns"),
                configmap("a", "other"),
            ],
            ["ConfigMap/ns/a is defined more than once"],
            id="duplicate",
        ),
        pytest.param(["not an object"], ["object #1 is not a mapping"], id="not-a-mapping"),
    ],
)
def test_validation_names_each_offending_object(objects: Any, errors: list[str]) -> None:
    with pytest.raises(ValidationFailed) as caught:
        validate(objects)
    assert caught.value.errors == errors


def test_a_valid_set_passes() -> None:
    validate([configmap("a", "ns"), configmap("a", "other")])


OWNER = {"owner": "me"}


@pytest.mark.parametrize(
    ("obj", "namespaced", "sent"),
    [
        pytest.param(
            configmap(
                "a", "ns", labels={"app": "a", "owner": "them"}, uid="1", resourceVersion="2"
            ),
            True,
            {
                **configmap("a", "ns"),
                "metadata": {"name": "a", "namespace": "ns", "labels": {"app": "a", "owner": "me"}},
            },
            id="owner-labels-win-server-fields-dropped",
        ),
        pytest.param(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "n", "namespace": "x"},
                "status": {"phase": "Active"},
            },
            False,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "labels": OWNER}},
            id="cluster-scoped-no-namespace-no-status",
        ),
        pytest.param(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "s", "namespace": "n"},
                "spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]},
            },
            True,
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "s", "namespace": "n", "labels": OWNER},
                "spec": {
                    "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]
                },
            },
            id="service-port-protocol",
        ),
        pytest.param(
            {
                "apiVersion": "batch/v1",
                "kind": "CronJob",
                "metadata": {"name": "c", "namespace": "n"},
                "spec": {
                    "jobTemplate": {
                        "spec": {
                            "template": {
                                "spec": {
                                    "containers": [{"name": "a", "ports": [{"containerPort": 1}]}]
                                }
                            }
                        }
                    }
                },
            },
            True,
            {
                "apiVersion": "batch/v1",
                "kind": "CronJob",
                "metadata": {"name": "c", "namespace": "n", "labels": OWNER},
                "spec": {
                    "jobTemplate": {
                        "spec": {
                            "template": {
                                "spec": {
                                    "containers": [
                                        {
                                            "name": "a",
                                            "ports": [{"containerPort": 1, "protocol": "TCP"}],
                                        }
                                    ]
                                }
                            }
                        }
                    }
                },
            },
            id="cronjob-container-port-protocol",
        ),
    ],
)
def test_what_is_sent(obj: Any, namespaced: bool, sent: Any) -> None:
    before = repr(obj)
    assert desired(obj, owner_labels=OWNER, namespaced=namespaced) == sent
    assert repr(obj) == before  # the build's objects are not changed


@pytest.mark.parametrize(
    ("existing", "dry_run", "drifted"),
    [
        pytest.param(configmap("a", "n"), configmap("a", "n"), False, id="same"),
        pytest.param(
            {**configmap("a", "n", resourceVersion="1", managedFields=[]), "status": {"x": 1}},
            {**configmap("a", "n", resourceVersion="2"), "status": {"x": 2}},
            False,
            id="server-fields-and-status",
        ),
        pytest.param(configmap("a", "n"), configmap("a", "n", labels={"a": "b"}), True, id="label"),
        pytest.param(
            configmap("a", "n"), configmap("a", "n", annotations={"a": "b"}), True, id="annotation"
        ),
        pytest.param(configmap("a", "n"), {**configmap("a", "n"), "data": {}}, True, id="data"),
    ],
)
def test_drift(existing: Any, dry_run: Any, drifted: bool) -> None:
    assert has_drifted(existing, dry_run) is drifted


@pytest.mark.parametrize(
    ("api_version", "kind", "stage"),
    [
        pytest.param("apiextensions.k8s.io/v1", "CustomResourceDefinition", 0, id="crd"),
        pytest.param("v1", "Namespace", 0, id="namespace"),
        pytest.param("rbac.authorization.k8s.io/v1", "ClusterRole", 0, id="clusterrole"),
        pytest.param("example.com/v1", "Namespace", 2, id="not-core-namespace"),
        pytest.param("storage.k8s.io/v1", "StorageClass", 1, id="class"),
        pytest.param("apps/v1", "Deployment", 2, id="other"),
    ],
)
def test_stages(api_version: str, kind: str, stage: int) -> None:
    assert stage_of({"apiVersion": api_version, "kind": kind}) == stage


@pytest.mark.parametrize(
    ("oid", "stage"),
    [
        pytest.param(ObjectId("", "ConfigMap", "a", "c"), 0, id="first"),
        pytest.param(
            ObjectId("apiextensions.k8s.io", "CustomResourceDefinition", "", "w"), 1, id="crd"
        ),
        pytest.param(ObjectId("", "Namespace", "", "a"), 2, id="namespace-last"),
    ],
)
def test_prune_stages(oid: ObjectId, stage: int) -> None:
    assert prune_stage_of(oid) == stage


def test_what_the_set_defines() -> None:
    objects = [
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"kind": "Widget"},
                "versions": [{"name": "v1"}, {"name": "v2"}],
            },
        },
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}},
        configmap("a", "apps"),
    ]
    assert crd_kinds(objects) == {
        ("example.com/v1", "Widget"): "widgets.example.com",
        ("example.com/v2", "Widget"): "widgets.example.com",
    }
    assert namespaces(objects) == {"apps"}
