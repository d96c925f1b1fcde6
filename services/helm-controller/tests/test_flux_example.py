"""The shape of Flux's flux2-kustomize-helm-example, end to end from a local Git repository:
an `infrastructure` Kustomization creates a HelmRepository and a HelmRelease, and an
`apps` Kustomization, depending on it, creates its own HelmRelease; in the example's
current (Flux 2.7) shape, an ArtifactGenerator splits the repository into the
ExternalArtifacts those Kustomizations apply. The source-, kustomize- and
helm-controllers run in-process with their production wiring.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from sluice_api import ArtifactGenerator, ExternalArtifact
from sluice_envtest.chartrepo import ChartRepository
from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.harness import (
    GITREPO,
    Observer,
    condition,
    make_git_repository,
    make_secret,
    running_service,
    source_storage_argv,
)
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import ResourceType

from .conftest import CONFIG_MAP, HELMRELEASE

KUSTOMIZATION = ResourceType("kustomize.toolkit.fluxcd.io", "v1", "kustomizations", "Kustomization")
GENERATOR = ResourceType.of_model(ArtifactGenerator)
EXTERNAL = ResourceType.of_model(ExternalArtifact)


@pytest_asyncio.fixture(loop_scope="session")
async def observe(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[Observer]:
    from helm_controller import __main__ as helm_main
    from kustomize_controller import __main__ as kustomize_main
    from source_controller import __main__ as source_main

    kubeconfig = str(cluster.kubeconfig)
    async with (
        running_service(
            source_main, kubeconfig=kubeconfig, namespace=namespace,
            argv=source_storage_argv(tmp_path / "storage"),
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


@pytest_asyncio.fixture(loop_scope="session")
async def charts(observe: Observer, tmp_path: Path) -> AsyncIterator[ChartRepository]:
    """The example's chart repository (ingress and podinfo), behind basic auth whose
    credentials are in Secret `charts-auth`."""
    repo = ChartRepository(tmp_path / "repo", username="charts", password="s3cret-pw")
    repo.add("ingress", "4.0.0")
    repo.add("podinfo", "6.5.0")
    await repo.start()
    try:
        auth = {"username": "charts", "password": "s3cret-pw"}
        await make_secret(observe.client, observe.namespace, "charts-auth", auth)
        yield repo
    finally:
        await repo.stop()


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
    observe: Observer, git_http: GitHttpServer, charts: ChartRepository
) -> None:
    kube, ns = observe.client, observe.namespace
    work = git_http.create_repo(f"fleet-{ns}")
    work.commit(
        "fleet",
        files={
            "infrastructure/kustomization.yaml": ("resources: [repository.yaml, ingress.yaml]\n"),
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
    await make_git_repository(kube, ns, "fleet", git_http.url(f"fleet-{ns}"))
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


def _example_repository(ns: str, charts_url: str) -> dict[str, str]:
    """The layout of Flux 2.7's flux2-kustomize-helm-example, cut to one chart per layer.

    clusters/staging holds what the bootstrap Kustomization applies: the
    ArtifactGenerator splitting the repository into an `infrastructure` and an
    `apps` ExternalArtifact, and the Kustomizations applying those. The apps
    artifact holds `base/` and `staging/` side by side, so staging's
    `../base/podinfo` resolves inside it, as in the example.
    """

    def repository(name: str) -> str:
        return f"""apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata:
  name: {name}
  namespace: {ns}
spec:
  interval: 1h
  url: {charts_url}
  secretRef:
    name: charts-auth
"""

    def release(name: str, repo: str) -> str:
        return f"""apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: {name}
  namespace: {ns}
spec:
  interval: 1h
  chart:
    spec:
      chart: {name}
      version: ">=1.0.0"
      sourceRef:
        kind: HelmRepository
        name: {repo}
  values:
    greeting: base
"""

    def kustomization(name: str, artifact: str, path: str, depends: str | None) -> str:
        depends_on = f"  dependsOn:\n    - name: {depends}\n" if depends else ""
        return f"""---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: {name}
  namespace: {ns}
spec:
  interval: 1h
  retryInterval: 2s
{depends_on}  sourceRef:
    kind: ExternalArtifact
    name: {artifact}
  path: {path}
  prune: true
  wait: true
  timeout: 2m
"""

    return {
        "clusters/staging/artifacts.yaml": f"""apiVersion: source.extensions.fluxcd.io/v1beta1
kind: ArtifactGenerator
metadata:
  name: flux-system
  namespace: {ns}
spec:
  sources:
    - alias: monorepo
      kind: GitRepository
      name: flux-system
  artifacts:
    - name: infrastructure
      originRevision: "@monorepo"
      copy:
        - from: "@monorepo/infrastructure/**"
          to: "@artifact/"
    - name: apps
      originRevision: "@monorepo"
      copy:
        - from: "@monorepo/apps/base/**"
          to: "@artifact/base/"
        - from: "@monorepo/apps/staging/**"
          to: "@artifact/staging/"
