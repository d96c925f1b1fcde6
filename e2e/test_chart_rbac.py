"""Each controller's RBAC, as the real API server answers for the chart's
ServiceAccounts: what it may do is exactly what its code needs (listed here
from the kinds each service reads, writes and watches), nothing it does not
(the source-controller writes no Kustomization, the gating-controller reads
no Secret, no controller lists Secrets), and every controller, run with the
chart's arguments as its own ServiceAccount, still does its job."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gating_controller import __main__ as gating_main
from helm_controller import __main__ as helm_main
from kustomize_controller import __main__ as kustomize_main
from notification_controller import __main__ as notification_main
from resourceset_controller import __main__ as resourceset_main
from sluice_cli import controllers
from sluice_envtest.chartrepo import ChartRepository
from sluice_envtest.controlplane import free_port
from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.harness import (
    Observer,
    condition,
    make_secret,
    running_service,
    source_storage_argv,
)
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import Forbidden
from sluice_runtime.kube.resources import CONFIG_MAP, EVENT, ResourceType
from source_controller import __main__ as source_main

from .charting import (
    ENABLE_ALL,
    GITREPO,
    KUSTOMIZATION,
    apply_rbac,
    chart_args,
    delete_cluster_rbac,
    of_kind,
    render,
    run_off_loop,
    service_account_token,
    token_kubeconfig,
)

SOURCE = "source.toolkit.fluxcd.io"
GATE = ResourceType("gating.toolkit.fluxcd.io", "v1alpha1", "gates", "Gate")
RECEIVER = ResourceType("notification.toolkit.fluxcd.io", "v1", "receivers", "Receiver")
HELMREPO = ResourceType(SOURCE, "v1", "helmrepositories", "HelmRepository")
HELMCHART = ResourceType(SOURCE, "v1", "helmcharts", "HelmChart")
HELMRELEASE = ResourceType("helm.toolkit.fluxcd.io", "v2", "helmreleases", "HelmRelease")
RSET = ResourceType("fluxcd.controlplane.io", "v1", "resourcesets", "ResourceSet")
RSIP = ResourceType("fluxcd.controlplane.io", "v1", "resourcesetinputproviders",
                    "ResourceSetInputProvider")  # fmt: skip

Need = tuple[str, str, str]
"""(API group, resource, verb)."""


def owns(group: str, *kinds: str) -> set[Need]:
    """A controller's own kinds: informers list and watch them, steps get them,
    finalizers and annotations are patches, status is patched, and owner
    references with blockOwnerDeletion need update on `<kind>/finalizers`."""
    return {
        *((group, kind, verb) for kind in kinds for verb in ("get", "list", "watch", "patch")),
        *((group, f"{kind}/status", verb) for kind in kinds for verb in ("get", "patch")),
        *((group, f"{kind}/finalizers", "update") for kind in kinds),
    }


def verbs(group: str, kinds: tuple[str, ...], *verbs: str) -> set[Need]:
    return {(group, kind, verb) for kind in kinds for verb in verbs}


READ = ("get", "list", "watch")
WRITE = (*READ, "create", "patch", "delete")
EVENTS = verbs("", ("events",), "create", "patch")  # sluice_runtime.recording
LEASES = verbs("coordination.k8s.io", ("leases",), "get", "create", "update")  # .leading
IMPERSONATE = verbs("", ("serviceaccounts",), "impersonate")  # every tenant's apply
ANNOTATED = {
    # Receivers annotate, and Alerts read the labels of, every kind they may name.
    SOURCE: ("gitrepositories", "ocirepositories", "helmrepositories", "helmcharts", "buckets",
             "externalartifacts"),
    "source.extensions.fluxcd.io": ("artifactgenerators",),
    "kustomize.toolkit.fluxcd.io": ("kustomizations",),
    "helm.toolkit.fluxcd.io": ("helmreleases",),
    "gating.toolkit.fluxcd.io": ("gates",),
    "image.toolkit.fluxcd.io": ("imagerepositories", "imagepolicies", "imageupdateautomations"),
    "fluxcd.controlplane.io": ("fluxinstances", "resourcesets", "resourcesetinputproviders"),
}  # fmt: skip

NEEDS: dict[str, set[Need]] = {
    "source-controller": owns(
        SOURCE, "gitrepositories", "ocirepositories", "helmrepositories", "helmcharts", "buckets"
    )
    | owns("source.extensions.fluxcd.io", "artifactgenerators")
    # ArtifactGenerators publish, and delete, ExternalArtifacts (externalartifacts.py).
    | verbs(SOURCE, ("externalartifacts",), *WRITE)
    | verbs(SOURCE, ("externalartifacts/status",), "get", "patch")
    | verbs("gating.toolkit.fluxcd.io", ("gates",), *READ)
    | verbs("", ("secrets",), "get"),
    "kustomize-controller": owns("kustomize.toolkit.fluxcd.io", "kustomizations")
    | verbs(SOURCE, ("gitrepositories", "ocirepositories", "buckets", "externalartifacts"), *READ)
    | verbs("gating.toolkit.fluxcd.io", ("gates",), *READ)
    | verbs("", ("secrets", "configmaps"), "get")
    | IMPERSONATE,
    "helm-controller": owns("helm.toolkit.fluxcd.io", "helmreleases")
    | verbs(SOURCE, ("helmcharts",), *WRITE)  # charting.py applies, helmrelease.py deletes
    | verbs(SOURCE, ("ocirepositories", "externalartifacts"), *READ)
    | verbs("gating.toolkit.fluxcd.io", ("gates",), *READ)
    | verbs("", ("secrets", "configmaps"), "get")  # values.py, kubeconfigs
    | IMPERSONATE,
    "application-controller": owns("gitops.kubesphere.io", "applications")
    | verbs("helm.toolkit.fluxcd.io", ("helmreleases",), *WRITE)
    | verbs("kustomize.toolkit.fluxcd.io", ("kustomizations",), *WRITE)
    | verbs(SOURCE, ("helmcharts",), *WRITE)
    | verbs("", ("secrets",), "get"),
    "resourceset-controller": owns(
        "fluxcd.controlplane.io", "resourcesets", "resourcesetinputproviders"
    )
    | verbs("", ("secrets",), "get")  # providers.py
    | IMPERSONATE,
    "gating-controller": owns("gating.toolkit.fluxcd.io", "gates"),
    "notification-controller": owns(
        "notification.toolkit.fluxcd.io", "receivers", "alerts", "providers"
    )
    | {
        need
        for group, kinds in ANNOTATED.items()
        for need in verbs(group, kinds, "get", "list", "patch")
    }
    | verbs("", ("secrets",), "get")
    | verbs("authentication.k8s.io", ("tokenreviews",), "create"),  # authenticating.py
}
"""What each controller's code does with its own identity, besides EVENTS and LEASES."""

