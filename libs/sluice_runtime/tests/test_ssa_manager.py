"""The ssa ResourceManager (apply, dry-run, prune, waits) against the real API server.

Objects here are what a Kustomization build produces; each test checks
what the cluster holds afterwards, not only what the change set says.
"""

from __future__ import annotations

import contextlib
import copy
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from sluice_api.meta import ObjectId
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.discovery import RestMapper
from sluice_runtime.kube.errors import KubeError, NotFound
from sluice_runtime.kube.resources import CONFIG_MAP, CRD, NAMESPACE, SERVICE_ACCOUNT, ResourceType
from sluice_runtime.ssa.changeset import Action, ChangeSet
from sluice_runtime.ssa.errors import ApplyFailed
from sluice_runtime.ssa.manager import ResourceManager

from .test_discovery import crd_manifest, unique_group

FIELD_MANAGER = "sluice-test"
SERVICE = ResourceType("", "v1", "services", "Service")
DEPLOYMENT = ResourceType("apps", "v1", "deployments", "Deployment")
JOB = ResourceType("batch", "v1", "jobs", "Job")
ROLE = ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDING = ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")


def owner_labels(namespace: str) -> dict[str, str]:
    return {
        "kustomize.toolkit.fluxcd.io/name": "app",
        "kustomize.toolkit.fluxcd.io/namespace": namespace,
    }


def make_manager(client: KubeClient, namespace: str, **kwargs: Any) -> ResourceManager:
    return ResourceManager(
        client,
        RestMapper(client),
        field_manager=FIELD_MANAGER,
        owner_labels=owner_labels(namespace),
        wait_interval=0.2,
        **kwargs,
    )


@pytest.fixture
def manager(kube: KubeClient, namespace: str) -> ResourceManager:
    return make_manager(kube, namespace)


def configmap(name: str, namespace: str, data: dict[str, str] | None = None, **meta: Any) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, **meta},
        "data": data if data is not None else {"key": "value"},
    }


def service(name: str, namespace: str, port: int = 80) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"app": name},
            "ports": [{"name": "http", "port": port, "targetPort": 8080}],
        },
    }


def deployment(name: str, namespace: str, image: str = "nginx:1.25") -> JSON:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {"name": "app", "image": image, "ports": [{"containerPort": 8080}]}
                    ]
                },
            },
        },
    }


def job(name: str, namespace: str, command: str, **annotations: str) -> JSON:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "run", "image": "busybox", "command": ["sh", "-c", command]}
                    ],
                }
            }
        },
    }


def actions(changeset: ChangeSet) -> dict[str, str]:
    return {e.subject: str(e.action) for e in changeset.entries}


async def patch_as(
    client: KubeClient, rt: ResourceType, name: str, namespace: str, patch: JSON, *, manager: str
) -> None:
    """A merge patch recorded under `manager`, as `kubectl edit` would be."""
    await client.request(
        "PATCH",
        rt.path(namespace=namespace, name=name),
        query=[("fieldManager", manager)],
        body=patch,
        content_type="application/merge-patch+json",
    )


@pytest_asyncio.fixture(loop_scope="session")
async def group(kube: KubeClient) -> AsyncIterator[str]:
    name = unique_group()
    yield name
    for crd in (await kube.list(CRD)).items:
        if crd["spec"]["group"] == name:
            with contextlib.suppress(KubeError):
                await kube.delete(CRD, crd["metadata"]["name"])


@pytest_asyncio.fixture(loop_scope="session")
async def other_namespace(kube: KubeClient) -> AsyncIterator[str]:
    name = f"t-other-{secrets.token_hex(3)}"
    await kube.create(NAMESPACE, {"metadata": {"name": name}})
    yield name
    with contextlib.suppress(KubeError):
        await kube.delete(NAMESPACE, name)


# -- apply ------------------------------------------------------------------------


