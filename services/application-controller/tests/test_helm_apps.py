"""The seed's Helm use cases (ks-devops#767) with their manifests, against the real
control plane and the real helm: (1) a chart from Git with valuesFiles, (2) the same
saved as a template, (3) an Application using that template."""

from __future__ import annotations

from typing import Any

from sluice_envtest.harness import condition

from .conftest import APPLICATION, CONFIG_MAP, HELMCHART, HELMRELEASE, HELMREPO, Fleet

CHART_TEMPLATE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
data:
  provider: {{ .Values.clouds.provider | quote }}
  region: {{ .Values.region | quote }}
"""


def chart_repo(f: Fleet) -> None:
    """The Git repository of the use cases: ./helm-chart with two values files."""
    repo = f.repo("fluxcd-github-repo")
    repo.commit(
        "chart",
        files={
            "helm-chart/Chart.yaml": (
                "apiVersion: v2\nname: demo\nversion: 0.1.0\ntype: application\n"
            ),
            "helm-chart/values.yaml": "clouds:\n  provider: none\nregion: default\n",
            "helm-chart/aliyun-values.yaml": "clouds:\n  provider: aliyun\n",
            "helm-chart/templates/configmap.yaml": CHART_TEMPLATE,
        },
    )
    repo.push()


# Use case 1, verbatim but for the namespace.
USE_CASE_1 = """\
apiVersion: gitops.kubesphere.io/v1alpha1
kind: Application
metadata:
  name: chengleqi-test-application-1
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
            interval: 5m0s
            chart: ./helm-chart
            version: "0.1.0"
            valuesFiles:
              - ./helm-chart/values.yaml
              - ./helm-chart/aliyun-values.yaml
            reconcileStrategy: Revision
          template:
          deploy:
            - destination:
                kubeConfig:
                targetNamespace: app
              interval: 1m0s
              upgrade:
                remediation:
                  remediateLastFailure: true
                force: true
              install:
                createNamespace: true
"""

# Use case 2: the label is the only change.
USE_CASE_2 = USE_CASE_1.replace(
    "  name: chengleqi-test-application-1\n  namespace: my-devops-projecthmhx2\n",
    "  name: chengleqi-test-application-2\n  namespace: my-devops-projecthmhx2\n"
    '  labels:\n    gitops.kubesphere.io/save-helmtemplate: "true"\n',
)

# Use case 3, verbatim but for the namespace and the template's name (the template
# use case 2 saved is named for its Application).
USE_CASE_3 = """\
apiVersion: gitops.kubesphere.io/v1alpha1
kind: Application
metadata:
  name: chengleqi-test-application-3
  namespace: my-devops-projecthmhx2
spec:
  kind: fluxcd
  fluxApp:
    spec:
      source:
      config:
        helmRelease:
          chart:
          # template field reference a template that created before by the name
          template: my-devops-projecthmhx2-chengleqi-test-application
          deploy:
            - destination:
                kubeConfig:
                targetNamespace: app
              interval: 1m0s
              upgrade:
                remediation:
                  remediateLastFailure: true
                force: true
              install:
                createNamespace: true