# Every authenticated user may ask about itself (system:basic-user).
_ANYONE = verbs(
    "authorization.k8s.io", ("selfsubjectaccessreviews", "selfsubjectrulesreviews"), "create"
)


async def _granted(client: KubeClient, namespace: str) -> set[Need]:
    """What the API server says `client`'s user may do in `namespace`."""
    review = await client.request(
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        body={"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
              "spec": {"namespace": namespace}},
    )  # fmt: skip
    assert review["status"].get("incomplete") is not True, review["status"]
    granted = set()
    for rule in review["status"]["resourceRules"]:
        assert not rule.get("resourceNames"), rule
        for group in rule.get("apiGroups") or [""]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    granted.add((group, resource, verb))
    return granted - _ANYONE


async def _allowed(
    kube: KubeClient, account: str, namespace: str, verb: str, group: str, resource: str,
    in_namespace: str = "",
) -> bool:  # fmt: skip
    """SubjectAccessReview: may ServiceAccount `namespace/account` do it?"""
    review = await kube.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{namespace}:{account}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                           "system:authenticated"],
                "resourceAttributes": {"verb": verb, "group": group, "resource": resource,
                                       "namespace": in_namespace},
            },
        },
    )  # fmt: skip
    return bool(review["status"].get("allowed"))


