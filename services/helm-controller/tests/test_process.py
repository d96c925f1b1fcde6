"""The helm-controller started as a user starts it: `python -m helm_controller`
with nothing but `$KUBECONFIG` saying where the cluster is (the flag's help
says it is the default). helm must reach the same cluster as the controller's
own client, as the controller and as a tenant it impersonates."""

from __future__ import annotations

import asyncio
import sys
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest_asyncio

from sluice_envtest.chartrepo import ChartRepository
from sluice_envtest.controlplane import free_port
from sluice_envtest.harness import (
    ROLE_BINDING,
    Observer,
    condition,
    make_tenant,
    running_service,
    source_storage_argv,
)
from sluice_envtest.processes import log_tail, spawn, stop, wait_ready
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.kube.client import KubeClient

from .conftest import HELMRELEASE, HelmDelivery


@dataclass
class HelmControllerProcess:
    delivery: HelmDelivery
    log: Path


@pytest_asyncio.fixture(loop_scope="session")
async def helm_process(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[HelmControllerProcess]:
    """The source-controller in-process; the helm-controller as its own process
    whose environment names the cluster only through $KUBECONFIG (and a HOME
    without a ~/.kube/config, so nothing else can)."""
    from source_controller import __main__ as source_main

    charts = ChartRepository(tmp_path / "repo", username="charts", password="s3cret-pw")
    await charts.start()
    home = tmp_path / "home"
    home.mkdir()
    health = free_port()
    log = tmp_path / "helm-controller.log"
    argv = [
        sys.executable, "-m", "helm_controller",
        "--watch-namespace", namespace,
        "--health-addr", f"127.0.0.1:{health}",
        "--metrics-addr", f"127.0.0.1:{health}",
        "--min-retry-delay", "200ms",
        "--max-retry-delay", "2s",
    ]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "KUBECONFIG": str(cluster.kubeconfig)}
    try:
        async with running_service(
            source_main,
            kubeconfig=str(cluster.kubeconfig),
            namespace=namespace,
            argv=source_storage_argv(tmp_path / "storage"),
        ) as source:
            process = spawn(argv, log=log, env=env, cwd=home)

            def ready() -> bool:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2):
                        return True
                except OSError:
                    return False

            try:
                await asyncio.to_thread(
                    wait_ready, ready, process=process, name="helm-controller", log=log, timeout=60
                )
                delivery = HelmDelivery(
                    kube,
                    namespace,
                    charts,
                    Observer(kube, namespace),
                    str(cluster.kubeconfig),
                    source,  # the only in-process runtime: the helm-controller is the process
                    home,
                )
                yield HelmControllerProcess(delivery, log)
            finally:
                await asyncio.to_thread(stop, process, grace=30)
    finally:
        await charts.stop()


async def test_the_kubeconfig_from_the_environment_reaches_helm(
    helm_process: HelmControllerProcess,
) -> None:
    d = helm_process.delivery
    await make_tenant(d.kube, d.namespace, ["configmaps", "secrets"])
    # Started with no flags, the controller is locked down: a HelmRelease naming no
    # service account is released as its namespace's `default` account.
    await d.kube.create(
        ROLE_BINDING,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "default-tenant", "namespace": d.namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": d.namespace}],
        },
    )
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    await d.helm_release("web")
    await d.helm_release("tenant", serviceAccountName="tenant")
    for name in ("web", "tenant"):
        try:
            obj = await d.observe.wait_ready(HELMRELEASE, name, timeout=90)
        except AssertionError as error:
            raise AssertionError(f"{error}\n{log_tail(helm_process.log)}") from None
        ready = condition(obj, "Ready")
        assert ready is not None and ready["reason"] == "InstallSucceeded"
        assert obj["status"]["history"][0]["status"] == "deployed"
    # helm installed them on the test's cluster, where a person's helm sees them.
    assert sorted(r["name"] for r in d.helm("list")) == ["tenant", "web"]
