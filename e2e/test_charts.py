"""The cluster install: the Helm chart (charts/sluice) and the plain manifest
rendered from it (deploy/sluice.yaml) render, lint, keep the multi-tenant
lockdown, are accepted by a real API server, and drive real controllers."""

from __future__ import annotations

import asyncio
import functools
import importlib
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from application_controller import __main__ as application_main
from kustomize_controller import __main__ as kustomize_main
from sluice_cli import controllers
from sluice_envtest import manifest
from sluice_envtest.controlplane import free_port
from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.harness import Observer, condition, running_service
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime import app
from sluice_runtime.helming import helm_binary
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import ResourceType
from source_controller import __main__ as source_main

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "sluice"
DEPLOYMENT = ResourceType("apps", "v1", "deployments", "Deployment")
NETWORK_POLICY = ResourceType("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
CONFIG_MAP = ResourceType("", "v1", "configmaps", "ConfigMap")
GITREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")
KUSTOMIZATION = ResourceType("kustomize.toolkit.fluxcd.io", "v1", "kustomizations", "Kustomization")


# Every controller's flag parser, and its values section, from the one list of them.
MAINS: dict[str, ModuleType] = {
    c.name: importlib.import_module(f"{c.module}.__main__") for c in controllers.CONTROLLERS
}
VALUE_KEYS = {c.name: c.values_key for c in controllers.CONTROLLERS}
DEFAULT = set(controllers.DEFAULT)
ENABLE_ALL = tuple(f"{c.values_key}.create=true" for c in controllers.CONTROLLERS if not c.default)
"""Values that deploy the opt-in controllers too."""


Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _rendered(values: tuple[str, ...], namespace: str, crds: bool) -> str:
    return manifest.template(CHART, namespace=namespace, values=values, include_crds=crds)


def render(
    *values: str, namespace: str = "flux-system", crds: bool = False
) -> list[dict[str, Any]]:
    """The chart's objects with `values` (`--set` assignments); CRDs only if asked."""
    text = _rendered(values, namespace, crds)
    return [doc for doc in yaml.load_all(text, Loader=Loader) if doc]


def of_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return found


def options(deployment: dict[str, Any]) -> Any:
    """The Deployment's args as its controller's own flag parser reads them."""
    name = deployment["metadata"]["name"]
    module = MAINS[name]
    parser = app.parser(service=name, description=name, concurrency=1)
    add_arguments = getattr(module, "add_arguments", None)
    if add_arguments is not None:
        add_arguments(parser)
    return parser.parse_args(container(deployment)["args"])


async def run_off_loop(
    argv: list[str], *, input: str | None = None, capture_output: bool = True, text: bool = True
) -> subprocess.CompletedProcess[str]:
    """subprocess.run in a thread: the controllers under test share the event loop."""
    return await asyncio.to_thread(
        subprocess.run, argv, input=input, capture_output=capture_output, text=text
    )


def test_helm_lint_passes_with_default_and_other_values() -> None:
    helm = str(helm_binary())
    for values in ([], ["--set", "multitenancy.enabled=false,serviceMonitor.create=true"]):
        done = subprocess.run(
            [helm, "lint", "--strict", str(CHART), *values], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_install_has_one_deployment_per_controller_and_the_generated_crds() -> None:
    objects = render(crds=True)
    deployments = of_kind(objects, "Deployment")
    assert set(deployments) == DEFAULT
    crds = sorted(of_kind(objects, "CustomResourceDefinition"))
    generated = sorted(
        yaml.safe_load(p.read_text().split("---\n", 1)[1])["metadata"]["name"]
        for p in (ROOT / "crds").glob("*_*.yaml")
    )
    assert crds == generated
    for name, deployment in deployments.items():
        assert container(deployment)["command"] == [name]
        assert container(deployment)["image"] == "ghcr.io/sluice-gitops/sluice:0.1.0"
        assert "--enable-leader-election" in container(deployment)["args"]
        assert container(deployment)["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert deployment["metadata"]["namespace"] == "flux-system"
        assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == name


@pytest.mark.parametrize("name", controllers.NAMES)
def test_every_controller_parses_the_charts_arguments(name: str) -> None:
    parsed = options(of_kind(render(*ENABLE_ALL), "Deployment")[name])
    assert parsed.enable_leader_election is True
    assert parsed.log_level == "info"
    if name != "notification-controller":
        assert (
            parsed.events_addr == "http://notification-controller.flux-system.svc.cluster.local./"
        )


def test_the_install_locks_tenants_down() -> None:
    objects = render()
    deployments = of_kind(objects, "Deployment")
    for name in ("kustomize-controller", "helm-controller", "resourceset-controller"):
        parsed = options(deployments[name])
        assert parsed.no_cross_namespace_refs is True, name
        assert parsed.default_service_account == "default", name
    notification = options(deployments["notification-controller"])
    assert notification.no_cross_namespace_refs is True
    # ArtifactGenerators read only their own namespace's sources.
    assert options(deployments["source-controller"]).no_cross_namespace_refs is True
    # The event hub takes events from the deployed controllers only.
    assert set(notification.events_service_accounts.split(",")) == {
        "source-controller", "kustomize-controller", "helm-controller",
        "resourceset-controller", "gating-controller",
    }  # fmt: skip
    # The gating-controller takes neither flag (Gates refer to nothing across namespaces).
    assert not hasattr(options(deployments["gating-controller"]), "no_cross_namespace_refs")
    # No controller is cluster-admin: the appliers impersonate, and only the
    # platform's own ServiceAccount is bound to cluster-admin.
    admins = [
        subject
        for binding in of_kind(objects, "ClusterRoleBinding").values()
        if binding["roleRef"]["name"] == "cluster-admin"
        for subject in binding["subjects"]
    ]
    assert admins == [
        {"kind": "ServiceAccount", "name": "platform-admin", "namespace": "flux-system"}
    ]
    reconciler = of_kind(objects, "ClusterRole")["sluice-reconciler-flux-system"]
    assert {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]} in (
        reconciler["rules"]
    )
    binding = of_kind(objects, "ClusterRoleBinding")["sluice-reconciler-flux-system"]
    assert {s["name"] for s in binding["subjects"]} == {
        "kustomize-controller", "helm-controller", "resourceset-controller"
    }  # fmt: skip
    # Nothing else grants impersonation.
    for role in of_kind(objects, "ClusterRole").values():
        if role["metadata"]["name"] != "sluice-reconciler-flux-system":
            assert not any("impersonate" in r["verbs"] for r in role["rules"]), role["metadata"]


@pytest.mark.parametrize(
    ("values", "flags_on"),
    [
        pytest.param(("multitenancy.enabled=false",), False, id="lockdown-off"),
        pytest.param(("multitenancy.privileged=true",), True, id="lockdown-on-privileged"),
    ],
)
def test_privileged_appliers_are_bound_to_cluster_admin(
    values: tuple[str, ...], flags_on: bool
) -> None:
    objects = render(*values)
    deployments = of_kind(objects, "Deployment")
    kustomize = options(deployments["kustomize-controller"])
    assert kustomize.no_cross_namespace_refs is flags_on
    assert bool(kustomize.default_service_account) is flags_on
    assert options(deployments["notification-controller"]).no_cross_namespace_refs is flags_on
    assert options(deployments["source-controller"]).no_cross_namespace_refs is flags_on
    binding = of_kind(objects, "ClusterRoleBinding")["sluice-cluster-reconciler-flux-system"]
    assert binding["roleRef"]["name"] == "cluster-admin"
    assert {s["name"] for s in binding["subjects"]} == {
        "kustomize-controller", "helm-controller", "resourceset-controller"
    }  # fmt: skip
    assert "sluice-reconciler-flux-system" not in of_kind(objects, "ClusterRole")
    # The platform account exists only while a default account confines the rest.
    assert ("platform-admin" in of_kind(objects, "ServiceAccount")) is flags_on


def test_the_application_controller_is_opt_in_and_manages_only_flux_objects() -> None:
    assert "application-controller" not in of_kind(render(), "Deployment")
    objects = render("applicationController.create=true")
    deployment = of_kind(objects, "Deployment")["application-controller"]
    assert container(deployment)["command"] == ["application-controller"]
    parser = app.parser(service="application-controller", description="", concurrency=1)
    application_main.add_arguments(parser)
    parsed = parser.parse_args(container(deployment)["args"])
    assert parsed.events_addr == "http://notification-controller.flux-system.svc.cluster.local./"
    notification = options(of_kind(objects, "Deployment")["notification-controller"])
    assert "application-controller" in notification.events_service_accounts.split(",")
    # It writes HelmReleases, Kustomizations and HelmCharts, never what they deploy.
    binding = of_kind(objects, "ClusterRoleBinding")["sluice-crd-controller-flux-system"]
    assert "application-controller" in {s["name"] for s in binding["subjects"]}
    role = of_kind(objects, "ClusterRole")["sluice-crd-controller-flux-system"]
    assert "gitops.kubesphere.io" in role["rules"][0]["apiGroups"]
    for other in of_kind(objects, "ClusterRoleBinding").values():
        if other["roleRef"]["name"] in ("cluster-admin", "sluice-reconciler-flux-system"):
            assert "application-controller" not in {s["name"] for s in other["subjects"]}


@pytest.mark.parametrize("name", controllers.DEFAULT)
def test_a_disabled_controller_is_not_deployed(name: str) -> None:
    objects = render(f"{VALUE_KEYS[name]}.create=false")
    assert name not in of_kind(objects, "Deployment")
    assert name not in of_kind(objects, "ServiceAccount")
    assert set(of_kind(objects, "Deployment")) == DEFAULT - {name}
    subjects = {
        s["name"] for b in of_kind(objects, "ClusterRoleBinding").values() for s in b["subjects"]
    }
    assert name not in subjects
    if name == "notification-controller":
        # Nobody to post events to, and no webhook policy for a pod that is not there.
        for deployment in of_kind(objects, "Deployment").values():
            assert not any(a.startswith("--events-addr") for a in container(deployment)["args"])
        assert "allow-webhooks" not in of_kind(objects, "NetworkPolicy")
    else:
        notification = options(of_kind(objects, "Deployment")["notification-controller"])
        assert name not in notification.events_service_accounts.split(",")


@pytest.mark.parametrize("name", controllers.NAMES)
def test_per_controller_values_reach_the_deployment(name: str) -> None:
    key = VALUE_KEYS[name]
    objects = render(
        *ENABLE_ALL,
        f"{key}.replicas=3",
        f"{key}.concurrent=7",
        f"{key}.logLevel=debug",
        f"{key}.watchLabelSelector=sharding.fluxcd.io/key notin (shard1)",
        f"{key}.extraArgs={{--log-level=warning,--kube-api-qps=12}}",
        f"{key}.resources.limits.memory=2Gi",
        f"{key}.tmpSizeLimit=3Gi",
        f"{key}.extraEnv[0].name=TZ",
        f"{key}.extraEnv[0].value=UTC",
        f"{key}.nodeSelector.disk=ssd",
        f"{key}.tolerations[0].key=dedicated",
        f"{key}.tolerations[0].operator=Exists",
        f"{key}.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
        f"{key}.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.topologyKey=zone",
        f"{key}.podAnnotations.team=platform",
        f"{key}.priorityClassName=system-cluster-critical",
    )
    deployment = of_kind(objects, "Deployment")[name]
    pod = deployment["spec"]["template"]["spec"]
    assert {"name": "TZ", "value": "UTC"} in container(deployment)["env"]
    assert pod["nodeSelector"] == {"disk": "ssd"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert pod["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ] == [{"weight": 1, "podAffinityTerm": {"topologyKey": "zone"}}]
    assert deployment["spec"]["template"]["metadata"]["annotations"]["team"] == "platform"
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert deployment["spec"]["replicas"] == 3
    parsed = options(deployment)
    assert parsed.concurrent == 7
    assert parsed.watch_label_selector == "sharding.fluxcd.io/key notin (shard1)"
    # extraArgs come last, so they win over the chart's own flags.
    assert parsed.log_level == "warning"
    assert parsed.kube_api_qps == 12
    assert container(deployment)["resources"]["limits"]["memory"] == "2Gi"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tmp"]["emptyDir"]["sizeLimit"] == "3Gi"
    # The other controllers keep their defaults.
    for other, deployment in of_kind(objects, "Deployment").items():
        if other != name:
            assert deployment["spec"]["replicas"] == 1
            assert "--concurrent" not in " ".join(container(deployment)["args"])
            assert "nodeSelector" not in deployment["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("values", "image"),
    [
        pytest.param((), "ghcr.io/sluice-gitops/sluice:0.1.0", id="appVersion"),
        pytest.param(("image.tag=0.2.0",), "ghcr.io/sluice-gitops/sluice:0.2.0", id="tag"),
        pytest.param(
            ("image.tag=0.2.0", "image.digest=sha256:" + "a" * 64, "image.repository=r.io/s"),
            "r.io/s@sha256:" + "a" * 64,
            id="digest-wins",
        ),
    ],
)
def test_the_image_values_reach_every_controller(values: tuple[str, ...], image: str) -> None:
    objects = render(*ENABLE_ALL, *values, "imagePullSecrets[0].name=regcred")
    for deployment in of_kind(objects, "Deployment").values():
        assert container(deployment)["image"] == image
        assert deployment["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]


def test_every_pod_is_restricted_and_every_empty_dir_has_a_size_limit() -> None:
    deployments = of_kind(render(), "Deployment")
    volumes = [
        (name, volume)
        for name, deployment in deployments.items()
        for volume in deployment["spec"]["template"]["spec"]["volumes"]
    ]
    assert len(volumes) == 7
    for name, volume in volumes:
        assert volume["emptyDir"].get("sizeLimit"), (name, volume["name"])
    assert {"name": "data", "emptyDir": {"sizeLimit": "10Gi"}} in [
        v for name, v in volumes if name == "source-controller"
    ]
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        security = container(deployment)["securityContext"]
        assert security == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }, name


def test_network_policies_keep_internal_ports_inside_the_namespace() -> None:
    objects = render()
    policies = of_kind(objects, "NetworkPolicy")
    assert set(policies) == {"allow-egress", "allow-scraping", "allow-webhooks"}
    for policy in policies.values():
        assert policy["metadata"]["namespace"] == "flux-system"
    # Same-namespace pods reach every port; egress is open.
    egress = policies["allow-egress"]["spec"]
    assert egress["podSelector"] == {}
    assert egress["policyTypes"] == ["Ingress", "Egress"]
    assert egress["ingress"] == [{"from": [{"podSelector": {}}]}]
    assert egress["egress"] == [{}]
    # Metrics, from labelled namespaces only.
    scraping = policies["allow-scraping"]["spec"]
    assert scraping["podSelector"] == {}
    assert scraping["ingress"] == [
        {
            "from": [
                {"namespaceSelector": {"matchLabels": {"sluice-gitops.io/scrape-metrics": "true"}}}
            ],
            "ports": [{"port": 8080, "protocol": "TCP"}],
        }
    ]
    # The webhook receiver, from anywhere; and nothing else of the notification-controller.
    webhooks = policies["allow-webhooks"]["spec"]
    assert webhooks["podSelector"] == {"matchLabels": {"app": "notification-controller"}}
    assert webhooks["ingress"] == [{"ports": [{"port": 9292, "protocol": "TCP"}]}]
    notification = of_kind(objects, "Deployment")["notification-controller"]
    ports = {p["name"]: p["containerPort"] for p in container(notification)["ports"]}
    assert ports["http-webhook"] == 9292
    assert (
        ports["http"] == 9090
    )  # the event hub: covered by allow-egress's same-namespace rule only
    assert (
        notification["spec"]["template"]["metadata"]["labels"]["app"] == "notification-controller"
    )
    # Every pod of the install falls under allow-egress's deny-by-default ingress.
    for deployment in of_kind(objects, "Deployment").values():
        assert deployment["metadata"]["namespace"] == "flux-system"
    assert of_kind(render("networkPolicy.create=false"), "NetworkPolicy") == {}


def test_the_service_monitors_are_optional() -> None:
    assert not [o for o in render() if o["apiVersion"].startswith("monitoring.coreos.com")]
    objects = render("serviceMonitor.create=true", "helmController.create=false")
    monitors = of_kind(objects, "ServiceMonitor")
    assert set(monitors) == DEFAULT - {"helm-controller"}
    services = of_kind(objects, "Service")
    for name, monitor in monitors.items():
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["spec"]["endpoints"][0]["port"] == "http-prom"
        # It selects exactly the metrics Service of its controller, whose port it names.
        selected = [
            s for s in services.values()
            if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
        ]  # fmt: skip
        assert [s["metadata"]["name"] for s in selected] == [f"{name}-metrics"]
        assert selected[0]["spec"]["ports"][0]["name"] == "http-prom"
        assert selected[0]["spec"]["selector"] == {"app": name}


def test_the_plain_manifest_is_the_chart_rendered_with_its_defaults() -> None:
    current = (ROOT / manifest.MANIFEST).read_text(encoding="utf-8")
    assert current == manifest.render(ROOT), (
        "deploy/sluice.yaml is stale: run `python -m sluice_envtest.manifest`"
    )
    objects = [doc for doc in yaml.load_all(current, Loader=Loader) if doc]
    assert objects[0]["kind"] == "Namespace"
    assert objects[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert [o for o in objects[1:] if o["kind"] != "CustomResourceDefinition"] == [
        o for o in render() if o["kind"] != "CustomResourceDefinition"
    ]


async def test_the_manifest_applies_to_a_real_api_server(
    cluster: Cluster, kube: KubeClient
) -> None:
    path = str(ROOT / manifest.MANIFEST)
    objects = [
        doc for doc in yaml.load_all((ROOT / manifest.MANIFEST).read_text(), Loader=Loader) if doc
    ]
    # A server-side dry run needs the namespace to exist; the real apply
    # creates it first, as the file lists it first.
    namespace_only = await run_off_loop(
        cluster.kubectl("apply", "--server-side", "--field-manager=sluice-install-test", "-f", "-"),
        input=yaml.safe_dump(objects[0]), capture_output=True, text=True,
    )  # fmt: skip
    assert namespace_only.returncode == 0, namespace_only.stderr
    for dry_run in (["--dry-run=server"], []):
        done = await run_off_loop(
            cluster.kubectl("apply", "--server-side", "--field-manager=sluice-install-test",
                            *dry_run, "-f", path),
            capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        applied = [line for line in done.stdout.splitlines() if "serverside-applied" in line]
        assert len(applied) == len(objects), done.stdout
    notification = await kube.get(DEPLOYMENT, "notification-controller", "flux-system")
    args = container(notification)["args"]
    assert "--receiver-addr=:9292" in args
    assert "--no-cross-namespace-refs=true" in args
    # ArtifactGenerators of a tenant read only its own sources.
    source = await kube.get(DEPLOYMENT, "source-controller", "flux-system")
    assert "--no-cross-namespace-refs=true" in container(source)["args"]
    webhooks = await kube.get(NETWORK_POLICY, "allow-webhooks", "flux-system")
    assert webhooks["spec"]["ingress"] == [{"ports": [{"port": 9292, "protocol": "TCP"}]}]
    # Every controller's pod is one the API server accepts (dry run: nothing
    # runs pods here). The namespace's restricted Pod Security label is
    # enforced by servers from 1.23; this v1.20 test server only stores it,
    # so the restricted fields are checked statically above.
    for name, deployment in of_kind(objects, "Deployment").items():
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": f"{name}-"},
            "spec": deployment["spec"]["template"]["spec"],
        }
        created = await kube.request(
            "POST", "/api/v1/namespaces/flux-system/pods", query=[("dryRun", "All")], body=pod
        )
        assert created["spec"]["securityContext"]["runAsNonRoot"] is True


async def test_helm_install_into_a_real_api_server(
    cluster: Cluster, kube: KubeClient, namespace: str
) -> None:
    helm = [
        str(helm_binary()),
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--namespace",
        namespace,
    ]
    release = f"sluice-{namespace}"[:53]
    try:
        for dry_run in (["--dry-run=server"], []):
            done = await run_off_loop(
                [*helm, "install", release, str(CHART), *dry_run],
                capture_output=True, text=True,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            assert "STATUS: deployed" in done.stdout or "STATUS: pending-install" in done.stdout, (
                done.stdout
            )
        deployed = await kube.list(DEPLOYMENT, namespace=namespace)
        assert {d["metadata"]["name"] for d in deployed.items} == DEFAULT
        kustomize = await kube.get(DEPLOYMENT, "kustomize-controller", namespace)
        assert (
            f"--events-addr=http://notification-controller.{namespace}.svc.cluster.local./"
            in container(kustomize)["args"]
        )
    finally:
        await run_off_loop([*helm, "uninstall", release], capture_output=True)


def token_kubeconfig(cluster: Cluster, token: str, path: Path) -> str:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return str(path)


async def service_account_token(kube: KubeClient, namespace: str, name: str) -> str:
    answer = await kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
              "spec": {"expirationSeconds": 600}},
    )  # fmt: skip
    return str(answer["status"]["token"])


# Flags that say where a pod listens or stores; an in-process run picks its own.
_PLACE_FLAGS = ("--metrics-addr", "--health-addr", "--events-addr", "--storage-path",
                "--storage-addr", "--storage-adv-addr", "--enable-leader-election")  # fmt: skip


def chart_args(deployment: dict[str, Any]) -> list[str]:
    return [a for a in container(deployment)["args"] if not a.startswith(_PLACE_FLAGS)]


async def test_controllers_with_the_charts_arguments_and_rbac_deliver_as_the_tenant(
    cluster: Cluster, kube: KubeClient, namespace: str, git_http: GitHttpServer, tmp_path: Path
) -> None:
    """The chart installed into the test's namespace: the source- and
    kustomize-controller run with the chart's flags and as the chart's
    ServiceAccounts (tokens bound by the chart's RBAC), so the lockdown is
    what the API server enforces, not what a test admin client skips."""
    objects = render(namespace=namespace)
    rbac = [
        o for o in objects if o["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
    ]
    done = await run_off_loop(
        cluster.kubectl("apply", "--server-side", "-f", "-"),
        input=yaml.safe_dump_all(rbac), capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    deployments = of_kind(objects, "Deployment")
    kubeconfigs = {
        name: token_kubeconfig(
            cluster,
            await service_account_token(kube, namespace, name),
            tmp_path / f"{name}.kubeconfig",
        )
        for name in ("source-controller", "kustomize-controller")
    }
    repo = git_http.create_repo(f"install-{namespace}")
    repo.commit(
        files={
            "cm.yaml": f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: delivered\n  namespace: {namespace}\ndata:\n  k: v\n"
        }
    )
    repo.push()
    port = free_port()
    storage = ["--storage-path", str(tmp_path / "storage"), "--storage-addr", f"127.0.0.1:{port}",
               "--storage-adv-addr", f"127.0.0.1:{port}"]  # fmt: skip
    observe = Observer(kube, namespace)
    async with (
        running_service(
            source_main, kubeconfig=kubeconfigs["source-controller"], namespace=namespace,
            argv=[*chart_args(deployments["source-controller"]), *storage],
        ),
        running_service(
            kustomize_main, kubeconfig=kubeconfigs["kustomize-controller"], namespace=namespace,
            argv=chart_args(deployments["kustomize-controller"]),
        ),
    ):  # fmt: skip
        await kube.create(GITREPO, {
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": "repo"},
            "spec": {"url": git_http.url(f"install-{namespace}"), "interval": "1h", "ref": {"branch": "main"}},
        }, namespace=namespace)  # fmt: skip
        for name, account in (("tenant", None), ("platform", "platform-admin")):
            spec: dict[str, Any] = {"interval": "1h", "path": "./", "prune": True,
                                    "sourceRef": {"kind": "GitRepository", "name": "repo"}}  # fmt: skip
            if account:
                spec["serviceAccountName"] = account
            await kube.create(KUSTOMIZATION, {
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                "metadata": {"name": name}, "spec": spec,
            }, namespace=namespace)  # fmt: skip
        # Named no account: applied as the namespace's `default`, which may do nothing.
        tenant = await observe.wait(
            KUSTOMIZATION, "tenant",
            lambda o: (condition(o, "Ready") or {}).get("status") == "False"
            and "default" in (condition(o, "Ready") or {}).get("message", ""),
            what="Ready=False naming the default account",
        )  # fmt: skip
        assert "forbidden" in condition(tenant, "Ready")["message"].lower()
        # The platform's own account delivers.
        await observe.wait_ready(KUSTOMIZATION, "platform")
        delivered = await kube.get(CONFIG_MAP, "delivered", namespace)
        assert delivered["data"] == {"k": "v"}
    # Cluster-scoped, so not removed with the test's namespace.
    for kind in ("ClusterRoleBinding", "ClusterRole"):
        for name in of_kind(objects, kind):
            await run_off_loop(cluster.kubectl("delete", kind.lower(), name))
