"""ResourceSet behaviour against the real API server: inputs (in-line, Static and
ExternalService providers, Flatten and Permute), templates and their errors,
commonMetadata, dependsOn with readyExpr, copyFrom, impersonation, and what
garbage collection keeps."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from aiohttp import web

from sluice_envtest.harness import condition, make_secret, make_tenant
from sluice_runtime.kube.resources import SECRET, ResourceType

from .conftest import CONFIG_MAP, KUSTOMIZATION, RSET, RSIP, Alone


def config_map(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def stalled(obj: dict[str, Any]) -> str | None:
    cond = condition(obj, "Stalled")
    return cond["message"] if cond and cond["status"] == "True" else None


def unhealthy_deployment(name: str) -> dict[str, Any]:
    """A Deployment that never becomes healthy here: no kubelet runs its pods."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "example.invalid/none"}]},
            },
        },
    }


async def wait_stalled(a: Alone, rt: ResourceType, name: str) -> str:
    obj = await a.observe.wait(rt, name, lambda o: stalled(o) is not None, what="Stalled")
    message = stalled(obj)
    assert message is not None
    return message


async def test_inline_and_static_inputs_flatten_through_both_kinds_of_template(
    alone: Alone,
) -> None:
    a = alone
    await a.create(RSIP, "prod", {"type": "Static", "defaultValues": {"env": "prod"}})
    provider = await a.observe.wait_ready(RSIP, "prod")
    [static] = provider["status"]["exportedInputs"]
    assert static["env"] == "prod" and static["id"].isdigit()
    await a.create(
        RSET,
        "apps",
        {
            "commonMetadata": {"labels": {"team": "core"}, "annotations": {"owner": "ops"}},
            "inputs": [{"id": "dev", "env": "dev"}],
            "inputsFrom": [{"kind": "ResourceSetInputProvider", "name": "prod"}],
            "resources": [config_map("app-<< inputs.env >>", env="<< inputs.env >>")],
            "resourcesTemplate": (
                "<<- $env := inputs.env >>\n"
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra-<< $env >>\n"
                'data:\n  id: "<< inputs.id >>"\n'
                '  provider: "<< inputs.provider.kind >>/<< inputs.provider.name >>/'
                '<< inputs.provider.namespace >>/<< inputs.provider.apiVersion >>"\n'
                '<<- if eq $env "prod" >>\n---\n'
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: prod-only\n"
                "<<- end >>\n"
            ),
        },
    )
    rset = await a.observe.wait_ready(RSET, "apps")
    for env in ("dev", "prod"):
        cm = await a.observe.get(CONFIG_MAP, f"app-{env}")
        assert cm["data"] == {"env": env}
        labels = cm["metadata"]["labels"]
        assert labels["team"] == "core"
        assert labels["resourceset.fluxcd.controlplane.io/name"] == "apps"
        assert labels["resourceset.fluxcd.controlplane.io/namespace"] == a.namespace
        assert cm["metadata"]["annotations"]["owner"] == "ops"
    # Every input set names the object it came from (Flux Operator's built-in `provider`).
    ns, v1 = a.namespace, "fluxcd.controlplane.io/v1"
    assert (await a.observe.get(CONFIG_MAP, "extra-prod"))["data"] == {
        "id": static["id"],
        "provider": f"ResourceSetInputProvider/prod/{ns}/{v1}",
    }
    assert (await a.observe.get(CONFIG_MAP, "extra-dev"))["data"] == {
        "id": "dev",
        "provider": f"ResourceSet/apps/{ns}/{v1}",
    }
    assert await a.exists(CONFIG_MAP, "prod-only")
    status = rset["status"]
    assert len(status["inventory"]["entries"]) == 5
    assert status["lastAppliedRevision"].startswith("sha256:")
    assert status["history"][0]["digest"] == status["lastAppliedRevision"]


