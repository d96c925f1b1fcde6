"""Kustomizations written in the old API versions, through the real controllers.

The kustomize-controller design this project starts from writes its whole
example in source/kustomize v1beta1, with `validation:` and health checks that
name only a kind. It must apply unchanged, go Ready in dependency order, and
read back as v1; and the v1beta1/v1beta2-only fields must mean what they meant.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kustomize_controller.specs import dry_run_first_of
from sluice_api.kustomize import Kustomization
from sluice_envtest.harness import condition, is_ready
from sluice_envtest.workloads import simulated_rollouts
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import ResourceType

from .conftest import (
    CONFIG_MAP,
    DEPLOYMENT,
    GITREPO,
    KUSTOMIZATION,
    NAMESPACE,
    TEST_LABEL,
    Delivery,
    config_map,
    deployment,
    namespace_doc,
)

SEED = Path(__file__).parent / "fixtures" / "seed_004_example.yaml"
REPOS = {
    "https://github.com/stefanprodan/gitops-istio": "gitops-istio",
    "https://github.com/stefanprodan/podinfo-deploy": "podinfo-deploy",
}

KINDS = {"GitRepository": GITREPO, "Kustomization": KUSTOMIZATION}


def versioned(rt: ResourceType, version: str) -> ResourceType:
    return ResourceType(rt.group, version, rt.plural, rt.kind, rt.namespaced)


def service(name: str, namespace: str) -> str:
    return (
        f"apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {namespace}\n"
        f"spec:\n  selector: {{app: {name}}}\n  ports:\n    - port: 80\n"
    )


async def apply_seed(d: Delivery) -> list[dict[str, Any]]:
    """Create the seed's objects as written, in the test's namespace and with the
    Git URLs pointing at local copies of the two repositories (the only changes)."""
    created = []
    for doc in yaml.safe_load_all(SEED.read_text()):
        doc["metadata"]["namespace"] = d.namespace
        doc["metadata"]["labels"] = {TEST_LABEL: d.namespace}
        if doc["kind"] == "GitRepository":
            doc["spec"]["url"] = d.git.url(f"{REPOS[doc['spec']['url']]}-{d.namespace}")
        rt = versioned(KINDS[doc["kind"]], doc["apiVersion"].split("/")[1])
        created.append(await d.kube.create(rt, doc, namespace=d.namespace))
    return created


async def test_the_seed_example_applies_in_v1beta1_and_goes_ready_in_order(
    delivery: Delivery,
) -> None:
    d = delivery
    # The two repositories the example points at, reduced to what it deploys.
    istio = d.git.create_repo(f"gitops-istio-{d.namespace}", branch="master")
    istio.commit(
        "istio",
        files={
            "istio/namespace.yaml": namespace_doc("istio-system"),
            "istio/istiod.yaml": deployment("istiod", "istio-system"),
        },
    )
    istio.push()
    webapp = d.git.create_repo(f"podinfo-deploy-{d.namespace}", branch="master")
    webapp.commit(
        "webapp",
        files={
            "webapp/common/namespace.yaml": namespace_doc("webapp"),
            "webapp/common/config.yaml": config_map("common", "webapp", env="prod"),
            "webapp/backend/deployment.yaml": deployment("backend", "webapp"),
            "webapp/backend/service.yaml": service("backend", "webapp"),
            "webapp/frontend/deployment.yaml": deployment("frontend", "webapp"),
            "webapp/frontend/service.yaml": service("frontend", "webapp"),
        },
    )
    webapp.push()
    created = await apply_seed(d)
    assert [(o["apiVersion"], o["kind"]) for o in created][:2] == [
        ("source.toolkit.fluxcd.io/v1beta1", "GitRepository"),
        ("kustomize.toolkit.fluxcd.io/v1beta1", "Kustomization"),
    ]

    names = ["istio", "webapp-common", "webapp-backend", "webapp-frontend"]
    # Nothing rolls istiod out yet: istio waits on its kind-only health check,
    # and everything downstream waits on istio.
    for name in names[1:]:
        await d.observe.wait(
            KUSTOMIZATION,
            name,
            lambda o: (condition(o, "Ready") or {}).get("reason") == "DependencyNotReady",
            what="waiting on its dependency",
        )
    ready_at: dict[str, float] = {}
    async with simulated_rollouts(d.kube):
        deadline = time.monotonic() + 60
        while len(ready_at) < len(names) and time.monotonic() < deadline:
            for name in names:
                obj = await d.observe.get(KUSTOMIZATION, name)
                if name not in ready_at and is_ready(obj):
                    ready_at[name] = time.monotonic()
            await asyncio.sleep(0.05)
    assert set(ready_at) == set(names), f"not all ready: {ready_at}"
    assert sorted(names, key=ready_at.__getitem__) == names

    # The health check named only `kind: Deployment`: it was found in apps/v1.
    istio_ks = await d.observe.get(KUSTOMIZATION, "istio")
    assert condition(istio_ks, "Healthy")["status"] == "True"  # type: ignore[index]
    assert (await d.kube.get(DEPLOYMENT, "frontend", "webapp"))["metadata"]["labels"][
        "kustomize.toolkit.fluxcd.io/name"
    ] == "webapp-frontend"

    # Read back as v1 (and v1beta2): the same spec, old-only fields included.
    seed = {o["metadata"]["name"]: o for o in created if o["kind"] == "Kustomization"}
    for name, original in seed.items():
        as_v1 = await d.kube.get(KUSTOMIZATION, name, d.namespace)
        as_v1beta2 = await d.kube.get(versioned(KUSTOMIZATION, "v1beta2"), name, d.namespace)
        assert as_v1["apiVersion"] == "kustomize.toolkit.fluxcd.io/v1"
        assert as_v1["spec"] == original["spec"] == as_v1beta2["spec"]
    backend = await d.kube.get(KUSTOMIZATION, "webapp-backend", d.namespace)
    assert backend["spec"]["validation"] == "server"
    assert backend["spec"]["healthChecks"] == [
        {"kind": "Deployment", "name": "backend", "namespace": "webapp"}
    ]
    assert backend["status"]["lastAppliedRevision"] == f"master@sha1:{webapp.head}"


async def test_validation_server_dry_runs_the_whole_set_first(delivery: Delivery) -> None:
    """v1beta1 `validation: server` dry-runs every object before applying any, so a
    refused Deployment keeps the new Namespace out; with `client` the Namespace
    stage is applied before the Deployment's stage is refused."""
    d = delivery
    ns = d.namespace
    bad = (
        f"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: bad\n  namespace: {ns}\n"
        "spec:\n  template:\n    spec:\n      containers: []\n"
    )
    created = {v: f"{v}-{ns}"[:63] for v in ("server", "client")}
    repo = d.repo("app")
    repo.commit(
        "v1",
        files={
            **{f"{v}/namespace.yaml": namespace_doc(name) for v, name in created.items()},
            **{f"{v}/bad.yaml": bad.replace("name: bad", f"name: {v}-bad") for v in created},
        },
    )
    repo.push()
    await d.git_repository("app")
    for validation in created:
        await d.kube.create(
            versioned(KUSTOMIZATION, "v1beta1"),
            {
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1beta1",
                "kind": "Kustomization",
                "metadata": {"name": validation, "labels": {TEST_LABEL: ns}},
                "spec": {
                    "interval": "1h",
                    "path": f"./{validation}",
                    "sourceRef": {"kind": "GitRepository", "name": "app"},
                    "validation": validation,
                },
            },
            namespace=ns,
        )
    for validation in created:
        failed = await d.observe.wait(
            KUSTOMIZATION,
            validation,
            lambda o: (
                (condition(o, "Ready") or {}).get("status") == "False"
                and bool(o["status"].get("lastAttemptedRevision"))
            ),
        )
        message = condition(failed, "Ready")["message"]  # type: ignore[index]
        assert f"Deployment/{ns}/{validation}-bad" in message
    try:
        await d.kube.get(NAMESPACE, created["server"])
        raise AssertionError("validation: server applied part of a refused set")
    except NotFound:
        pass
    assert (await d.kube.get(NAMESPACE, created["client"]))["metadata"]["labels"][
        "kustomize.toolkit.fluxcd.io/name"
    ] == "client"


