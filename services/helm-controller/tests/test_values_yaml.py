"""`valuesFrom` YAML is the tenant's: its aliases may not expand past the values limits."""

from __future__ import annotations

from sluice_envtest.harness import condition, make_config_map

from .conftest import HELMRELEASE, HelmDelivery


async def test_an_alias_bomb_in_values_from_is_refused_and_a_neighbour_installs(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    ns = d.namespace
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    # Issue 32's 256-byte ConfigMap: nine levels of ten aliases, 10^9 strings once merged.
    levels = "".join(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 10) + "]\n" for i in range(1, 10))
    await make_config_map(d.kube, ns, "laughs", {"values.yaml": "l0: &l0 lol\n" + levels})
    await make_config_map(d.kube, ns, "plain", {"values.yaml": "greeting: &g hi\nagain: *g\n"})
    await d.helm_release("bomb", valuesFrom=[{"kind": "ConfigMap", "name": "laughs"}])
    await d.helm_release("web", valuesFrom=[{"kind": "ConfigMap", "name": "plain"}])
    obj = await d.observe.wait_reason(HELMRELEASE, "bomb", "InitFailed", timeout=60)
    message = condition(obj, "Ready")["message"]  # type: ignore[index]
    assert message.startswith(f"ConfigMap '{ns}/laughs' key 'values.yaml' is not valid YAML: ")
    assert "YAML expands to more than 500000 nodes (the node limit" in message
    # Aliases within the limits are values as helm reads them.
    await d.observe.wait_ready(HELMRELEASE, "web", timeout=60)
    assert d.helm("get", "values", "web") == {"greeting": "hi", "again": "hi"}
