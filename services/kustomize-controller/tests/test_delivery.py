"""The delivery pipeline end to end: Git → artifact → kustomize → SSA → prune → health."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from structlog.testing import capture_logs

from sluice_envtest.harness import condition, is_ready
from sluice_envtest.workloads import simulated_rollouts
from sluice_runtime.kube.errors import NotFound

from .conftest import (
    CONFIG_MAP,
    DEPLOYMENT,
    GITREPO,
    KUSTOMIZATION,
    NAMESPACE,
    SERVICE,
    Delivery,
    config_map,
    deployment,
    namespace_doc,
)


def service(name: str, namespace: str) -> str:
    return f"""apiVersion: v1
kind: Service
metadata:
  name: {name}
  namespace: {namespace}
spec:
  selector: {{app: {name}}}
  ports:
    - port: 80
"""


async def exists(d: Delivery, rt: Any, name: str, namespace: str | None) -> bool:
    try:
        await d.kube.get(rt, name, namespace)
    except NotFound:
        return False
    return True


async def test_the_webapp_example_goes_ready_in_dependency_order(delivery: Delivery) -> None:
    """The kustomize-controller design's own example, from a local Git repository."""
    d = delivery
    ns = d.namespace
    istio_ns, app_ns = f"istio-{ns}"[:63], f"webapp-{ns}"[:63]
    repo = d.repo("fleet")
    repo.commit(
        "fleet",
        files={
            "istio/namespace.yaml": namespace_doc(istio_ns),
            "istio/istiod.yaml": deployment("istiod", istio_ns),
            "webapp/common/namespace.yaml": namespace_doc(app_ns),
            "webapp/common/config.yaml": config_map("common", app_ns, env="prod"),
            "webapp/backend/deployment.yaml": deployment("backend", app_ns),
            "webapp/backend/service.yaml": service("backend", app_ns),
            "webapp/frontend/deployment.yaml": deployment("frontend", app_ns),
            "webapp/frontend/service.yaml": service("frontend", app_ns),
        },
    )
    repo.push()
    await d.git_repository("fleet")
    # The artifact first: on a loaded machine fetching can take longer than the
    # one second below, and the dependency order is what this test is about.
    await d.observe.wait_ready(GITREPO, "fleet")
    await d.kustomization(
        "istio",
        source="fleet",
        path="./istio",
        healthChecks=[
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "istiod", "namespace": istio_ns}
        ],
        timeout="2m",
    )
    await d.kustomization(
        "webapp-common", source="fleet", path="./webapp/common", dependsOn=[{"name": "istio"}]
    )
    await d.kustomization(
        "webapp-backend",
        source="fleet",
        path="./webapp/backend",
        dependsOn=[{"name": "webapp-common"}],
        healthChecks=[
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "backend", "namespace": app_ns}
        ],
        timeout="2m",
    )
    await d.kustomization(
        "webapp-frontend",
        source="fleet",
        path="./webapp/frontend",
        dependsOn=[{"name": "webapp-backend"}],
    )
    names = ["istio", "webapp-common", "webapp-backend", "webapp-frontend"]
    ready_at: dict[str, float] = {}
    waited_on_dependency: set[str] = set()

    # Nothing rolls a Deployment out until we say so: istio waits on istiod,
    # so once the source is fetched the frontend waits on its dependency.
    await d.observe.wait_reason(KUSTOMIZATION, "webapp-frontend", "DependencyNotReady")
    assert not await exists(d, DEPLOYMENT, "frontend", app_ns)

    async with simulated_rollouts(d.kube):
        deadline = time.monotonic() + 60
        while len(ready_at) < len(names) and time.monotonic() < deadline:
            for name in names:
                obj = await d.observe.get(KUSTOMIZATION, name)
                if name not in ready_at and is_ready(obj):
                    ready_at[name] = time.monotonic()
                if (condition(obj, "Ready") or {}).get("reason") == "DependencyNotReady":
                    waited_on_dependency.add(name)
            await asyncio.sleep(0.05)
    assert set(ready_at) == set(names), f"not all ready: {ready_at}"
    order = sorted(names, key=ready_at.__getitem__)
    assert order == names
    assert {"webapp-common", "webapp-backend", "webapp-frontend"} <= waited_on_dependency

    backend = await d.observe.get(KUSTOMIZATION, "webapp-backend")
    revision = f"main@sha1:{repo.head}"
    assert backend["status"]["lastAppliedRevision"] == revision
    assert backend["status"]["lastAttemptedRevision"] == revision
    assert condition(backend, "Ready")["message"] == f"Applied revision: {revision}"  # type: ignore[index]
    assert condition(backend, "Healthy")["status"] == "True"  # type: ignore[index]
    entries = {e["id"]: e["v"] for e in backend["status"]["inventory"]["entries"]}
    assert entries == {
        f"{app_ns}_backend_apps_Deployment": "v1",
        f"{app_ns}_backend__Service": "v1",
    }
    svc = await d.kube.get(SERVICE, "backend", app_ns)
    assert svc["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"] == "webapp-backend"
    assert svc["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/namespace"] == ns