async def test_create_unchanged_configured(
    kube: KubeClient, namespace: str, manager: ResourceManager
) -> None:
    objects = [deployment("web", namespace), service("web", namespace), configmap("web", namespace)]
    first = await manager.apply_all_staged(objects)
    assert first.summary() == (
        f"ConfigMap/{namespace}/web created\nService/{namespace}/web created\nDeployment/{namespace}/web created"
    )
    assert first.changed
    assert first.to_inventory().model_dump(by_alias=True) == {
        "entries": [
            {"id": f"{namespace}_web__ConfigMap", "v": "v1"},
            {"id": f"{namespace}_web__Service", "v": "v1"},
            {"id": f"{namespace}_web_apps_Deployment", "v": "v1"},
        ]
    }
    # The resource each object was applied through travels with it.
    assert [e.ref.rt for e in first.entries] == [CONFIG_MAP, SERVICE, DEPLOYMENT]
    live = await kube.get(CONFIG_MAP, "web", namespace)
    assert owner_labels(namespace).items() <= live["metadata"]["labels"].items()
    assert {m["manager"] for m in live["metadata"]["managedFields"]} == {FIELD_MANAGER}

    versions = {
        rt.kind: (await kube.get(rt, "web", namespace))["metadata"]["resourceVersion"]
        for rt in (CONFIG_MAP, SERVICE, DEPLOYMENT)
    }
    before = kube.request_count
    second = await manager.apply_all_staged(objects)
    assert all(e.action is Action.UNCHANGED for e in second.entries) and not second.changed
    # One read and one dry-run per object: the dry-run of the whole set is reused.
    assert kube.request_count - before == 2 * len(objects)
    for rt in (CONFIG_MAP, SERVICE, DEPLOYMENT):
        # Unchanged objects were not written: no new resourceVersion, no watch event.
        assert (await kube.get(rt, "web", namespace))["metadata"]["resourceVersion"] == versions[
            rt.kind
        ]

    objects[0] = deployment("web", namespace, image="nginx:1.26")
    third = await manager.apply_all_staged(objects)
    assert actions(third) == {
        f"ConfigMap/{namespace}/web": "unchanged",
        f"Service/{namespace}/web": "unchanged",
        f"Deployment/{namespace}/web": "configured",
    }
    assert third.summary(only_changes=True) == f"Deployment/{namespace}/web configured"
    live = await kube.get(DEPLOYMENT, "web", namespace)
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.26"


async def test_drift_by_kubectl_is_reverted_and_its_fields_removed(
    kube: KubeClient, namespace: str, manager: ResourceManager
) -> None:
    await manager.apply_all_staged([configmap("c", namespace, {"a": "1"})])
    await patch_as(
        kube,
        CONFIG_MAP,
        "c",
        namespace,
        {
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "data": {"a": "changed", "extra": "added by hand"},
        },
        manager="kubectl-edit",
    )
    again = await manager.apply_all_staged([configmap("c", namespace, {"a": "1"})])
    assert actions(again) == {f"ConfigMap/{namespace}/c": "configured"}
    live = await kube.get(CONFIG_MAP, "c", namespace)
    assert live["data"] == {"a": "1"}
    assert "kubectl.kubernetes.io/last-applied-configuration" not in (
        live["metadata"].get("annotations") or {}
    )
    assert {m["manager"] for m in live["metadata"]["managedFields"]} == {FIELD_MANAGER}
    settled = await manager.apply_all_staged([configmap("c", namespace, {"a": "1"})])
    assert actions(settled) == {f"ConfigMap/{namespace}/c": "unchanged"}


