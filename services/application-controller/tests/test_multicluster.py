"""The seed's use case 4 (ks-devops#767) with its manifest: one Application, two
clusters, each release with its own values, both visible with `helm list` there.

`stage-kubeconfig` holds the host control plane's kubeconfig and
`prod-kubeconfig` the second control plane's, so the manifest is used as written.
"""

from __future__ import annotations

import contextlib
from typing import Any

from sluice_envtest.harness import make_config_map, make_secret
from sluice_runtime.kube.errors import Conflict
from sluice_runtime.kube.resources import NAMESPACE

from .conftest import APPLICATION, CONFIG_MAP, HELMCHART, HELMRELEASE, Fleet, remote_namespace
from .test_helm_apps import chart_repo

USE_CASE_4 = """\
apiVersion: gitops.kubesphere.io/v1alpha1
kind: Application
metadata:
  name: chengleqi-test-application-4
  namespace: my-devops-projecthmhx2
spec:
  kind: fluxcd
  fluxApp:
    spec:
      source:
        sourceRef:
          kind: GitRepository
          name: fluxcd-github-repo
          namespace: my-devops-projecthmhx2
      config:
        helmRelease:
          chart:
          # template field reference a template that created before by the name
          template: my-devops-projecthmhx2-chengleqi-test-application
          deploy:
            - destination:
                kubeConfig:
                  secretRef:
                    name: stage-kubeconfig
                targetNamespace: app
              valuesFrom:
                - kind: ConfigMap
                  name: stage-settings
              values:
                clouds:
                  provider: qingcloud
              install:
                remediation:
                  retries: 3
            - destination:
                kubeConfig:
                  secretRef:
                    name: prod-kubeconfig
                targetNamespace: app
              valuesFrom:
                - kind: Secret
                  name: dbpass
              values:
                clouds:
                  provider: aliyun
              upgrade:
                remediation:
                  remediateLastFailure: true
                force: true
              interval: 1m0s
"""


async def test_seed_use_case_4_two_clusters_each_with_its_own_values(
    fleet: Fleet, second_cluster: Any
) -> None:
    f = fleet
    ns = f.namespace
    chart_repo(f)
    await f.git_repository("fluxcd-github-repo")
    # The template use case 4 names, saved before (as the seed's HelmChart example).
    await f.kube.create(
        HELMCHART,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "HelmChart",
            "metadata": {
                "name": "chengleqi-test-application",
                "labels": {"gitops.kubesphere.io/helm-template": "true"},
            },
            "spec": {
                "interval": "5m0s",
                "chart": "./helm-chart",
                "reconcileStrategy": "Revision",
                "sourceRef": {"kind": "GitRepository", "name": "fluxcd-github-repo"},
            },
        },
        namespace=ns,
    )
    await make_config_map(f.kube, ns, "stage-settings", {"values.yaml": "region: stage\n"})
    await make_secret(f.kube, ns, "dbpass", {"values.yaml": "region: prod\n"})
    await make_secret(f.kube, ns, "stage-kubeconfig", {"value": f.cluster.kubeconfig.read_text()})
    await make_secret(
        f.kube, ns, "prod-kubeconfig", {"value": second_cluster.kubeconfig.read_text()}
    )
    with contextlib.suppress(Conflict):
        await f.kube.create(
            NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}
        )
    remote = await remote_namespace(second_cluster, "app")
    try:
        manifest = USE_CASE_4.replace(
            "my-devops-projecthmhx2-chengleqi-test-application", "chengleqi-test-application"
        ).replace("my-devops-projecthmhx2", ns)
        await f.kubectl("apply", "-f", "-", stdin=manifest)

        app = await f.observe.wait_ready(APPLICATION, "chengleqi-test-application-4", timeout=120)
        assert app["metadata"]["labels"]["gitops.kubesphere.io/ready-number"] == "2-2"
        statuses = app["status"]["fluxApp"]["helmReleaseStatus"]
        assert set(statuses) == {"stage-kubeconfig-app", "prod-kubeconfig-app"}

        stage_release = "app-chengleqi-test-application-4-stage-kubeconfig-app"
        prod_release = "app-chengleqi-test-application-4-prod-kubeconfig-app"
        on_host = {r["name"] for r in f.helm_list(f.cluster.kubeconfig, "app")}
        on_second = {r["name"] for r in f.helm_list(second_cluster.kubeconfig, "app")}
        assert stage_release in on_host and stage_release not in on_second
        assert on_second == {prod_release}
        stage = await f.kube.get(CONFIG_MAP, f"{stage_release}-config", "app")
        prod = await remote.get(CONFIG_MAP, f"{prod_release}-config", "app")
        assert stage["data"] == {"provider": "qingcloud", "region": "stage"}
        assert prod["data"] == {"provider": "aliyun", "region": "prod"}

        child = await f.kube.get(
            HELMRELEASE, "chengleqi-test-application-4-prod-kubeconfig-app", ns
        )
        assert child["spec"]["kubeConfig"] == {"secretRef": {"name": "prod-kubeconfig"}}
        assert child["spec"]["interval"] == "1m0s"
        assert child["spec"]["chart"]["spec"]["sourceRef"] == {
            "kind": "GitRepository",
            "name": "fluxcd-github-repo",
            "namespace": ns,
        }
        history = statuses["prod-kubeconfig-app"]["history"][0]
        assert (history["name"], history["status"]) == (prod_release, "deployed")
    finally:
        await remote.close()