@pytest_asyncio.fixture(loop_scope="session")
async def service() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """An ExternalService on loopback; tests set `answers[path]` to what it answers."""
    answers: dict[str, Any] = {}

    async def handle(request: web.Request) -> web.Response:
        return web.json_response(answers.get(request.path, {"inputs": []}))

    app = web.Application()
    app.router.add_get("/{name}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", answers
    finally:
        await runner.cleanup()


async def test_permute_crosses_providers_and_external_service_ids_must_be_unique(
    alone: Alone, service: tuple[str, dict[str, Any]]
) -> None:
    a = alone
    url, answers = service
    answers["/tenants"] = {"inputs": [{"id": "1", "name": "a"}, {"id": "2", "name": "b"}]}
    answers["/clusters"] = {"inputs": [{"id": "1", "name": "x"}, {"id": "2", "name": "y"}]}
    for name in ("tenants", "clusters"):
        await a.create(
            RSIP, name, {"type": "ExternalService", "url": f"{url}/{name}", "insecure": True}
        )
        await a.observe.wait_ready(RSIP, name)
    await a.create(
        RSET,
        "matrix",
        {
            "inputStrategy": {"name": "Permute"},
            "inputsFrom": [
                {"kind": "ResourceSetInputProvider", "name": "tenants"},
                {"kind": "ResourceSetInputProvider", "name": "clusters"},
            ],
            "resources": [config_map("<< inputs.tenants.name >>-<< inputs.clusters.name >>")],
        },
    )
    rset = await a.observe.wait_ready(RSET, "matrix")
    for name in ("a-x", "a-y", "b-x", "b-y"):
        assert await a.exists(CONFIG_MAP, name), name
    assert len(rset["status"]["inventory"]["entries"]) == 4

    # A duplicate id is refused, and the last exported inputs stay.
    before = (await a.observe.get(RSIP, "tenants"))["status"]["exportedInputs"]
    answers["/tenants"] = {"inputs": [{"id": "1", "name": "a"}, {"id": "1", "name": "c"}]}
    await a.observe.poke(RSIP, "tenants", "dup")
    provider = await a.observe.get(RSIP, "tenants")
    assert stalled(provider) == "input id '1' is exported more than once"
    assert provider["status"]["exportedInputs"] == before
    # More sets than the limit are refused too.
    await a.kube.merge_patch(
        RSIP, "tenants", {"spec": {"filter": {"limit": 1}}}, namespace=a.namespace
    )
    answers["/tenants"] = {"inputs": [{"id": "1"}, {"id": "2"}]}
    await a.observe.wait(
        RSIP,
        "tenants",
        lambda o: stalled(o) == "2 input sets exceed the limit of 1 (spec.filter.limit)",
        what="refused over the limit",
    )


async def test_a_template_error_stalls_naming_template_and_input_and_applies_nothing(
    alone: Alone,
) -> None:
    a = alone
    await a.create(
        RSET,
        "broken",
        {
            "inputs": [{"id": "one", "name": "first"}, {"id": "two"}],
            "resources": [config_map("ok-<< inputs.id >>"), config_map("<< inputs.name >>")],
        },
    )
    message = await wait_stalled(a, RSET, "broken")
    assert message.startswith("build failed: resources[1] with input id 'two': ")
    assert 'map has no entry for key "name"' in message
    ready = condition(await a.observe.get(RSET, "broken"), "Ready")
    assert ready is not None and ready["reason"] == "BuildFailed"
    assert not await a.exists(CONFIG_MAP, "ok-one")
    assert not await a.exists(CONFIG_MAP, "first")

    await a.create(RSET, "not-yaml", {"resourcesTemplate": "<< if true >>: [unclosed\n<< end >>"})
    message = await wait_stalled(a, RSET, "not-yaml")
    assert message.startswith("build failed: resourcesTemplate with input id '': the output")


async def test_depends_on_waits_for_a_ready_expression(alone: Alone) -> None:
    a = alone
    await a.create(
        RSET,
        "after-gate",
        {
            "dependsOn": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "gate",
                    "ready": True,
                    "readyExpr": "data.open == 'yes'",
                }
            ],
            "resources": [config_map("behind-gate")],
        },
    )
    obj = await a.observe.wait_reason(RSET, "after-gate", "DependencyNotReady")
    assert condition(obj, "Ready")["message"] == (  # type: ignore[index]
        f"dependency ConfigMap/{a.namespace}/gate not found"
    )
    await a.kube.create(
        CONFIG_MAP, {**config_map("gate", open="no"), "metadata": {"name": "gate"}},
        namespace=a.namespace,
    )  # fmt: skip
    await a.observe.wait(
        RSET,
        "after-gate",
        lambda o: (
            "does not satisfy its readyExpr" in (condition(o, "Ready") or {}).get("message", "")
        ),
    )
    assert not await a.exists(CONFIG_MAP, "behind-gate")
    await a.kube.merge_patch(CONFIG_MAP, "gate", {"data": {"open": "yes"}}, namespace=a.namespace)
    await a.observe.wait_ready(RSET, "after-gate")
    assert await a.exists(CONFIG_MAP, "behind-gate")

    await a.create(
        RSET,
        "bad-expr",
        {"dependsOn": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "gate",
                        "ready": True, "readyExpr": "data.open =="}]},
    )  # fmt: skip
    message = await wait_stalled(a, RSET, "bad-expr")
    assert message.startswith("spec.dependsOn[0].readyExpr 'data.open ==' is invalid")