async def test_merge_keeps_fields_of_other_managers(
    kube: KubeClient, namespace: str, manager: ResourceManager
) -> None:
    merged = configmap(
        "c", namespace, {"a": "1"}, annotations={"kustomize.toolkit.fluxcd.io/ssa": "Merge"}
    )
    await manager.apply_all_staged([merged])
    await patch_as(
        kube,
        CONFIG_MAP,
        "c",
        namespace,
        {"data": {"a": "changed", "extra": "kept"}},
        manager="kubectl-edit",
    )
    again = await manager.apply_all_staged([merged])
    assert actions(again) == {f"ConfigMap/{namespace}/c": "configured"}
    assert (await kube.get(CONFIG_MAP, "c", namespace))["data"] == {"a": "1", "extra": "kept"}


async def test_fields_of_other_controllers_are_not_drift(
    kube: KubeClient, namespace: str, manager: ResourceManager
) -> None:
    await manager.apply_all_staged([deployment("web", namespace)])
    # An autoscaler-like controller owns replicas and a label we never set.
    await patch_as(
        kube,
        DEPLOYMENT,
        "web",
        namespace,
        {"metadata": {"labels": {"scaled-by": "hpa"}}},
        manager="horizontal-pod-autoscaler",
    )
    again = await manager.apply_all_staged([deployment("web", namespace)])
    assert actions(again) == {f"Deployment/{namespace}/web": "unchanged"}
    assert (await kube.get(DEPLOYMENT, "web", namespace))["metadata"]["labels"][
        "scaled-by"
    ] == "hpa"


async def test_crd_and_its_custom_resources_in_one_set(
    kube: KubeClient, namespace: str, manager: ResourceManager, group: str
) -> None:
    widget = {
        "apiVersion": f"{group}/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": namespace},
        "spec": {"size": 3},
    }
    # The CR comes first in the set: staging, not order, must make it work.
    changeset = await manager.apply_all_staged([widget, crd_manifest(group, "Widget")])
    assert changeset.summary() == (
        f"CustomResourceDefinition/widgets.{group} created\nWidget/{namespace}/w created"
    )
    rt = ResourceType(group, "v1", "widgets", "Widget")
    assert (await kube.get(rt, "w", namespace))["spec"] == {"size": 3}
    again = await manager.apply_all_staged([widget, crd_manifest(group, "Widget")])
    assert not again.changed


async def test_namespace_and_its_objects_in_one_set(
    kube: KubeClient, namespace: str, manager: ResourceManager
) -> None:
    fresh = f"{namespace}-new"
    objects = [
        configmap("c", fresh),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": fresh}},
    ]
    try:
        deferred = await manager.dry_run_all(objects)
        assert [(d.id.display, d.reason) for d in deferred] == [
            (f"ConfigMap/{fresh}/c", f"its Namespace {fresh} is in the set")
        ]
        changeset = await manager.apply_all_staged(objects)
        assert changeset.summary() == f"Namespace/{fresh} created\nConfigMap/{fresh}/c created"
        assert changeset.entries[0].id.inventory_id == f"_{fresh}__Namespace"
        assert (await kube.get(CONFIG_MAP, "c", fresh))["data"] == {"key": "value"}
    finally:
        with contextlib.suppress(KubeError):
            await kube.delete(NAMESPACE, fresh)


async def test_ssa_ignore_skips(kube: KubeClient, namespace: str, manager: ResourceManager) -> None:
    ignored = configmap("c", namespace, annotations={"kustomize.toolkit.fluxcd.io/ssa": "Ignore"})
    changeset = await manager.apply_all_staged([ignored])
    assert actions(changeset) == {f"ConfigMap/{namespace}/c": "skipped"}
    with pytest.raises(NotFound):
        await kube.get(CONFIG_MAP, "c", namespace)


async def test_ssa_if_not_present_creates_but_never_updates(
    kube: KubeClient, namespace: str, manager: ResourceManager
) -> None:
    annotations = {"kustomize.toolkit.fluxcd.io/ssa": "IfNotPresent"}
    first = await manager.apply_all_staged(
        [configmap("c", namespace, {"a": "1"}, annotations=annotations)]
    )
    assert actions(first) == {f"ConfigMap/{namespace}/c": "created"}
    second = await manager.apply_all_staged(
        [configmap("c", namespace, {"a": "2"}, annotations=annotations)]
    )
    assert actions(second) == {f"ConfigMap/{namespace}/c": "skipped"}
    assert (await kube.get(CONFIG_MAP, "c", namespace))["data"] == {"a": "1"}