async def test_each_controller_may_do_exactly_what_its_code_needs(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    objects = render(*ENABLE_ALL, namespace=namespace)
    await apply_rbac(cluster, objects)
    try:
        for name in controllers.NAMES:
            token = await service_account_token(kube, namespace, name)
            client = await KubeClient.connect(
                kubeconfig=token_kubeconfig(cluster, token, tmp_path / f"{name}.kubeconfig")
            )
            try:
                # Its Lease is in the release namespace only; elsewhere it has
                # its ClusterRole's rules alone.
                here = await _granted(client, namespace)
                elsewhere = await _granted(client, "default")
                assert here - elsewhere == LEASES, name
                assert sorted(elsewhere - (NEEDS[name] | EVENTS)) == [], f"{name}: more than needed"
                assert sorted((NEEDS[name] | EVENTS) - elsewhere) == [], f"{name}: missing"
            finally:
                await client.close()
    finally:
        await delete_cluster_rbac(cluster, objects)


FORBIDDEN = [
    # The source-controller writes no delivery object.
    *(
        ("source-controller", verb, group, resource)
        for verb in ("create", "patch", "update", "delete")
        for group, resource in (
            ("kustomize.toolkit.fluxcd.io", "kustomizations"),
            ("helm.toolkit.fluxcd.io", "helmreleases"),
            ("gating.toolkit.fluxcd.io", "gates"),
        )
    ),
    # The gating-controller reads no Secret.
    *(("gating-controller", verb, "", "secrets") for verb in ("get", "list", "watch")),
    # No controller lists or watches Secrets: those that need one get it by name.
    *((name, verb, "", "secrets") for name in controllers.NAMES for verb in ("list", "watch")),
    ("kustomize-controller", "create", "apps", "deployments"),
    ("application-controller", "create", "apps", "deployments"),
    ("helm-controller", "create", "", "configmaps"),
]


async def test_what_a_controller_does_not_need_it_may_not_do(
    cluster: Cluster, kube: KubeClient, namespace: str
) -> None:
    objects = render(*ENABLE_ALL, namespace=namespace)
    await apply_rbac(cluster, objects)
    try:
        # The reviews see the chart's bindings at all.
        assert await _allowed(kube, "source-controller", namespace, "get", "", "secrets", "x")
        allowed = [
            (account, verb, group, resource, where or "(cluster)")
            for account, verb, group, resource in FORBIDDEN
            for where in ("", "tenant-a", namespace)
            if await _allowed(kube, account, namespace, verb, group, resource, where)
        ]
        assert allowed == []
    finally:
        await delete_cluster_rbac(cluster, objects)


def _signed(token: str, body: bytes) -> dict[str, str]:
    stamp = str(int(time.time()))
    mac = hmac.new(token.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"X-Signature-Timestamp": stamp, "X-Signature-Timestamped": "sha256=" + mac}


async def test_every_controller_works_as_its_own_service_account(
    cluster: Cluster, kube: KubeClient, namespace: str, git_http: GitHttpServer, tmp_path: Path
) -> None:
    """source-, kustomize-, helm-, gating-, notification- and
    resourceset-controller, each with the chart's flags and a token of the
    chart's ServiceAccount, deliver a gated Kustomization a Receiver opens, a
    HelmRelease from an authenticated chart repository and a ResourceSet fed
    by an input provider, and write their Events."""
    ns = namespace
    objects = render(namespace=ns)
    await apply_rbac(cluster, objects)
    deployments = of_kind(objects, "Deployment")
    kubeconfig = {
        name: token_kubeconfig(
            cluster, await service_account_token(kube, ns, name), tmp_path / f"{name}.kubeconfig"
        )
        for name in deployments
    }
    charts = ChartRepository(tmp_path / "charts", username="charts", password="s3cret-pw")
    charts.add("app", "1.0.0")
    await charts.start()
    repo = git_http.create_repo(f"rbac-{ns}")
    repo.commit(files={"cm.yaml": f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: "
                                  f"gated\n  namespace: {ns}\ndata:\n  k: v\n"})  # fmt: skip
    repo.push()
    receiver_port = free_port()

    def run(module: Any, name: str, *extra: str) -> Any:
        return running_service(
            module, kubeconfig=kubeconfig[name], namespace=ns,
            argv=[*chart_args(deployments[name]), *extra],
        )  # fmt: skip

    observe = Observer(kube, ns)
    platform = "platform-admin"
    try:
        async with (
            run(source_main, "source-controller", *source_storage_argv(tmp_path / "storage")),
            run(kustomize_main, "kustomize-controller"),
            run(helm_main, "helm-controller"),
            run(gating_main, "gating-controller"),
            run(notification_main, "notification-controller",
                f"--receiver-addr=127.0.0.1:{receiver_port}", "--events-addr=127.0.0.1:0"),
            run(resourceset_main, "resourceset-controller"),
            aiohttp.ClientSession() as session,
        ):  # fmt: skip
            # A closed Gate holds a Kustomization until a Receiver opens it.
            await kube.create(GATE, {
                "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1", "kind": "Gate",
                "metadata": {"name": "release"},
                "spec": {"interval": "10m", "default": "closed", "window": "1h"},
            }, namespace=ns)  # fmt: skip
            await kube.create(GITREPO, {
                "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
                "metadata": {"name": "repo"},
                "spec": {"url": git_http.url(f"rbac-{ns}"), "interval": "1h",
                         "ref": {"branch": "main"}},
            }, namespace=ns)  # fmt: skip
            await kube.create(KUSTOMIZATION, {
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                "metadata": {"name": "gated"},
                "spec": {"interval": "1h", "path": "./", "prune": True,
                         "serviceAccountName": platform, "gates": [{"name": "release"}],
                         "sourceRef": {"kind": "GitRepository", "name": "repo"}},
            }, namespace=ns)  # fmt: skip
            await observe.wait(
                KUSTOMIZATION, "gated",
                lambda o: (condition(o, "Ready") or {}).get("reason") == "GateClosed",
                what="held by the closed gate",
            )  # fmt: skip
            token = "approve-token"
            await make_secret(kube, ns, "chatops", {"token": token})
            await kube.create(RECEIVER, {
                "apiVersion": "notification.toolkit.fluxcd.io/v1", "kind": "Receiver",
                "metadata": {"name": "chatops"},
                "spec": {"type": "generic-hmac", "secretRef": {"name": "chatops"},
                         "resources": [{"kind": "Gate", "name": "release", "action": "open"},
                                       {"kind": "GitRepository", "name": "repo"}]},
            }, namespace=ns)  # fmt: skip
            receiver = await observe.wait_ready(RECEIVER, "chatops")
            url = f"http://127.0.0.1:{receiver_port}{receiver['status']['webhookPath']}"
            body = b'{"approved": true}'
            async with session.post(url, data=body, headers=_signed(token, body)) as answer:
                assert answer.status == 200, await answer.text()
            await observe.wait_ready(KUSTOMIZATION, "gated")
            assert (await kube.get(CONFIG_MAP, "gated", ns))["data"] == {"k": "v"}
            annotations = (await kube.get(GITREPO, "repo", ns))["metadata"]["annotations"]
            assert "reconcile.fluxcd.io/requestedAt" in annotations

            # A HelmRelease: its HelmChart made by the helm-controller, built
            # from an authenticated repository by the source-controller.
            await make_secret(kube, ns, "charts-auth",
                              {"username": "charts", "password": "s3cret-pw"})  # fmt: skip
            await kube.create(HELMREPO, {
                "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "HelmRepository",
                "metadata": {"name": "charts"},
                "spec": {"url": charts.url, "interval": "1h", "secretRef": {"name": "charts-auth"}},
            }, namespace=ns)  # fmt: skip
            await kube.create(HELMRELEASE, {
                "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                "metadata": {"name": "app"},
                "spec": {"interval": "1h", "serviceAccountName": platform,
                         "chart": {"spec": {"chart": "app", "version": "*",
                                            "sourceRef": {"kind": "HelmRepository",
                                                          "name": "charts"}}}},
            }, namespace=ns)  # fmt: skip
            await observe.wait_ready(HELMRELEASE, "app", timeout=180)
            assert (await kube.get(CONFIG_MAP, "app-config", ns))["data"]["version"] == "1.0.0"
            assert (await kube.get(HELMCHART, f"{ns}-app", ns))["spec"]["chart"] == "app"

            # A ResourceSet fed by a Static input provider.
            await kube.create(RSIP, {
                "apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSetInputProvider",
                "metadata": {"name": "envs"},
                "spec": {"type": "Static", "defaultValues": {"env": "prod"}},
            }, namespace=ns)  # fmt: skip
            await kube.create(RSET, {
                "apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSet",
                "metadata": {"name": "apps"},
                "spec": {"serviceAccountName": platform,
                         "inputsFrom": [{"kind": "ResourceSetInputProvider", "name": "envs"}],
                         "resources": [{"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": {"name": "app-<< inputs.env >>"},
                                        "data": {"env": "<< inputs.env >>"}}]},
            }, namespace=ns)  # fmt: skip
            await observe.wait_ready(RSET, "apps")
            assert (await kube.get(CONFIG_MAP, "app-prod", ns))["data"] == {"env": "prod"}

            # Each controller recorded Events as itself.
            wanted = {"source-controller", "kustomize-controller", "helm-controller",
                      "gating-controller", "resourceset-controller"}  # fmt: skip
            for _ in range(100):
                events = (await kube.list(EVENT, namespace=ns)).items
                found = {(e.get("source") or {}).get("component") for e in events}
                if wanted <= found:
                    break
                await asyncio.sleep(0.1)
            assert wanted - found == set()
    finally:
        await charts.stop()
        await delete_cluster_rbac(cluster, objects)


CLUSTER_ROLE = ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole",
                            namespaced=False)  # fmt: skip