async def test_copy_from_and_the_tenants_rights(alone: Alone) -> None:
    a = alone
    ns = a.namespace
    await make_tenant(a.kube, ns, ["configmaps"])
    await make_secret(a.kube, ns, "registry-creds", {"token": "t0ps3cret"})
    copy = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "creds-copy",
            "annotations": {"fluxcd.controlplane.io/copyFrom": f"{ns}/registry-creds"},
        },
    }
    # As the controller: the Secret is copied.
    await a.create(RSET, "copier", {"resources": [copy]})
    await a.observe.wait_ready(RSET, "copier")
    copied = await a.observe.get(SECRET, "creds-copy")
    assert json.dumps(copied["data"]) == json.dumps(
        (await a.observe.get(SECRET, "registry-creds"))["data"]
    )
    # As the tenant, which may not read Secrets: refused, naming the source.
    copy["metadata"]["name"] = "tenant-copy"
    await a.create(RSET, "tenant-copier", {"serviceAccountName": "tenant", "resources": [copy]})
    obj = await a.observe.wait_reason(RSET, "tenant-copier", "BuildFailed")
    message = condition(obj, "Ready")["message"]  # type: ignore[index]
    assert f"cannot read Secret {ns}/registry-creds" in message
    assert "t0ps3cret" not in json.dumps(obj)
    # The tenant may apply ConfigMaps but not Secrets: the denial names the object.
    await a.create(
        RSET,
        "tenant-apply",
        {
            "serviceAccountName": "tenant",
            "resources": [
                config_map("allowed"),
                {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "denied"}},
            ],
        },
    )
    obj = await a.observe.wait_reason(RSET, "tenant-apply", "ReconciliationFailed")
    message = condition(obj, "Ready")["message"]  # type: ignore[index]
    assert f"Secret/{ns}/denied" in message and "forbidden" in message.lower()
    assert not await a.exists(SECRET, "denied")


