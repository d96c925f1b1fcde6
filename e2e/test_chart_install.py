"""The cluster install against a real API server: the plain manifest and
`helm install` are accepted (server-side dry-run first), and controllers started
with the chart's own arguments and RBAC deliver only as the tenant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kustomize_controller import __main__ as kustomize_main
from sluice_envtest import manifest
from sluice_envtest.controlplane import free_port
from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.harness import Observer, condition, running_service
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.helming import helm_binary
from sluice_runtime.kube.client import KubeClient
from source_controller import __main__ as source_main

from .charting import (
    CHART,
    CONFIG_MAP,
    DEFAULT,
    DEPLOYMENT,
    GITREPO,
    KUSTOMIZATION,
    NETWORK_POLICY,
    ROOT,
    Loader,
    apply_rbac,
    chart_args,
    container,
    delete_cluster_rbac,
    of_kind,
    render,
    run_off_loop,
    service_account_token,
    token_kubeconfig,
)


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


async def test_controllers_with_the_charts_arguments_and_rbac_deliver_as_the_tenant(
    cluster: Cluster, kube: KubeClient, namespace: str, git_http: GitHttpServer, tmp_path: Path
) -> None:
    """The chart installed into the test's namespace: the source- and
    kustomize-controller run with the chart's flags and as the chart's
    ServiceAccounts (tokens bound by the chart's RBAC), so the lockdown is
    what the API server enforces, not what a test admin client skips."""
    objects = render(namespace=namespace)
    await apply_rbac(cluster, objects)
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
    await delete_cluster_rbac(cluster, objects)