ROLE_BINDING = ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")


async def _aggregated(kube: KubeClient, role: str) -> list[dict[str, Any]]:
    """The rules Kubernetes' ClusterRole `role` aggregates: the union of every
    ClusterRole its own aggregationRule selects, as kube-controller-manager's
    clusterrole-aggregation controller computes it (the test's control plane
    runs no controller-manager, so the test takes that step)."""
    selectors = (await kube.get(CLUSTER_ROLE, role))["aggregationRule"]["clusterRoleSelectors"]
    rules: list[dict[str, Any]] = []
    for selector in selectors:
        labels = ",".join(f"{k}={v}" for k, v in selector["matchLabels"].items())
        for found in (await kube.list(CLUSTER_ROLE, label_selector=labels)).items:
            rules += [r for r in found.get("rules") or [] if r not in rules]
    return rules


async def test_namespace_viewers_and_editors_see_and_edit_flux_objects(
    cluster: Cluster, kube: KubeClient, namespace: str
) -> None:
    ns = namespace
    objects = render(namespace=ns)
    assert {"sluice-view-" + ns, "sluice-edit-" + ns} <= set(of_kind(objects, "ClusterRole"))
    await apply_rbac(cluster, objects)
    made = []
    try:
        for role, user in (("view", "viewer"), ("edit", "editor")):
            name = f"t-{role}-{ns}"
            await kube.create(CLUSTER_ROLE, {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": name}, "rules": await _aggregated(kube, role),
            })  # fmt: skip
            made.append(name)
            await kube.create(ROLE_BINDING, {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": user},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": name},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                              "name": user}],
            }, namespace=ns)  # fmt: skip
        await kube.create(KUSTOMIZATION, {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "seen"},
            "spec": {"interval": "1h", "path": "./", "prune": True,
                     "sourceRef": {"kind": "GitRepository", "name": "repo"}},
        }, namespace=ns)  # fmt: skip
        viewer, editor = kube.impersonate("viewer"), kube.impersonate("editor")
        listed = await viewer.list(KUSTOMIZATION, namespace=ns)
        assert [k["metadata"]["name"] for k in listed.items] == ["seen"]
        for rt in (GITREPO, HELMRELEASE, GATE, RECEIVER, RSET):
            await viewer.list(rt, namespace=ns)
        with pytest.raises(Forbidden):
            await viewer.merge_patch(KUSTOMIZATION, "seen", {"spec": {"suspend": True}},
                                     namespace=ns)  # fmt: skip
        with pytest.raises(Forbidden):
            await viewer.list(KUSTOMIZATION, namespace="default")
        patched = await editor.merge_patch(
            KUSTOMIZATION, "seen", {"spec": {"suspend": True}}, namespace=ns
        )
        assert patched["spec"]["suspend"] is True
        await editor.delete(KUSTOMIZATION, "seen", namespace=ns)
    finally:
        for name in made:
            await run_off_loop(cluster.kubectl("delete", "clusterrole", name))
        await delete_cluster_rbac(cluster, objects)