async def test_reconcile_disabled(
    kube: KubeClient, namespace: str, manager: ResourceManager
) -> None:
    # Annotated in the cluster (kubectl annotate): left alone, never pruned.
    await manager.apply_all_staged([configmap("live", namespace, {"a": "1"})])
    await patch_as(
        kube,
        CONFIG_MAP,
        "live",
        namespace,
        {"metadata": {"annotations": {"kustomize.toolkit.fluxcd.io/reconcile": "disabled"}}},
        manager="kubectl-annotate",
    )
    # Annotated in the manifest: created once, then left alone.
    disabled = {"kustomize.toolkit.fluxcd.io/reconcile": "disabled"}
    objects = [
        configmap("live", namespace, {"a": "2"}),
        configmap("new", namespace, {"a": "1"}, annotations=disabled),
    ]
    first = await manager.apply_all_staged(objects)
    assert actions(first) == {
        f"ConfigMap/{namespace}/live": "skipped",
        f"ConfigMap/{namespace}/new": "created",
    }
    assert [e.prunable for e in first.entries] == [False, False]
    objects[1] = configmap("new", namespace, {"a": "2"}, annotations=disabled)
    second = await manager.apply_all_staged(objects)
    assert set(actions(second).values()) == {"skipped"}
    assert (await kube.get(CONFIG_MAP, "live", namespace))["data"] == {"a": "1"}
    assert (await kube.get(CONFIG_MAP, "new", namespace))["data"] == {"a": "1"}


async def test_immutable_configmap_needs_force(
    kube: KubeClient, namespace: str, manager: ResourceManager
) -> None:
    frozen = {**configmap("c", namespace, {"a": "1"}), "immutable": True}
    await manager.apply_all_staged([frozen])
    uid = (await kube.get(CONFIG_MAP, "c", namespace))["metadata"]["uid"]
    changed = {**configmap("c", namespace, {"a": "2"}), "immutable": True}

    with pytest.raises(ApplyFailed) as caught:
        await manager.apply_all_staged([changed])
    assert caught.value.subject == f"ConfigMap/{namespace}/c"
    assert "field is immutable" in caught.value.message
    assert caught.value.status == 422
    assert (await kube.get(CONFIG_MAP, "c", namespace))["data"] == {"a": "1"}

    forced = await manager.apply_all_staged([changed], force=True)
    assert actions(forced) == {f"ConfigMap/{namespace}/c": "created"}
    assert forced.entries[0].reason == "recreated: immutable field changed"
    live = await kube.get(CONFIG_MAP, "c", namespace)
    assert live["data"] == {"a": "2"} and live["metadata"]["uid"] != uid


async def test_immutable_job_is_recreated_when_annotated(
    kube: KubeClient, namespace: str, manager: ResourceManager
) -> None:
    await manager.apply_all_staged([job("migrate", namespace, "echo one")])
    uid = (await kube.get(JOB, "migrate", namespace))["metadata"]["uid"]
    with pytest.raises(
        ApplyFailed,
        match=f'^Job/{namespace}/migrate: Job.batch "migrate" is invalid: .*field is immutable',
    ):
        await manager.apply_all_staged([job("migrate", namespace, "echo two")])

    forced = job(
        "migrate", namespace, "echo two", **{"kustomize.toolkit.fluxcd.io/force": "enabled"}
    )
    changeset = await manager.apply_all_staged([forced])
    assert actions(changeset) == {f"Job/{namespace}/migrate": "created"}
    live = await kube.get(JOB, "migrate", namespace)
    assert live["metadata"]["uid"] != uid
    assert live["spec"]["template"]["spec"]["containers"][0]["command"] == ["sh", "-c", "echo two"]