async def test_edit_prune_and_drift_correction(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    repo = d.repo("app")
    repo.commit(
        "v1", files={"a.yaml": config_map("a", ns, k="1"), "b.yaml": config_map("b", ns, k="1")}
    )
    repo.push()
    await d.git_repository("app")
    await d.kustomization("app", source="app")
    first = await d.observe.wait_ready(KUSTOMIZATION, "app")
    assert len(first["status"]["inventory"]["entries"]) == 2

    # Editing a manifest updates the object; deleting one prunes it.
    repo.commit("v2", files={"a.yaml": config_map("a", ns, k="2")}, remove=["b.yaml"])
    repo.push()
    await d.observe.poke(GITREPO, "app", "v2")
    second = await d.observe.wait(
        KUSTOMIZATION,
        "app",
        lambda o: o["status"].get("lastAppliedRevision") == f"main@sha1:{repo.head}",
        what="v2 applied",
    )
    assert (await d.kube.get(CONFIG_MAP, "a", ns))["data"] == {"k": "2"}
    assert not await exists(d, CONFIG_MAP, "b", ns)
    assert [e["id"] for e in second["status"]["inventory"]["entries"]] == [f"{ns}_a__ConfigMap"]

    # Someone edits a managed field by hand; the next reconcile reverts it.
    await d.kube.merge_patch(CONFIG_MAP, "a", {"data": {"k": "hand-edited"}}, namespace=ns)
    await d.observe.poke(KUSTOMIZATION, "app", "drift")
    assert (await d.kube.get(CONFIG_MAP, "a", ns))["data"] == {"k": "2"}


async def test_a_new_source_revision_is_applied_within_seconds(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    repo = d.repo("fast")
    repo.commit("v1", files={"c.yaml": config_map("c", ns, v="1")})
    repo.push()
    await d.git_repository("fast")
    await d.kustomization("fast", source="fast")  # interval 1h: only events can make it quick
    await d.observe.wait_ready(KUSTOMIZATION, "fast")
    repo.commit("v2", files={"c.yaml": config_map("c", ns, v="2")})
    repo.push()
    started = time.monotonic()
    await d.observe.poke(GITREPO, "fast", "go")
    await d.observe.wait(
        KUSTOMIZATION,
        "fast",
        lambda o: o["status"].get("lastAppliedRevision") == f"main@sha1:{repo.head}",
        timeout=10,
        what="new revision applied",
    )
    assert (await d.kube.get(CONFIG_MAP, "c", ns))["data"] == {"v": "2"}
    assert time.monotonic() - started < 10


async def test_deleting_a_kustomization_garbage_collects_unless_orphaned(
    delivery: Delivery,
) -> None:
    d = delivery
    ns = d.namespace
    repo = d.repo("gc")
    repo.commit(
        "v1",
        files={
            "keep/x.yaml": config_map("orphaned", ns),
            "drop/y.yaml": config_map("collected", ns),
        },
    )
    repo.push()
    await d.git_repository("gc")
    await d.kustomization("collect", source="gc", path="./drop")
    await d.kustomization("orphan", source="gc", path="./keep", deletionPolicy="Orphan")
    await d.observe.wait_ready(KUSTOMIZATION, "collect")
    await d.observe.wait_ready(KUSTOMIZATION, "orphan")
    await d.kube.delete(KUSTOMIZATION, "collect", namespace=ns)
    await d.kube.delete(KUSTOMIZATION, "orphan", namespace=ns)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if not await exists(d, KUSTOMIZATION, "collect", ns) and not await exists(
            d, KUSTOMIZATION, "orphan", ns
        ):
            break
        await asyncio.sleep(0.1)
    assert not await exists(d, CONFIG_MAP, "collected", ns)
    assert await exists(d, CONFIG_MAP, "orphaned", ns)


async def test_suspended_kustomization_ignores_new_revisions(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    repo = d.repo("paused")
    repo.commit("v1", files={"p.yaml": config_map("p", ns, v="1")})
    repo.push()
    await d.git_repository("paused")
    await d.kustomization("paused", source="paused")
    await d.observe.wait_ready(KUSTOMIZATION, "paused")
    await d.kube.merge_patch(KUSTOMIZATION, "paused", {"spec": {"suspend": True}}, namespace=ns)
    repo.commit("v2", files={"p.yaml": config_map("p", ns, v="2")})
    repo.push()
    await d.observe.poke(GITREPO, "paused", "v2")
    await asyncio.sleep(1.5)
    assert (await d.kube.get(CONFIG_MAP, "p", ns))["data"] == {"v": "1"}
    await d.kube.merge_patch(KUSTOMIZATION, "paused", {"spec": {"suspend": False}}, namespace=ns)
    await d.observe.wait(
        KUSTOMIZATION,
        "paused",
        lambda o: o["status"].get("lastAppliedRevision") == f"main@sha1:{repo.head}",
        what="applied after resume",
    )
    assert (await d.kube.get(CONFIG_MAP, "p", ns))["data"] == {"v": "2"}


async def test_namespaces_and_crds_apply_before_what_needs_them(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    group = f"{ns}.example.com"
    crd = f"""apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.{group}
spec:
  group: {group}
  names: {{kind: Widget, plural: widgets, singular: widget}}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {{type: object, properties: {{size: {{type: integer}}}}}}
"""
    widget = f"apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: fresh-{ns}\nspec:\n  size: 3\n"
    repo = d.repo("stages")
    # The CR and its namespace come first in the file order; staging must fix that.
    repo.commit(
        "stages",
        files={
            "0-widget.yaml": widget,
            "1-ns.yaml": namespace_doc(f"fresh-{ns}"),
            "2-crd.yaml": crd,
        },
    )
    repo.push()
    await d.git_repository("stages")
    await d.kustomization("stages", source="stages")
    obj = await d.observe.wait_ready(KUSTOMIZATION, "stages")
    ids = sorted(e["id"] for e in obj["status"]["inventory"]["entries"])
    assert ids == [
        f"_fresh-{ns}__Namespace",
        f"_widgets.{group}_apiextensions.k8s.io_CustomResourceDefinition",
        f"fresh-{ns}_w_{group}_Widget",
    ]
    assert await exists(d, NAMESPACE, f"fresh-{ns}", None)


async def test_post_build_substitution_from_configmaps_and_secrets(delivery: Delivery) -> None:
    from sluice_envtest.harness import make_config_map, make_secret

    d = delivery
    ns = d.namespace
    await make_config_map(d.kube, ns, "cluster-vars", {"region": "eu-central-1", "env": "staging"})
    await make_secret(d.kube, ns, "cluster-secrets", {"token": "s3cr3t"})
    skipped = config_map("literal", ns, v="${region}").replace(
        "metadata:\n",
        "metadata:\n  annotations:\n    kustomize.toolkit.fluxcd.io/substitute: disabled\n",
    )
    repo = d.repo("vars")
    repo.commit(
        "vars",
        files={
            "cm.yaml": config_map(
                "vars",
                ns,
                region="${region}",
                env="${env}",
                tier="${tier:=gold}",
                token="${token}",
                raw="$${region}",
            ),
            "skip.yaml": skipped,
        },
    )
    repo.push()
    await d.git_repository("vars")
    await d.kustomization(
        "vars",
        source="vars",
        postBuild={
            "substitute": {"env": "prod"},
            "substituteFrom": [
                {"kind": "ConfigMap", "name": "cluster-vars"},
                {"kind": "Secret", "name": "cluster-secrets"},
                {"kind": "ConfigMap", "name": "absent", "optional": True},
            ],
        },
    )
    await d.observe.wait_ready(KUSTOMIZATION, "vars")
    data = (await d.kube.get(CONFIG_MAP, "vars", ns))["data"]
    assert data == {
        "region": "eu-central-1",
        "env": "prod",
        "tier": "gold",
        "token": "s3cr3t",
        "raw": "${region}",
    }
    assert (await d.kube.get(CONFIG_MAP, "literal", ns))["data"] == {"v": "${region}"}


async def test_kubeconfig_secret_targets_another_cluster(
    delivery: Delivery, second_cluster: Any
) -> None:
    from sluice_envtest.harness import make_secret
    from sluice_runtime.kube.client import KubeClient

    d = delivery
    ns = d.namespace
    remote = await KubeClient.connect(kubeconfig=str(second_cluster.kubeconfig))
    try:
        await remote.create(
            NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        )
        await make_secret(d.kube, ns, "remote", {"value": second_cluster.kubeconfig.read_text()})
        repo = d.repo("remote")
        repo.commit("c", files={"r.yaml": config_map("remote-only", ns, where="second")})
        repo.push()
        await d.git_repository("remote")
        await d.kustomization(
            "remote", source="remote", kubeConfig={"secretRef": {"name": "remote"}}
        )
        await d.observe.wait_ready(KUSTOMIZATION, "remote")
        assert (await remote.get(CONFIG_MAP, "remote-only", ns))["data"] == {"where": "second"}
        assert not await exists(d, CONFIG_MAP, "remote-only", ns), "nothing applied locally"
    finally:
        await remote.close()


async def test_a_new_revision_cancels_a_long_health_wait(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    repo = d.repo("stuck")
    repo.commit(
        "v1", files={"web.yaml": deployment("web", ns), "cm.yaml": config_map("rev", ns, v="1")}
    )
    repo.push()
    await d.git_repository("stuck")
    await d.kustomization(
        "stuck",
        source="stuck",
        healthChecks=[
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": ns}
        ],
        timeout="10m",
    )
    # v1 is applied, then the controller waits (up to 10m) for a Deployment nobody rolls out.
    await d.observe.wait(
        KUSTOMIZATION,
        "stuck",
        lambda o: (condition(o, "Reconciling") or {}).get("status") == "True",
    )
    await d.observe.wait(
        KUSTOMIZATION, "stuck", lambda o: bool(o.get("status", {}).get("inventory"))
    )
    # v2 fixes the rollout (here: the stand-in deployment controller runs for it).
    repo.commit(
        "v2",
        files={
            "web.yaml": deployment("web", ns, image="nginx:1.27"),
            "cm.yaml": config_map("rev", ns, v="2"),
        },
    )
    repo.push()
    started = time.monotonic()
    await d.observe.poke(GITREPO, "stuck", "v2")
    await d.observe.wait(
        KUSTOMIZATION,
        "stuck",
        lambda o: o["status"].get("lastAttemptedRevision") == f"main@sha1:{repo.head}",
        timeout=20,
        what="v2 attempted without waiting out v1's 10m health timeout",
    )
    assert time.monotonic() - started < 20
    assert (await d.kube.get(CONFIG_MAP, "rev", ns))["data"] == {"v": "2"}
    async with simulated_rollouts(d.kube, namespace=ns):
        ready = await d.observe.wait_ready(KUSTOMIZATION, "stuck", timeout=20)
    assert ready["status"]["lastAppliedRevision"] == f"main@sha1:{repo.head}"


async def test_wait_checks_every_applied_object(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    repo = d.repo("waits")
    repo.commit("c", files={"web.yaml": deployment("web", ns), "cm.yaml": config_map("cm", ns)})
    repo.push()
    await d.git_repository("waits")
    # A failure is retried after retryInterval (else interval, 1h here), as in Flux.
    await d.kustomization("waits", source="waits", wait=True, timeout="2s", retryInterval="1s")
    # Nothing rolls the Deployment out: no healthChecks listed, yet it is waited for.
    obj = await d.observe.wait_reason(KUSTOMIZATION, "waits", "HealthCheckFailed")
    message = condition(obj, "Ready")["message"]  # type: ignore[index]
    assert message.startswith("health check timed out: ")
    assert f"Deployment/{ns}/web" in message
    assert f"ConfigMap/{ns}/cm" not in message, "only what is unhealthy is named"
    assert (condition(obj, "Healthy") or {}).get("status") == "False"
    assert obj["status"].get("lastAppliedRevision") is None

    async with simulated_rollouts(d.kube, namespace=ns):
        ready = await d.observe.wait_ready(KUSTOMIZATION, "waits")
    assert ready["status"]["lastAppliedRevision"] == f"main@sha1:{repo.head}"
    assert (condition(ready, "Healthy") or {}).get("status") == "True"


async def test_events_only_when_something_changed(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    repo = d.repo("quiet")
    repo.commit("v1", files={"a.yaml": config_map("a", ns, k="1"), "b.yaml": config_map("b", ns)})
    repo.push()
    await d.git_repository("quiet")
    await d.kustomization("quiet", source="quiet")
    await d.observe.wait_ready(KUSTOMIZATION, "quiet")

    # The same revision again: everything unchanged, nothing to tell but the log.
    with capture_logs() as entries:
        await d.observe.poke(KUSTOMIZATION, "quiet", "again")
    applied = [
        e["output"]
        for e in entries
        if e["event"] == "server-side apply completed" and f"ConfigMap/{ns}/a" in e["output"]
    ]
    assert applied[-1] == {f"ConfigMap/{ns}/a": "unchanged", f"ConfigMap/{ns}/b": "unchanged"}

    repo.commit("v2", files={"a.yaml": config_map("a", ns, k="2")})
    repo.push()
    await d.observe.poke(GITREPO, "quiet", "v2")
    await d.observe.wait(
        KUSTOMIZATION,
        "quiet",
        lambda o: o["status"].get("lastAppliedRevision") == f"main@sha1:{repo.head}",
        what="v2 applied",
    )
    configured = f"ConfigMap/{ns}/a configured"
    edit = await d.wait_event("quiet", reason="Progressing", message=configured)
    revision = edit["metadata"]["annotations"]["kustomize.toolkit.fluxcd.io/revision"]
    assert revision == f"main@sha1:{repo.head}"
    # Events are written in order, so one from the unchanged reconcile would be here by now
    # (a repeated message would show as a count of 2).
    progressing = await d.events("quiet", reason="Progressing")
    assert sorted((e.get("message", ""), e["count"]) for e in progressing) == [
        (configured, 1),
        (f"ConfigMap/{ns}/a created\nConfigMap/{ns}/b created", 1),
    ]


async def test_status_churn_is_not_reported_as_configured(delivery: Delivery) -> None:
    """A Deployment's status written by a controller (here as `kubectl patch
    --subresource=status` does, which servers before 1.22 list as an Update of the
    object) is not drift: no `configured`, no Progressing event, no alert."""
    d = delivery
    ns = d.namespace
    repo = d.repo("churn")
    repo.commit("v1", files={"web.yaml": deployment("web", ns)})
    repo.push()
    await d.git_repository("churn")
    await d.kustomization("churn", source="churn")
    await d.observe.wait_ready(KUSTOMIZATION, "churn")
    for round_ in (1, 2):
        await d.kube.request(
            "PATCH",
            DEPLOYMENT.path(namespace=ns, name="web") + "/status",
            query=[("fieldManager", "kubectl-patch")],
            body={
                "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": round_ - 1}
            },
            content_type="application/merge-patch+json",
        )
        with capture_logs() as entries:
            await d.observe.poke(KUSTOMIZATION, "churn", f"churn-{round_}")
        applied = [e["output"] for e in entries if e["event"] == "server-side apply completed"]
        assert applied[-1] == {f"Deployment/{ns}/web": "unchanged"}, round_
    progressing = await d.events("churn", reason="Progressing")
    assert [e.get("message", "") for e in progressing] == [f"Deployment/{ns}/web created"]
