"""The shape of Flux's flux2-kustomize-helm-example, end to end from a local Git repository:
an `infrastructure` Kustomization creates a HelmRepository and a HelmRelease, and an
`apps` Kustomization, depending on it, creates its own HelmRelease. The source-,
kustomize- and helm-controllers run in-process with their production wiring.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from sluice_envtest.chartrepo import ChartRepository
from sluice_envtest.controlplane import free_port
from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.harness import Observer, condition, make_secret, running_service
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import ResourceType

from .conftest import CONFIG_MAP, HELMRELEASE

GITREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")
KUSTOMIZATION = ResourceType("kustomize.toolkit.fluxcd.io", "v1", "kustomizations", "Kustomization")


@pytest_asyncio.fixture(loop_scope="session")
async def observe(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[Observer]:
    from helm_controller import __main__ as helm_main
    from kustomize_controller import __main__ as kustomize_main
    from source_controller import __main__ as source_main

    port = free_port()
    kubeconfig = str(cluster.kubeconfig)
    async with (
        running_service(
            source_main,
            kubeconfig=kubeconfig,
            namespace=namespace,
            argv=[
                "--storage-path", str(tmp_path / "storage"),
                "--storage-addr", f"127.0.0.1:{port}",
                "--storage-adv-addr", f"127.0.0.1:{port}",
            ],
        ),
        running_service(
            kustomize_main, kubeconfig=kubeconfig, namespace=namespace,
            argv=["--requeue-dependency", "1s"],
        ),
        running_service(
            helm_main, kubeconfig=kubeconfig, namespace=namespace,
            argv=["--requeue-dependency", "1s"],
        ),
    ):  # fmt: skip
        yield Observer(kube, namespace)


def helm_release(name: str, chart: str, greeting: str) -> str:
    return f"""apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: {name}
spec:
  interval: 1h
  chart:
    spec:
      chart: {chart}
      version: ">=1.0.0"
      sourceRef:
        kind: HelmRepository
        name: charts
  install:
    remediation:
      retries: 3
  values:
    greeting: {greeting}
"""


async def test_infrastructure_then_apps_from_git(
    observe: Observer, git_http: GitHttpServer, tmp_path: Path
) -> None:
    kube, ns = observe.client, observe.namespace
    charts = ChartRepository(tmp_path / "repo", username="charts", password="s3cret-pw")
    charts.add("ingress", "4.0.0")
    charts.add("podinfo", "6.5.0")
    await charts.start()
    try:
        await make_secret(kube, ns, "charts-auth", {"username": "charts", "password": "s3cret-pw"})
        work = git_http.create_repo(f"fleet-{ns}")
        work.commit(
            "fleet",
            files={
                "infrastructure/kustomization.yaml": (
                    "resources: [repository.yaml, ingress.yaml]\n"
                ),
                "infrastructure/repository.yaml": f"""apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata:
  name: charts
spec:
  interval: 1h
  url: {charts.url}
  secretRef:
    name: charts-auth
""",
                "infrastructure/ingress.yaml": helm_release("ingress", "ingress", "infra"),
                "apps/kustomization.yaml": "resources: [podinfo.yaml]\n",
                "apps/podinfo.yaml": helm_release("podinfo", "podinfo", "apps"),
            },
        )
        work.push()
        await kube.create(
            GITREPO,
            {
                "apiVersion": "source.toolkit.fluxcd.io/v1",
                "kind": "GitRepository",
                "metadata": {"name": "fleet"},
                "spec": {
                    "url": git_http.url(f"fleet-{ns}"),
                    "interval": "1h",
                    "ref": {"branch": "main"},
                },
            },
            namespace=ns,
        )
        for name, path, extra in (
            ("infrastructure", "./infrastructure", {"wait": True}),
            ("apps", "./apps", {"dependsOn": [{"name": "infrastructure"}], "wait": True}),
        ):
            await kube.create(
                KUSTOMIZATION,
                {
                    "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                    "kind": "Kustomization",
                    "metadata": {"name": name},
                    "spec": {
                        "interval": "1h",
                        "path": path,
                        "prune": True,
                        "targetNamespace": ns,
                        "timeout": "2m",
                        "sourceRef": {"kind": "GitRepository", "name": "fleet"},
                        **extra,
                    },
                },
                namespace=ns,
            )
        apps = await observe.wait_ready(KUSTOMIZATION, "apps", timeout=120)
        infra = await observe.get(KUSTOMIZATION, "infrastructure")
        # apps waited for infrastructure, whose wait covered its HelmRelease being Ready.
        assert (
            condition(infra, "Ready")["lastTransitionTime"]
            <= condition(apps, "Ready")["lastTransitionTime"]
        )  # type: ignore[index]
        for name, chart, greeting in (
            ("ingress", "ingress-4.0.0", "infra"),
            ("podinfo", "podinfo-6.5.0", "apps"),
        ):
            hr = await observe.wait_ready(HELMRELEASE, name, timeout=30)
            assert hr["status"]["history"][0]["chartVersion"] == chart.rsplit("-", 1)[1]
            cm = await kube.get(CONFIG_MAP, f"{name}-config", ns)
            assert cm["data"]["greeting"] == greeting
            assert cm["metadata"]["labels"]["chart"] == chart
    finally:
        await charts.stop()