async def test_dry_run_rejection_applies_nothing(
    kube: KubeClient, namespace: str, manager: ResourceManager
) -> None:
    objects = [
        configmap("good", namespace),
        service("bad", namespace, port=70000),
        deployment("web", namespace),
    ]
    with pytest.raises(ApplyFailed) as caught:
        await manager.apply_all_staged(objects)
    error = caught.value
    assert error.subject == f"Service/{namespace}/bad"
    assert error.dry_run
    # The API's own words, the object once, what to do; no status code, no doubled prefix.
    assert str(error).startswith(f'Service/{namespace}/bad: Service "bad" is invalid: ')
    assert "spec.ports[0].port: Invalid value: 70000" in error.message
    assert str(error).endswith("; fix the object in its source")
    assert "422" not in str(error) and "dry-run failed" not in str(error)
    assert [f.subject for f in error.failures] == [f"Service/{namespace}/bad"]
    assert not error.changeset.entries
    for rt, name in ((CONFIG_MAP, "good"), (DEPLOYMENT, "web")):
        with pytest.raises(NotFound):
            await kube.get(rt, name, namespace)


async def test_a_rejected_object_in_a_new_namespace_stops_its_whole_stage(
    kube: KubeClient, namespace: str, manager: ResourceManager
) -> None:
    # Objects of a Namespace the set creates can only be dry-run once it exists;
    # then they are all dry-run before any of them is applied.
    fresh = f"{namespace}-stage"
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": fresh}},
        configmap("good", fresh),
        service("bad", fresh, port=70000),
        deployment("web", fresh),
    ]
    try:
        with pytest.raises(ApplyFailed) as caught:
            await manager.apply_all_staged(objects)
        error = caught.value
        assert error.dry_run
        assert [f.subject for f in error.failures] == [f"Service/{fresh}/bad"]
        assert "spec.ports[0].port: Invalid value: 70000" in error.message
        # The Namespace was applied and is reported, so it reaches the inventory.
        assert error.changeset.summary() == f"Namespace/{fresh} created"
        for rt, name in ((CONFIG_MAP, "good"), (DEPLOYMENT, "web")):
            with pytest.raises(NotFound):
                await kube.get(rt, name, fresh)
    finally:
        with contextlib.suppress(KubeError):
            await kube.delete(NAMESPACE, fresh)


async def test_dry_run_defers_objects_of_crds_in_the_set(
    namespace: str, manager: ResourceManager, group: str
) -> None:
    widget = {
        "apiVersion": f"{group}/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": namespace},
    }
    deferred = await manager.dry_run_all(
        [crd_manifest(group, "Widget"), widget, configmap("c", namespace)]
    )
    assert [(d.id.display, d.reason) for d in deferred] == [
        (f"Widget/{namespace}/w", f"its CustomResourceDefinition widgets.{group} is in the set")
    ]


async def test_unknown_kind_fails_naming_the_object(
    namespace: str, manager: ResourceManager
) -> None:
    thing = {
        "apiVersion": "nowhere.example.com/v1",
        "kind": "Thing",
        "metadata": {"name": "t", "namespace": namespace},
    }
    with pytest.raises(ApplyFailed) as caught:
        await manager.apply_all_staged([configmap("c", namespace), thing])
    assert str(caught.value) == (
        f"Thing/{namespace}/t: the API server serves no kind 'Thing' in 'nowhere.example.com/v1' "
        "(install its CustomResourceDefinition first, or add it to the same set)"
    )


async def test_cluster_scoped_objects_ignore_a_namespace(
    kube: KubeClient, namespace: str, manager: ResourceManager
) -> None:
    name = f"{namespace}-reader"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
    }
    cluster_role = ResourceType(
        "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False
    )
    try:
        changeset = await manager.apply_all_staged([role])
        assert changeset.entries[0].id == ObjectId(
            "rbac.authorization.k8s.io", "ClusterRole", "", name
        )
        assert changeset.summary() == f"ClusterRole/{name} created"
    finally:
        with contextlib.suppress(KubeError):
            await kube.delete(cluster_role, name)