""",
        "clusters/staging/infrastructure.yaml": (
            kustomization("infra-controllers", "infrastructure", "./controllers/staging", None)
            + kustomization(
                "infra-configs", "infrastructure", "./configs/staging", "infra-controllers"
            )
        ),
        "clusters/staging/apps.yaml": kustomization("apps", "apps", "./staging", "infra-configs"),
        "infrastructure/controllers/base/ingress-nginx/kustomization.yaml": (
            "resources: [repository.yaml, release.yaml]\n"
        ),
        "infrastructure/controllers/base/ingress-nginx/repository.yaml": repository("ingress"),
        "infrastructure/controllers/base/ingress-nginx/release.yaml": release("ingress", "ingress"),
        "infrastructure/controllers/staging/kustomization.yaml": (
            "resources: [../base/ingress-nginx]\n"
        ),
        "infrastructure/configs/staging/kustomization.yaml": "resources: [issuer.yaml]\n",
        "infrastructure/configs/staging/issuer.yaml": (
            f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: issuer\n  namespace: {ns}\n"
            "data:\n  email: ops@example.com\n"
        ),
        "apps/base/podinfo/kustomization.yaml": "resources: [repository.yaml, release.yaml]\n",
        "apps/base/podinfo/repository.yaml": repository("podinfo"),
        "apps/base/podinfo/release.yaml": release("podinfo", "podinfo"),
        "apps/staging/kustomization.yaml": (
            "resources: [../base/podinfo]\n"
            "patches:\n  - path: podinfo-values.yaml\n    target: {kind: HelmRelease}\n"
        ),
        "apps/staging/podinfo-values.yaml": (
            "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\n"
            "metadata:\n  name: podinfo\nspec:\n  values:\n    greeting: staging\n"
        ),
        "apps/production/kustomization.yaml": "resources: [../base/podinfo]\n",
    }


async def test_the_example_through_an_artifact_generator_from_git(
    observe: Observer, git_http: GitHttpServer, charts: ChartRepository
) -> None:
    kube, ns = observe.client, observe.namespace
    work = git_http.create_repo(f"example-{ns}")
    commit = work.commit("example", files=_example_repository(ns, charts.url))
    work.push()
    await make_git_repository(kube, ns, "flux-system", git_http.url(f"example-{ns}"))
    # The bootstrap Kustomization, as `flux bootstrap` makes it, applies the cluster dir.
    await kube.create(
        KUSTOMIZATION,
        {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": "flux-system"},
            "spec": {
                "interval": "1h",
                "path": "./clusters/staging",
                "prune": True,
                "sourceRef": {"kind": "GitRepository", "name": "flux-system"},
            },
        },
        namespace=ns,
    )
    await observe.wait_ready(KUSTOMIZATION, "flux-system", timeout=60)
    apps = await observe.wait_ready(KUSTOMIZATION, "apps", timeout=180)
    generator = await observe.wait_ready(GENERATOR, "flux-system")
    assert sorted(r["name"] for r in generator["status"]["inventory"]) == [
        "apps",
        "infrastructure",
    ]
    external = await observe.get(EXTERNAL, "apps")
    artifact = external["status"]["artifact"]
    assert artifact["revision"] == f"latest@{artifact['digest']}"
    assert artifact["metadata"] == {"org.opencontainers.image.revision": f"main@sha1:{commit}"}
    assert external["spec"]["sourceRef"] == {
        "apiVersion": "source.extensions.fluxcd.io/v1beta1",
        "kind": "ArtifactGenerator",
        "name": "flux-system",
        "namespace": ns,
    }
    assert apps["status"]["lastAppliedRevision"] == artifact["revision"]
    for name, greeting in (("ingress", "base"), ("podinfo", "staging")):
        await observe.wait_ready(HELMRELEASE, name, timeout=60)
        cm = await kube.get(CONFIG_MAP, f"{name}-config", ns)
        assert cm["data"]["greeting"] == greeting
    assert (await kube.get(CONFIG_MAP, "issuer", ns))["data"] == {"email": "ops@example.com"}

    # A commit touching only apps/ gives apps a new artifact; infrastructure's digest stays.
    infra_digest = (await observe.get(EXTERNAL, "infrastructure"))["status"]["artifact"]["digest"]
    work.commit(
        "staging greeting",
        files={
            "apps/staging/podinfo-values.yaml": (
                "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\n"
                "metadata:\n  name: podinfo\nspec:\n  values:\n    greeting: hello\n"
            )
        },
    )
    work.push()
    await observe.poke(GITREPO, "flux-system", "next")
    await observe.wait(
        CONFIG_MAP,
        "podinfo-config",
        lambda o: o["data"]["greeting"] == "hello",
        timeout=90,
        what="podinfo upgraded from the new apps artifact",
    )
    infra = await observe.get(EXTERNAL, "infrastructure")
    assert infra["status"]["artifact"]["digest"] == infra_digest
    assert (await observe.get(EXTERNAL, "apps"))["status"]["artifact"]["digest"] != artifact[
        "digest"
    ]