"""


def adapted(text: str, ns: str) -> str:
    return text.replace(
        "my-devops-projecthmhx2-chengleqi-test-application", "chengleqi-test-application-2"
    ).replace("my-devops-projecthmhx2", ns)


async def released(f: Fleet, app: str) -> dict[str, Any]:
    """The Application once Ready, after checking its one HelmRelease released the chart."""
    obj = await f.observe.wait_ready(APPLICATION, app, timeout=90)
    assert obj["metadata"]["labels"]["gitops.kubesphere.io/ready-number"] == "1-1"
    assert obj["metadata"]["labels"]["gitops.kubesphere.io/app-type"] == "HelmRelease"
    status = obj["status"]["fluxApp"]["helmReleaseStatus"]["app"]
    assert status["history"][0]["chartName"] == "demo"
    return obj


async def test_seed_use_cases_1_to_3_git_chart_saved_template_and_its_reuse(fleet: Fleet) -> None:
    f = fleet
    ns = f.namespace
    chart_repo(f)
    await f.git_repository("fluxcd-github-repo")

    # 1. A HelmRelease from the Git chart, values files merged in order.
    await f.kubectl("apply", "-f", "-", stdin=adapted(USE_CASE_1, ns))
    await released(f, "chengleqi-test-application-1")
    hr = await f.kube.get(HELMRELEASE, "chengleqi-test-application-1-app", ns)
    assert hr["spec"]["chart"]["spec"] == {
        "chart": "./helm-chart",
        "version": "0.1.0",
        "interval": "5m0s",
        "reconcileStrategy": "Revision",
        "valuesFiles": ["./helm-chart/values.yaml", "./helm-chart/aliyun-values.yaml"],
        "sourceRef": {"kind": "GitRepository", "name": "fluxcd-github-repo", "namespace": ns},
    }
    assert hr["spec"]["targetNamespace"] == "app"
    assert hr["spec"]["upgrade"] == {"remediation": {"remediateLastFailure": True}, "force": True}
    assert hr["spec"]["install"] == {"createNamespace": True}
    assert "kubeConfig" not in hr["spec"]
    release = "app-chengleqi-test-application-1-app"
    cm = await f.kube.get(CONFIG_MAP, f"{release}-config", "app")
    assert cm["data"] == {"provider": "aliyun", "region": "default"}
    assert [r["name"] for r in f.helm_list(f.cluster.kubeconfig, "app")] == [release]
    templates = await f.kube.list(
        HELMCHART, namespace=ns, label_selector="gitops.kubesphere.io/helm-template=true"
    )
    assert templates.items == [], "no template without the label"

    # 2. The same with the save label: a template named for the Application.
    await f.kubectl("apply", "-f", "-", stdin=adapted(USE_CASE_2, ns))
    await released(f, "chengleqi-test-application-2")
    template = await f.kube.get(HELMCHART, "chengleqi-test-application-2", ns)
    assert template["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "gitops.kubesphere.io",
        "gitops.kubesphere.io/helm-template": "true",
    }
    assert template["metadata"]["annotations"] == {
        "gitops.kubesphere.io/helm-template-name": "chengleqi-test-application-2"
    }
    assert "ownerReferences" not in template["metadata"], "a template outlives its app"
    assert template["spec"]["sourceRef"] == {"kind": "GitRepository", "name": "fluxcd-github-repo"}
    assert template["spec"]["valuesFiles"] == [
        "./helm-chart/values.yaml",
        "./helm-chart/aliyun-values.yaml",
    ]
    # KubeSphere's code spells the label save-helm-template: accepted too.
    await f.kubectl(
        "apply",
        "-f",
        "-",
        stdin=adapted(USE_CASE_2, ns)
        .replace("save-helmtemplate", "save-helm-template")
        .replace("chengleqi-test-application-2", "other-spelling"),
    )
    await released(f, "other-spelling")
    await f.observe.wait(HELMCHART, "other-spelling", lambda o: True)

    # The app that saved it goes; the template stays, and use case 3 deploys from it.
    await f.kubectl("delete", "application", "chengleqi-test-application-2", "--wait=true")
    await f.kubectl("apply", "-f", "-", stdin=adapted(USE_CASE_3, ns))
    obj = await released(f, "chengleqi-test-application-3")
    hr = await f.kube.get(HELMRELEASE, "chengleqi-test-application-3-app", ns)
    assert hr["spec"]["chart"]["spec"] == {
        "chart": "./helm-chart",
        "version": "0.1.0",
        "interval": "5m0s",
        "reconcileStrategy": "Revision",
        "valuesFiles": ["./helm-chart/values.yaml", "./helm-chart/aliyun-values.yaml"],
        "sourceRef": {"kind": "GitRepository", "name": "fluxcd-github-repo", "namespace": ns},
    }
    cm = await f.kube.get(CONFIG_MAP, "app-chengleqi-test-application-3-app-config", "app")
    assert cm["data"]["provider"] == "aliyun"
    ready = condition(obj, "Ready")
    assert ready is not None and ready["message"] == "1/1 HelmRelease ready"
    releases = {r["name"] for r in f.helm_list(f.cluster.kubeconfig, "app")}
    assert "app-chengleqi-test-application-3-app" in releases
    assert "app-chengleqi-test-application-2-app" not in releases, "deleting an app uninstalls"


async def test_a_chart_from_a_helm_repository_saved_and_reused(fleet: Fleet) -> None:
    f = fleet
    ns = f.namespace
    f.charts.add("podinfo", "6.5.0", values={"greeting": "repo"})
    await f.kube.create(
        HELMREPO,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "HelmRepository",
            "metadata": {"name": "charts"},
            "spec": {"url": f.charts.url, "interval": "1h"},
        },
        namespace=ns,
    )
    saver = f"""\
apiVersion: gitops.kubesphere.io/v1alpha1
kind: Application
metadata:
  name: podinfo
  labels:
    gitops.kubesphere.io/save-helm-template: "true"
spec:
  kind: fluxcd
  fluxApp:
    spec:
      source:
        sourceRef:
          kind: HelmRepository
          name: charts
          namespace: {ns}
      config:
        helmRelease:
          chart:
            chart: podinfo
            version: "6.*"
          deploy:
            - destination:
                targetNamespace: {ns}
"""
    await f.kubectl("apply", "-f", "-", stdin=saver)
    await f.observe.wait_ready(APPLICATION, "podinfo", timeout=90)
    template = await f.kube.get(HELMCHART, "podinfo", ns)
    assert template["spec"]["sourceRef"] == {"kind": "HelmRepository", "name": "charts"}
    assert template["spec"]["version"] == "6.*"
    user = saver.replace(
        'name: podinfo\n  labels:\n    gitops.kubesphere.io/save-helm-template: "true"\n',
        "name: reuse\n",
    )
    user = user.replace(
        '          chart:\n            chart: podinfo\n            version: "6.*"\n',
        "          template: podinfo\n",
    )
    await f.kubectl("apply", "-f", "-", stdin=user)
    await f.observe.wait_ready(APPLICATION, "reuse", timeout=90)
    # Two releases of the repository's chart, one per Application (names shortened by
    # the helm-controller past 53 characters, as Flux does).
    charts = [r["chart"] for r in f.helm_list(f.cluster.kubeconfig, ns)]
    assert charts == ["podinfo-6.5.0", "podinfo-6.5.0"]