async def test_v1beta1_patches_are_applied(delivery: Delivery) -> None:
    """`patchesStrategicMerge` and `patchesJson6902`, served in v1 too, are honoured."""
    d = delivery
    ns = d.namespace
    repo = d.repo("app")
    repo.commit("v1", files={"a.yaml": config_map("cm", ns, k="1", drop="me")})
    repo.push()
    await d.git_repository("app")
    await d.kube.create(
        versioned(KUSTOMIZATION, "v1beta2"),
        {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1beta2",
            "kind": "Kustomization",
            "metadata": {"name": "app", "labels": {TEST_LABEL: ns}},
            "spec": {
                "interval": "1h",
                "path": "./",
                "prune": True,
                "sourceRef": {"kind": "GitRepository", "name": "app"},
                "patchesStrategicMerge": [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": "cm", "namespace": ns},
                        "data": {"smp": "yes"},
                    }
                ],
                "patchesJson6902": [
                    {
                        "target": {"version": "v1", "kind": "ConfigMap", "name": "cm"},
                        "patch": [
                            {"op": "replace", "path": "/data/k", "value": "2"},
                            {"op": "remove", "path": "/data/drop"},
                        ],
                    }
                ],
            },
        },
        namespace=ns,
    )
    await d.observe.wait_ready(KUSTOMIZATION, "app")
    cm = await d.kube.get(CONFIG_MAP, "cm", ns)
    assert cm["data"] == {"k": "2", "smp": "yes"}


@pytest.mark.parametrize(
    ("validation", "dry_run_first"),
    [
        pytest.param(None, True, id="unset"),
        pytest.param("server", True, id="server"),
        pytest.param("client", False, id="client"),
        pytest.param("none", False, id="none"),
    ],
)
def test_validation_decides_the_up_front_dry_run(
    validation: str | None, dry_run_first: bool
) -> None:
    spec: dict[str, Any] = {"interval": "1h", "sourceRef": {"kind": "GitRepository", "name": "a"}}
    if validation is not None:
        spec["validation"] = validation
    ks = Kustomization.from_obj({"metadata": {"name": "a"}, "spec": spec})
    assert dry_run_first_of(ks) is dry_run_first
