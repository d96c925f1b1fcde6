"""healthCheckExprs: CEL expressions decide the health of the kinds they name."""

from __future__ import annotations

from sluice_envtest.harness import condition

from .conftest import CONFIG_MAP, KUSTOMIZATION, Delivery, config_map

# A ConfigMap is always Current to kstatus: only the expressions can hold it.
PHASE_CHECK = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "current": "data.phase == 'ready'",
    "failed": "data.phase == 'broken'",
}


async def test_expressions_hold_ready_until_current(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    repo = d.repo("app")
    repo.commit("v1", files={"cm.yaml": config_map("gauge", ns, phase="pending")})
    repo.push()
    await d.git_repository("app")
    await d.kustomization(
        "app", source="app", wait=True, timeout="1m", healthCheckExprs=[PHASE_CHECK]
    )
    waiting = await d.observe.wait(
        KUSTOMIZATION,
        "app",
        lambda o: (
            "Running health checks" in ((condition(o, "Reconciling") or {}).get("message") or "")
        ),
    )
    assert (condition(waiting, "Ready") or {}).get("status") != "True"
    # Another manager moves the object on; the running health wait sees it.
    await d.kube.merge_patch(CONFIG_MAP, "gauge", {"data": {"phase": "ready"}}, namespace=ns)
    ready = await d.observe.wait_ready(KUSTOMIZATION, "app")
    assert (condition(ready, "Healthy") or {}).get("status") == "True"


async def test_failed_expression_fails_the_health_check(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    repo = d.repo("app")
    repo.commit("v1", files={"cm.yaml": config_map("gauge", ns, phase="broken")})
    repo.push()
    await d.git_repository("app")
    await d.kustomization(
        "app", source="app", wait=True, timeout="1m", healthCheckExprs=[PHASE_CHECK]
    )
    # Failed ends the wait at once, well before the minute's timeout.
    obj = await d.observe.wait_reason(KUSTOMIZATION, "app", "HealthCheckFailed", timeout=20)
    message = condition(obj, "Ready")["message"]  # type: ignore[index]
    assert message.startswith("health check failed: ")
    assert f"ConfigMap/{ns}/gauge: Failed" in message
    assert "data.phase == 'broken'" in message


async def test_invalid_expression_stalls_naming_it(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    repo = d.repo("app")
    repo.commit("v1", files={"cm.yaml": config_map("gauge", ns, phase="ready")})
    repo.push()
    await d.git_repository("app")
    await d.kustomization(
        "app",
        source="app",
        wait=True,
        healthCheckExprs=[{**PHASE_CHECK, "failed": "data.phase =="}],
    )
    stalled = await d.observe.wait(
        KUSTOMIZATION, "app", lambda o: (condition(o, "Stalled") or {}).get("status") == "True"
    )
    message = condition(stalled, "Stalled")["message"]  # type: ignore[index]
    assert "healthCheckExprs v1/ConfigMap: invalid failed expression 'data.phase =='" in message
    assert (condition(stalled, "Ready") or {}).get("status") == "False"