async def test_garbage_collection_keeps_what_is_marked_to_stay(alone: Alone) -> None:
    a = alone
    keep = config_map("keep")
    keep["metadata"]["annotations"] = {"fluxcd.controlplane.io/prune": "disabled"}
    await a.create(RSET, "gc", {"resources": [keep, config_map("go")]})
    await a.observe.wait_ready(RSET, "gc")
    assert await a.exists(CONFIG_MAP, "keep") and await a.exists(CONFIG_MAP, "go")
    await a.kube.merge_patch(RSET, "gc", {"spec": {"resources": [config_map("new")]}},
                             namespace=a.namespace)  # fmt: skip
    await a.observe.wait(
        RSET, "gc", lambda o: len(o["status"]["inventory"]["entries"]) == 1, what="one entry"
    )
    assert await a.exists(CONFIG_MAP, "keep")
    assert not await a.exists(CONFIG_MAP, "go")
    assert await a.exists(CONFIG_MAP, "new")

    # Deleting the ResourceSet deletes what it applied, and only that.
    await a.kube.delete(RSET, "gc", namespace=a.namespace)
    await wait_until(lambda: a.exists(CONFIG_MAP, "new"), False)
    assert await a.exists(CONFIG_MAP, "keep")


async def wait_until(probe: Any, expected: bool, *, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while await probe() != expected:
        assert time.monotonic() < deadline, f"not {expected} within {timeout}s"
        await asyncio.sleep(0.1)


async def test_providers_by_selector_wait_and_the_controlplane_annotations(alone: Alone) -> None:
    a = alone
    for name, team in (("one", "a"), ("two", "a"), ("other", "b")):
        await a.create(RSIP, name, {"type": "Static"}, labels={"team": team})
        await a.observe.wait_ready(RSIP, name)
    await a.create(
        RSET,
        "selected",
        {
            "inputsFrom": [
                {"kind": "ResourceSetInputProvider", "selector": {"matchLabels": {"team": "a"}}}
            ],
            "resources": [config_map("sel-<< inputs.id | slugify >>")],
            "wait": True,
        },
    )
    rset = await a.observe.wait_ready(RSET, "selected")
    assert len(rset["status"]["inventory"]["entries"]) == 2

    # wait: a Deployment no kubelet runs never becomes healthy within reconcileTimeout.
    deployment = unhealthy_deployment("never")
    await a.create(
        RSET,
        "waits",
        {"resources": [deployment], "wait": True},
        annotations={"fluxcd.controlplane.io/reconcileTimeout": "2s"},
    )
    obj = await a.observe.wait_reason(RSET, "waits", "HealthCheckFailed", timeout=30)
    assert "Deployment/" in condition(obj, "Ready")["message"]  # type: ignore[index]

    # reconcile: disabled leaves the ResourceSet alone.
    await a.create(
        RSET,
        "off",
        {"resources": [config_map("never-applied")]},
        annotations={"fluxcd.controlplane.io/reconcile": "disabled"},
    )
    obj = await a.observe.wait_reason(RSET, "off", "ReconciliationDisabled")
    assert not await a.exists(CONFIG_MAP, "never-applied")

    # force (not built) is refused, naming the object.
    forced = config_map("forced")
    forced["metadata"]["annotations"] = {"fluxcd.controlplane.io/force": "enabled"}
    await a.create(RSET, "force", {"resources": [forced]})
    message = await wait_stalled(a, RSET, "force")
    assert message.startswith("ConfigMap/forced: the fluxcd.controlplane.io/force annotation")


async def test_steps_apply_in_order_each_healthy_before_the_next(alone: Alone) -> None:
    a = alone
    await a.create(
        RSET,
        "staged",
        {
            "inputs": [{"tenant": "team1"}, {"tenant": "team2"}],
            "steps": [
                {"name": "pre", "resources": [config_map("pre-<< inputs.tenant >>")]},
                {
                    "name": "deploy",
                    "resources": [config_map("app-config", source="resources")],
                    "resourcesTemplate": (
                        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-config\n"
                        "data:\n  source: template\n"
                    ),
                },
            ],
        },
    )
    rset = await a.observe.wait_ready(RSET, "staged")
    assert len(rset["status"]["inventory"]["entries"]) == 3
    # Resources take precedence over resourcesTemplate within a step, as in Flux Operator.
    assert (await a.observe.get(CONFIG_MAP, "app-config"))["data"] == {"source": "resources"}

    # A step that never becomes healthy holds the ones after it.
    deployment = unhealthy_deployment("migrate")
    await a.create(
        RSET,
        "held",
        {"steps": [{"name": "migrate", "resources": [deployment]},
                   {"name": "deploy", "resources": [config_map("after-migrate")]}]},
        annotations={"fluxcd.controlplane.io/reconcileTimeout": "2s"},
    )  # fmt: skip
    obj = await a.observe.wait_reason(RSET, "held", "HealthCheckFailed", timeout=30)
    assert condition(obj, "Ready")["message"].startswith("step 'migrate': health check")  # type: ignore[index]
    assert not await a.exists(CONFIG_MAP, "after-migrate")

    # One object generated by two steps is refused.
    await a.create(
        RSET,
        "twice",
        {"steps": [{"name": "a", "resources": [config_map("same")]},
                   {"name": "b", "resources": [config_map("same")]}]},
    )  # fmt: skip
    message = await wait_stalled(a, RSET, "twice")
    assert message == "build failed: ConfigMap/same is generated by steps 'a' and 'b'"


async def test_a_scheduled_provider_waits_for_its_window_unless_asked(alone: Alone) -> None:
    a = alone
    # New Year's midnight, no window: not now (unless the test runs then).
    await a.create(
        RSIP,
        "yearly",
        {"type": "Static", "schedule": [{"cron": "0 0 1 1 *", "timeZone": "UTC"}]},
    )
    obj = await a.observe.wait_ready(RSIP, "yearly")
    assert condition(obj, "Ready")["message"].startswith("Waiting for the next schedule at ")  # type: ignore[index]
    assert obj["status"]["nextSchedule"]["cron"] == "0 0 1 1 *"
    assert obj["status"]["nextSchedule"]["when"].endswith("-01-01T00:00:00Z")
    assert "exportedInputs" not in obj["status"]
    # A manual request (what a Receiver sends) runs it now.
    obj = await a.observe.poke(RSIP, "yearly", "now")
    assert len(obj["status"]["exportedInputs"]) == 1

    await a.create(RSIP, "bad", {"type": "Static", "schedule": [{"cron": "61 * * * *"}]})
    message = await wait_stalled(a, RSIP, "bad")
    assert message.startswith("spec.schedule[0].cron '61 * * * *'")


async def test_flux_kinds_are_deleted_and_awaited_before_native_objects(alone: Alone) -> None:
    """A Kustomization being finalized (pruning what it applied) still finds the
    namespace objects it needs: they go only once it is gone."""
    a = alone
    ks = {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": "app", "finalizers": ["test.sluice.dev/hold"]},
        "spec": {"interval": "1h", "prune": True,
                 "sourceRef": {"kind": "OCIRepository", "name": "app"}},
    }  # fmt: skip
    await a.create(
        RSET,
        "ordered",
        {"resources": [ks, config_map("app-settings")]},
        annotations={"fluxcd.controlplane.io/reconcileTimeout": "3s"},
    )
    await a.observe.wait_ready(RSET, "ordered")
    await a.kube.merge_patch(RSET, "ordered", {"spec": {"resources": []}}, namespace=a.namespace)
    obj = await a.observe.wait_reason(RSET, "ordered", "ReconciliationFailed", timeout=30)
    assert "garbage collection" in condition(obj, "Ready")["message"]  # type: ignore[index]
    held = await a.observe.get(KUSTOMIZATION, "app")
    assert held["metadata"].get("deletionTimestamp")
    assert await a.exists(CONFIG_MAP, "app-settings"), "deleted before the Kustomization was gone"

    await a.kube.merge_patch(
        KUSTOMIZATION, "app", {"metadata": {"finalizers": None}}, namespace=a.namespace
    )
    await wait_until(lambda: a.exists(CONFIG_MAP, "app-settings"), False, timeout=60)
    assert not await a.exists(KUSTOMIZATION, "app")