# -- prune ------------------------------------------------------------------------


async def test_delete_all_respects_ownership_and_annotations(
    kube: KubeClient, namespace: str, manager: ResourceManager
) -> None:
    objects = [
        configmap("owned", namespace),
        configmap("adopted", namespace),
        configmap("kept", namespace, annotations={"kustomize.toolkit.fluxcd.io/prune": "disabled"}),
        service("web", namespace),
    ]
    await manager.apply_all_staged(objects)
    # Someone else took this one over: it no longer carries our labels.
    await patch_as(
        kube,
        CONFIG_MAP,
        "adopted",
        namespace,
        {"metadata": {"labels": {"kustomize.toolkit.fluxcd.io/name": "other"}}},
        manager="kubectl-label",
    )
    ids = [ObjectId.of(o) for o in objects] + [ObjectId("", "ConfigMap", namespace, "gone")]
    changeset = await manager.delete_all(ids)
    assert actions(changeset) == {
        f"ConfigMap/{namespace}/owned": "deleted",
        f"ConfigMap/{namespace}/adopted": "skipped",
        f"ConfigMap/{namespace}/kept": "skipped",
        f"ConfigMap/{namespace}/gone": "skipped",
        f"Service/{namespace}/web": "deleted",
    }
    reasons = {e.id.name: e.reason for e in changeset.entries}
    assert reasons["adopted"].startswith("not owned")
    assert reasons["kept"] == "pruning disabled by annotation"
    assert reasons["gone"] == "not found"
    assert changeset.changed
    for name, exists in (("owned", False), ("adopted", True), ("kept", True)):
        try:
            await kube.get(CONFIG_MAP, name, namespace)
            assert exists, name
        except NotFound:
            assert not exists, name


async def test_delete_all_deletes_namespaces_and_crds_last(
    kube: KubeClient, namespace: str, manager: ResourceManager, group: str
) -> None:
    fresh = f"{namespace}-pruned"
    widget = {
        "apiVersion": f"{group}/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": fresh},
    }
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": fresh}},
        crd_manifest(group, "Widget"),
        widget,
        configmap("c", fresh),
    ]
    try:
        await manager.apply_all_staged(objects)
        changeset = await manager.delete_all([ObjectId.of(o) for o in objects])
        assert [e.id.kind for e in changeset.entries] == [
            "ConfigMap",
            "Widget",
            "CustomResourceDefinition",
            "Namespace",
        ]
        assert set(actions(changeset).values()) == {"deleted"}
    finally:
        with contextlib.suppress(KubeError):
            await kube.delete(NAMESPACE, fresh)


async def test_wait_for_set(kube: KubeClient, namespace: str, manager: ResourceManager) -> None:
    changeset = await manager.apply_all_staged(
        [
            configmap("c", namespace),
            deployment("web", namespace),
            configmap("i", namespace, annotations={"kustomize.toolkit.fluxcd.io/ssa": "Ignore"}),
        ]
    )
    # The apply's answers are the first readings: a fresh Deployment is not yet rolled out.
    observed = {e.id.name: e.observed.status if e.observed else None for e in changeset.entries}
    assert observed == {"c": "Current", "web": "InProgress", "i": None}
    report = await manager.wait_for_set(changeset, timeout=0.5, interval=0.1)
    assert report.timed_out
    assert [o.subject for o in report.unhealthy] == [f"Deployment/{namespace}/web"]
    assert [o.subject for o in report.objects] == [
        f"ConfigMap/{namespace}/c",
        f"Deployment/{namespace}/web",
    ]


# -- a tenant's RBAC decides ----------------------------------------------------------


