"""The binary's own defaults are the multi-tenancy lockdown: a resourceset-controller
started with none of its flags applies a ResourceSet naming no service account as its
namespace's `default` account, never as itself (issue 32, item 10)."""

from __future__ import annotations

import contextlib

from sluice_envtest.harness import Observer, condition, running_service
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import ResourceType

from .conftest import RSET

CLUSTER_ROLE_BINDING = ResourceType(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding"
)


async def test_a_controller_started_without_flags_cannot_be_made_cluster_admin(
    cluster: Cluster, kube: KubeClient, namespace: str
) -> None:
    from resourceset_controller import __main__ as rset_main

    name = f"escalate-{namespace}"[:63]
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}],
    }
    observe = Observer(kube, namespace)
    try:
        async with running_service(
            rset_main, kubeconfig=str(cluster.kubeconfig), namespace=namespace, open_tenancy=False
        ):
            await kube.create(
                RSET,
                {
                    "apiVersion": RSET.api_version,
                    "kind": "ResourceSet",
                    "metadata": {"name": "escalate", "namespace": namespace},
                    "spec": {"resources": [binding]},
                },
                namespace=namespace,
            )
            obj = await observe.wait(
                RSET,
                "escalate",
                lambda o: "forbidden" in (condition(o, "Ready") or {}).get("message", ""),
                what="refused",
            )
        message = condition(obj, "Ready")["message"]  # type: ignore[index]
        assert f"ClusterRoleBinding/{name}" in message
        assert "forbidden" in message.lower()
        assert f"system:serviceaccount:{namespace}:default" in message
        with contextlib.suppress(NotFound):
            await kube.get(CLUSTER_ROLE_BINDING, name)
            raise AssertionError(f"ClusterRoleBinding {name} was created")
    finally:
        with contextlib.suppress(NotFound):
            await kube.delete(CLUSTER_ROLE_BINDING, name)
