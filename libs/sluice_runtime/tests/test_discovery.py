"""The REST mapper against the real API server's discovery documents."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.discovery import RestMapper, UnknownKind
from sluice_runtime.kube.errors import KubeError
from sluice_runtime.kube.installing import install_crds
from sluice_runtime.kube.resources import CRD, ResourceType


def crd_manifest(group: str, kind: str, *, scope: str = "Namespaced") -> dict[str, Any]:
    """A minimal CRD whose objects accept any spec."""
    plural = kind.lower() + "s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {
                "kind": kind,
                "plural": plural,
                "singular": kind.lower(),
                "listKind": f"{kind}List",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


def unique_group() -> str:
    return f"t{secrets.token_hex(3)}.sluice.test"


@pytest_asyncio.fixture(loop_scope="session")
async def group(kube: KubeClient) -> AsyncIterator[str]:
    """A fresh API group; CRDs of it are deleted after the test (CRDs are cluster-wide)."""
    name = unique_group()
    yield name
    listed = await kube.list(CRD)
    for crd in listed.items:
        if crd["spec"]["group"] == name:
            with contextlib.suppress(KubeError):
                await kube.delete(CRD, crd["metadata"]["name"])


@pytest.mark.parametrize(
    ("api_version", "kind", "expected"),
    [
        pytest.param(
            "v1", "ConfigMap", ResourceType("", "v1", "configmaps", "ConfigMap"), id="core"
        ),
        pytest.param(
            "v1",
            "Namespace",
            ResourceType("", "v1", "namespaces", "Namespace", namespaced=False),
            id="core-cluster",
        ),
        pytest.param("v1", "Pod", ResourceType("", "v1", "pods", "Pod"), id="subresources-ignored"),
        pytest.param(
            "apps/v1",
            "Deployment",
            ResourceType("apps", "v1", "deployments", "Deployment"),
            id="group",
        ),
        pytest.param(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            ResourceType(
                "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False
            ),
            id="group-cluster",
        ),
    ],
)
async def test_resource_for_built_in_kinds(
    kube: KubeClient, api_version: str, kind: str, expected: ResourceType
) -> None:
    assert await RestMapper(kube).resource_for(api_version, kind) == expected


async def test_group_versions_are_cached(kube: KubeClient) -> None:
    mapper = RestMapper(kube)
    await mapper.resource_for("apps/v1", "Deployment")
    before = kube.request_count
    await mapper.resource_for("apps/v1", "StatefulSet")
    await mapper.resource_for("apps/v1", "Deployment")
    assert kube.request_count == before
    mapper.invalidate()
    await mapper.resource_for("apps/v1", "Deployment")
    assert kube.request_count == before + 1


@pytest.mark.parametrize(
    ("api_version", "kind", "message"),
    [
        pytest.param(
            "v1",
            "Foo",
            "the API server serves no kind 'Foo' in 'v1' (check kind and apiVersion)",
            id="unknown-built-in-kind",
        ),
        pytest.param(
            "example.com/v1",
            "Foo",
            "the API server serves no kind 'Foo' in 'example.com/v1' "
            "(install its CustomResourceDefinition first, or add it to the same set)",
            id="unknown-group",
        ),
        # A built-in kind in a version the server does not serve: no CRD to install.
        pytest.param(
            "apps/v9",
            "Deployment",
            "the API server does not serve Deployment in 'apps/v9' "
            "(use a version it serves: apps/v1)",
            id="unserved-version",
        ),
        pytest.param(
            "v9",
            "ConfigMap",
            "the API server does not serve ConfigMap in 'v9' (use a version it serves: v1)",
            id="unserved-core-version",
        ),
    ],
)
async def test_unknown_kinds_raise_a_clear_error(
    kube: KubeClient, api_version: str, kind: str, message: str
) -> None:
    with pytest.raises(UnknownKind) as caught:
        await RestMapper(kube).resource_for(api_version, kind)
    assert str(caught.value) == message
    assert "CRD installed" not in str(caught.value)
    assert (caught.value.api_version, caught.value.kind) == (api_version, kind)


async def test_a_miss_refreshes_once_so_new_crds_are_found(kube: KubeClient, group: str) -> None:
    mapper = RestMapper(kube)
    with pytest.raises(UnknownKind):
        await mapper.resource_for(f"{group}/v1", "Widget")
    await install_crds(
        kube, [crd_manifest(group, "Widget"), crd_manifest(group, "Gadget", scope="Cluster")]
    )
    widget = await mapper.resource_for(f"{group}/v1", "Widget")
    assert widget == ResourceType(group, "v1", "widgets", "Widget", namespaced=True)
    # Gadget came with the same refresh: no request needed.
    before = kube.request_count
    gadget = await mapper.resource_for(f"{group}/v1", "Gadget")
    assert gadget.namespaced is False and kube.request_count == before


async def test_resource_for_kind_uses_any_served_version(kube: KubeClient, group: str) -> None:
    mapper = RestMapper(kube)
    assert (await mapper.resource_for_kind("", "Secret")).plural == "secrets"
    assert (await mapper.resource_for_kind("apps", "DaemonSet")).version == "v1"
    with pytest.raises(UnknownKind):
        await mapper.resource_for_kind(group, "Widget")
    await install_crds(kube, [crd_manifest(group, "Widget")])
    assert (await mapper.resource_for_kind(group, "Widget")).plural == "widgets"


@pytest.mark.parametrize(
    ("kind", "api_version"),
    [
        pytest.param("ConfigMap", "v1", id="core"),
        pytest.param("Deployment", "apps/v1", id="apps"),
        pytest.param("CronJob", "batch/v1beta1", id="batch-preferred-on-1.20"),
        pytest.param("ClusterRole", "rbac.authorization.k8s.io/v1", id="rbac"),
    ],
)
async def test_resource_for_any_group_finds_a_kind_named_alone(
    kube: KubeClient, kind: str, api_version: str
) -> None:
    """v1beta1 health checks name only a kind, e.g. `kind: Deployment`."""
    found = await RestMapper(kube).resource_for_any_group(kind)
    assert (found.api_version, found.kind) == (api_version, kind)


async def test_resource_for_any_group_sees_new_crds_and_caches(
    kube: KubeClient, group: str
) -> None:
    mapper = RestMapper(kube)
    kind = "Sprocket" + secrets.token_hex(3)
    with pytest.raises(UnknownKind):
        await mapper.resource_for_any_group(kind)
    await install_crds(kube, [crd_manifest(group, kind)])
    found = await mapper.resource_for_any_group(kind)
    assert (found.group, found.kind) == (group, kind)
    before = kube.request_count
    await mapper.resource_for_any_group("Deployment")
    await mapper.resource_for_any_group(kind)
    assert kube.request_count == before, "answers come from the cache"
