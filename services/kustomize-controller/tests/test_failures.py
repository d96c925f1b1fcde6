"""Each step's failure: the condition names the problem and nothing is half-applied."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from sluice_envtest.harness import condition
from sluice_runtime.kube.errors import NotFound

from .conftest import (
    CONFIG_MAP,
    DEPLOYMENT,
    GITREPO,
    KUSTOMIZATION,
    ROLE,
    Delivery,
    Flags,
    config_map,
    make_tenant,
)


async def absent(d: Delivery, name: str, namespace: str | None = None) -> bool:
    try:
        await d.kube.get(CONFIG_MAP, name, namespace or d.namespace)
    except NotFound:
        return True
    return False


async def failing(
    d: Delivery, name: str, files: dict[str, str], reason: str, **spec: Any
) -> tuple[dict[str, Any], str]:
    repo = d.repo(name)
    repo.commit("c", files=files)
    repo.push()
    await d.git_repository(name)
    await d.kustomization(name, source=name, **spec)
    obj = await d.observe.wait_reason(KUSTOMIZATION, name, reason)
    ready = condition(obj, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert obj["status"].get("lastAppliedRevision") is None
    assert obj["status"]["lastAttemptedRevision"] == f"main@sha1:{repo.head}"
    return obj, ready["message"]


BAD_YAML = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: broken\n data: [oops\n"


@pytest.mark.parametrize(
    ("files", "spec", "expect"),
    [
        pytest.param(
            {"ok.yaml": config_map("ok")},
            {"path": "./nope"},
            "path './nope' not found",
            id="missing-path",
        ),
        pytest.param(
            {"ok.yaml": config_map("ok"), "bad.yaml": BAD_YAML},
            {},
            # kustomize's own words: the file, the line (as Go's YAML parser counts) and the problem.
            "kustomize build failed: bad.yaml: yaml: line 4: did not find expected key",
            id="bad-yaml",
        ),
        pytest.param(
            {
                "ok.yaml": config_map("ok"),
                "kustomization.yaml": "resources:\n- ok.yaml\n- missing.yaml\n",
            },
            {},
            "missing.yaml",
            id="kustomize-error",
        ),
        pytest.param(
            {
                "ok.yaml": config_map("ok"),
                "kustomization.yaml": "resources:\n- ok.yaml\n- https://github.com/fluxcd/flux2/manifests/bases/helm-controller?ref=main\n",
            },
            {},
            "https://github.com/fluxcd/flux2",
            id="remote-base-refused",
        ),
        pytest.param(
            {"ok.yaml": config_map("ok", v="${my_var}")},
            {"postBuild": {"substitute": {"my-var": "x"}}},
            "variable name 'my-var' is not valid",
            id="invalid-substitution",
        ),
        pytest.param(
            {"ok.yaml": config_map("ok", v="${var")},
            {"postBuild": {"substitute": {"var": "x"}}},
            "ConfigMap",
            id="malformed-substitution",
        ),
        pytest.param(
            {
                "ok.yaml": config_map("ok"),
                "unnamed.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${unset}\n",
            },
            {"postBuild": {"substitute": {"var": "x"}}},
            # The set is validated (once, by the apply) before anything is sent.
            "invalid objects: ConfigMap/<no name> (object #",
            id="substituted-away-name",
        ),
    ],
)
async def test_build_failures(
    delivery: Delivery, files: dict[str, str], spec: dict[str, Any], expect: str
) -> None:
    # With the test's namespace as target, `ok` would be applied if the build succeeded.
    spec = {"targetNamespace": delivery.namespace, **spec}
    _, message = await failing(delivery, "build", files, "BuildFailed", **spec)
    assert expect in message, message
    assert await absent(delivery, "ok"), "nothing of a failed build is applied"


async def test_a_dry_run_rejection_names_the_object_and_applies_nothing(delivery: Delivery) -> None:
    d = delivery
    bad = f"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: bad\n  namespace: {d.namespace}\nspec:\n  template:\n    spec:\n      containers: []\n"
    _, message = await failing(
        d,
        "dryrun",
        {"ok.yaml": config_map("ok", d.namespace), "bad.yaml": bad},
        "ReconciliationFailed",
    )
    assert f"Deployment/{d.namespace}/bad" in message
    assert "selector" in message  # the API server's own words
    assert await absent(d, "ok")


@pytest.mark.parametrize(
    ("delivery", "identity"),
    [
        pytest.param(Flags(), {"serviceAccountName": "tenant"}, id="serviceAccountName"),
        pytest.param(
            Flags(kustomize=("--default-service-account", "tenant")),
            {},
            id="default-service-account",
        ),
    ],
    indirect=["delivery"],
)
async def test_a_tenant_cannot_touch_other_namespaces(
    delivery: Delivery, identity: dict[str, str]
) -> None:
    d = delivery
    ns = d.namespace
    await make_tenant(d, ["*"])
    files = {
        "mine.yaml": config_map("mine", ns),
        "theirs.yaml": config_map(f"intrusion-{ns}", "default"),
    }
    # Flux's reason for an apply RBAC refuses (not Sluice's former AccessDenied).
    _, message = await failing(d, "tenant", files, "ReconciliationFailed", **identity)
    assert f"ConfigMap/default/intrusion-{ns}" in message
    assert f"system:serviceaccount:{ns}:tenant" in message
    assert "forbidden" in message.lower()
    # The API's words, the object, what to do: once, without the HTTP status.
    assert message.count("dry-run failed") == 1 and "403" not in message
    assert message.endswith("; grant that permission to the identity, or leave the object out")
    assert await absent(d, f"intrusion-{ns}", "default")
    assert await absent(d, "mine")

    # Within its own namespace the same tenant may deliver.
    repo = d.repo("tenant-ok")
    repo.commit("c", files={"mine.yaml": config_map("mine", ns)})
    repo.push()
    await d.git_repository("tenant-ok")
    await d.kustomization("tenant-ok", source="tenant-ok", **identity)
    await d.observe.wait_ready(KUSTOMIZATION, "tenant-ok")
    assert not await absent(d, "mine")


async def test_a_prune_the_tenant_may_not_do_keeps_the_object_in_the_inventory(
    delivery: Delivery,
) -> None:
    d = delivery
    ns = d.namespace
    await make_tenant(d, ["get", "list", "watch", "create", "update", "patch"])
    repo = d.repo("noprune")
    repo.commit("v1", files={"a.yaml": config_map("a", ns), "b.yaml": config_map("b", ns)})
    repo.push()
    await d.git_repository("noprune")
    await d.kustomization(
        "noprune", source="noprune", serviceAccountName="tenant", retryInterval="1s"
    )
    first = await d.observe.wait_ready(KUSTOMIZATION, "noprune")
    v1 = first["status"]["lastAppliedRevision"]

    # v2 drops b (which the tenant may not delete) and adds c.
    repo.commit("v2", files={"c.yaml": config_map("c", ns)}, remove=["b.yaml"])
    repo.push()
    await d.observe.poke(GITREPO, "noprune", "v2")
    obj = await d.observe.wait_reason(KUSTOMIZATION, "noprune", "PruneFailed")
    message = condition(obj, "Ready")["message"]  # type: ignore[index]
    assert message.startswith(f"prune failed: ConfigMap/{ns}/b: ")
    assert "forbidden" in message
    assert "403" not in message and "delete failed" not in message
    assert obj["status"]["lastAppliedRevision"] == v1
    assert obj["status"]["lastAttemptedRevision"] == f"main@sha1:{repo.head}"
    assert not await absent(d, "b")
    assert not await absent(d, "c")
    # b is still to be pruned, and c (applied by v2) is ours to prune later.
    assert inventory_ids(obj) == [f"{ns}_{n}__ConfigMap" for n in ("a", "b", "c")]

    # Once the tenant may delete, the retry prunes b.
    await d.kube.merge_patch(
        ROLE,
        "tenant",
        {"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]},
        namespace=ns,
    )
    done = await d.observe.wait_ready(KUSTOMIZATION, "noprune")
    assert await absent(d, "b")
    assert inventory_ids(done) == [f"{ns}_{n}__ConfigMap" for n in ("a", "c")]


def inventory_ids(obj: dict[str, Any]) -> list[str]:
    return [e["id"] for e in obj["status"]["inventory"]["entries"]]


async def test_a_dependency_that_is_not_ready_is_named(delivery: Delivery) -> None:
    d = delivery
    _, message = await failing(
        d,
        "waits",
        {"ok.yaml": config_map("ok", d.namespace)},
        "DependencyNotReady",
        dependsOn=[{"name": "ghost"}],
    )
    # The fixture runs the controller with --requeue-dependency 1s.
    assert message == f"dependency '{d.namespace}/ghost' not found, retrying in 1s"
    assert await absent(d, "ok")


async def test_a_dependency_cycle_stalls(delivery: Delivery) -> None:
    d = delivery
    repo = d.repo("cycle")
    repo.commit(
        "c",
        files={"a/x.yaml": config_map("x", d.namespace), "b/y.yaml": config_map("y", d.namespace)},
    )
    repo.push()
    await d.git_repository("cycle")
    await d.kustomization("a", source="cycle", path="./a", dependsOn=[{"name": "b"}])
    await d.kustomization("b", source="cycle", path="./b", dependsOn=[{"name": "a"}])
    obj = await d.observe.wait(
        KUSTOMIZATION,
        "a",
        lambda o: (condition(o, "Stalled") or {}).get("status") == "True",
        what="Stalled",
    )
    assert (
        f"dependency cycle detected: {d.namespace}/a -> {d.namespace}/b -> {d.namespace}/a"
        in condition(obj, "Stalled")["message"]
    )  # type: ignore[index]
    assert await absent(d, "x")


async def test_a_health_check_timeout_names_the_unhealthy_object(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    from .conftest import deployment

    obj, message = await failing(
        d,
        "unhealthy",
        {"web.yaml": deployment("web", ns)},
        "HealthCheckFailed",
        healthChecks=[
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": ns}
        ],
        timeout="2s",
    )
    assert f"Deployment/{ns}/web" in message
    assert "timed out" in message
    healthy = condition(obj, "Healthy")
    assert healthy is not None and healthy["status"] == "False"
    assert healthy["reason"] == "HealthCheckFailed"
    # Health comes after the apply: the Deployment is there, just not available.
    await d.kube.get(DEPLOYMENT, "web", ns)


async def test_a_tampered_artifact_is_refused(delivery: Delivery) -> None:
    d = delivery
    repo = d.repo("tamper")
    repo.commit("c", files={"ok.yaml": config_map("ok", d.namespace)})
    repo.push()
    await d.git_repository("tamper")
    source = await d.observe.wait_ready(GITREPO, "tamper")
    storage = Path(d.source.options.storage_path)
    artifact = storage / source["status"]["artifact"]["path"]
    artifact.write_bytes(artifact.read_bytes() + b"tampered")
    await d.kustomization("tamper", source="tamper")
    obj = await d.observe.wait_reason(KUSTOMIZATION, "tamper", "ArtifactFailed")
    assert "digest mismatch" in condition(obj, "Ready")["message"]  # type: ignore[index]
    assert await absent(d, "ok")


V9 = "apiVersion: v9\nkind: ConfigMap\nmetadata:\n  name: future\n"


@pytest.mark.parametrize(
    "delivery", [Flags(kustomize=("--requeue-dependency", "30s"))], indirect=True
)
@pytest.mark.parametrize(
    ("spec", "retry"),
    [
        pytest.param({"interval": "10m", "retryInterval": "2m"}, 120, id="retryInterval"),
        pytest.param({"interval": "10m"}, 600, id="interval-when-unset"),
    ],
)
async def test_a_failure_is_retried_after_the_retry_interval(
    delivery: Delivery, spec: dict[str, str], retry: float
) -> None:
    d = delivery
    name = "retry"
    # Waiting for a source that does not exist yet schedules a look in 30s...
    await d.kustomization(name, source=name, targetNamespace=d.namespace, **spec)
    await d.observe.wait_reason(KUSTOMIZATION, name, "ArtifactFailed")
    # ...then the source arrives, with a revision the API refuses.
    repo = d.repo(name)
    repo.commit("c", files={"future.yaml": V9})
    repo.push()
    await d.git_repository(name)
    obj = await d.observe.wait_reason(KUSTOMIZATION, name, "ReconciliationFailed")
    assert "v9" in condition(obj, "Ready")["message"]  # type: ignore[index]
    # Reconciling says when, instead of repeating Ready's message.
    when = {120: "2m0s", 600: "10m0s"}[int(retry)]
    reconciling = condition(obj, "Reconciling") or {}
    assert reconciling.get("message") == f"reconciliation failed, retrying in {when}"

    # The next attempt is due after the retry interval by the queue's own clock:
    # not at the stale 30s dependency timer, not at a sub-second backoff.
    controller = d.controller()
    key = f"{d.namespace}/{name}"
    deadline = time.monotonic() + 5
    due = controller.queue.due_in(key)
    while not (due is not None and retry - 10 < due <= retry) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        due = controller.queue.due_in(key)
    assert due is not None and retry - 10 < due <= retry, due
    assert controller.last_outcome[key].requeue_after == retry


async def test_a_refused_set_is_described_once_per_object_without_codes(
    delivery: Delivery,
) -> None:
    d = delivery
    ns = d.namespace
    bad = (
        f"apiVersion: v1\nkind: Service\nmetadata:\n  name: bad\n  namespace: {ns}\n"
        "spec:\n  ports:\n  - port: 70000\n"
    )
    future = f"apiVersion: v9\nkind: ConfigMap\nmetadata:\n  name: future\n  namespace: {ns}\n"
    _, message = await failing(
        d, "described", {"bad.yaml": bad, "future.yaml": future}, "ReconciliationFailed"
    )
    # Every refused object once, in the API's words, with what to do; no status
    # codes, no second "dry-run failed", no CRD hint for a built-in kind.
    assert message == (
        f"dry-run failed: ConfigMap/{ns}/future: the API server does not serve ConfigMap "
        "in 'v9' (use a version it serves: v1)\n"
        f'Service/{ns}/bad: Service "bad" is invalid: [spec.ports[0].port: Invalid value: '
        "70000: must be between 1 and 65535, inclusive, spec.ports[0].targetPort: Invalid "
        "value: 70000: must be between 1 and 65535, inclusive]; fix the object in its source"
    )