async def test_impersonated_apply_is_limited_by_rbac(
    kube: KubeClient, namespace: str, other_namespace: str
) -> None:
    await kube.create(SERVICE_ACCOUNT, {"metadata": {"name": "tenant", "namespace": namespace}})
    await kube.create(
        ROLE,
        {
            "metadata": {"name": "tenant", "namespace": namespace},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "verbs": ["get", "list", "create", "patch", "update", "delete"],
                }
            ],
        },
    )
    await kube.create(
        ROLE_BINDING,
        {
            "metadata": {"name": "tenant", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}],
        },
    )
    tenant = make_manager(kube.impersonate(f"system:serviceaccount:{namespace}:tenant"), namespace)

    allowed = await tenant.apply_all_staged([configmap("mine", namespace)])
    assert actions(allowed) == {f"ConfigMap/{namespace}/mine": "created"}

    with pytest.raises(ApplyFailed) as caught:
        await tenant.apply_all_staged([configmap("theirs", other_namespace)])
    error = caught.value
    assert error.subject == f"ConfigMap/{other_namespace}/theirs"
    assert error.status == 403 and error.forbidden
    assert f'User "system:serviceaccount:{namespace}:tenant" cannot' in error.message
    with pytest.raises(NotFound):
        await kube.get(CONFIG_MAP, "theirs", other_namespace)

    # Pruning goes through the same identity.
    await kube.create(
        CONFIG_MAP,
        copy.deepcopy(configmap("theirs", other_namespace, labels=owner_labels(namespace))),
    )
    with pytest.raises(ApplyFailed) as denied:
        await tenant.delete_all([ObjectId("", "ConfigMap", other_namespace, "theirs")])
    assert denied.value.forbidden


async def _patch_as_other(
    client: KubeClient, name: str, namespace: str, patch: JSON, *, manager: str, status: bool
) -> None:
    path = DEPLOYMENT.path(namespace=namespace, name=name) + ("/status" if status else "")
    await client.request(
        "PATCH",
        path,
        query=[("fieldManager", manager)],
        body=patch,
        content_type="application/merge-patch+json",
    )


def _status(generation: int) -> JSON:
    return {"status": {"observedGeneration": generation, "replicas": 2, "updatedReplicas": 1}}


def _restarted(generation: int) -> JSON:
    at = f"2026-01-0{generation}T00:00:00Z"
    return {"spec": {"template": {"metadata": {"annotations": {"restartedAt": at}}}}}


@pytest.mark.parametrize(
    ("other", "status", "patch"),
    [
        # The deployment controller writes status on every rollout.
        pytest.param("kube-controller-manager", True, _status, id="deployment-controller-status"),
        # `kubectl patch --subresource=status` records itself as kubectl-patch, which
        # servers before 1.22 list as an Update of the object, not of its status.
        pytest.param("kubectl-patch", True, _status, id="kubectl-status"),
        # Another controller sets a field the apply does not own.
        pytest.param("rollout-restarter", False, _restarted, id="other-manager-field"),
    ],
)
async def test_changes_the_apply_does_not_own_are_not_drift(
    kube: KubeClient,
    namespace: str,
    manager: ResourceManager,
    other: str,
    status: bool,
    patch: Any,
) -> None:
    await manager.apply_all_staged([deployment("web", namespace)])
    for round_ in (1, 2):
        await _patch_as_other(kube, "web", namespace, patch(round_), manager=other, status=status)
        changed = await kube.get(DEPLOYMENT, "web", namespace)
        again = await manager.apply_all_staged([deployment("web", namespace)])
        assert actions(again) == {f"Deployment/{namespace}/web": "unchanged"}, round_
        live = await kube.get(DEPLOYMENT, "web", namespace)
        # Not written either, and what the other manager set stays.
        assert live["metadata"]["resourceVersion"] == changed["metadata"]["resourceVersion"]
        assert live["status" if status else "spec"] == changed["status" if status else "spec"]
