"""A tenant's template that asks for too much: bounded, and no stall for other ResourceSets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from sluice_envtest.harness import Observer, condition, running_service
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.kube.client import KubeClient

from .conftest import CONFIG_MAP, RSET, Alone


def config_map(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def stalled(obj: dict[str, Any]) -> str | None:
    cond = condition(obj, "Stalled")
    return cond["message"] if cond and cond["status"] == "True" else None


PATIENT_STEPS = 40_000_000
"""A budget for the ordering test: a plain `range` spends it in about 10 s of CPU
(500,000 steps take about 0.12 s), time enough for a neighbour to be applied."""


@pytest_asyncio.fixture(loop_scope="session")
async def patient(cluster: Cluster, kube: KubeClient, namespace: str) -> AsyncIterator[Alone]:
    """The controller alone, with a step budget that takes seconds to spend."""
    from resourceset_controller import __main__ as rset_main

    async with running_service(
        rset_main,
        kubeconfig=str(cluster.kubeconfig),
        namespace=namespace,
        argv=["--requeue-dependency", "1s", "--template-max-steps", str(PATIENT_STEPS)],
    ) as runtime:
        yield Alone(kube, namespace, Observer(kube, namespace), runtime)


async def test_a_runaway_template_stops_at_its_budget_while_another_resourceset_reconciles(
    patient: Alone,
) -> None:
    a = patient
    # Issue 32's attack: a 200-byte template that loops for as long as it is let.
    await a.create(
        RSET,
        "runaway",
        {"resourcesTemplate": "<< range 1000000000 >><< end >>\n" + "apiVersion: v1\n"},
    )
    await a.create(RSET, "neighbour", {"resources": [config_map("neighbour", k="v")]})
    await a.observe.wait_ready(RSET, "neighbour", timeout=60)
    # The order of events: the neighbour was applied while the runaway still rendered.
    assert stalled(await a.observe.get(RSET, "runaway")) is None
    assert (await a.observe.get(CONFIG_MAP, "neighbour"))["data"] == {"k": "v"}

    obj = await a.observe.wait(
        RSET, "runaway", lambda o: stalled(o) is not None, what="Stalled", timeout=300
    )
    message = stalled(obj)
    assert message is not None
    assert message.startswith("build failed: resourcesTemplate with input id '': template: ")
    assert f"ran more than {PATIENT_STEPS} steps (the step budget)" in message


async def test_the_default_budget_stops_a_runaway_template(alone: Alone) -> None:
    await alone.create(RSET, "runaway", {"resourcesTemplate": "<< range 1000000000 >><< end >>\n"})
    obj = await alone.observe.wait(
        RSET, "runaway", lambda o: stalled(o) is not None, what="Stalled", timeout=60
    )
    assert "ran more than 500000 steps (the step budget)" in (stalled(obj) or "")


async def test_rendered_aliases_and_allocations_are_refused_naming_the_limit(
    alone: Alone,
) -> None:
    a = alone
    laughs = "".join(
        f"    l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]\n" for i in range(1, 10)
    )
    await a.create(
        RSET,
        "laughs",
        {
            "resourcesTemplate": (
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: laughs\n"
                "data:\n  x:\n    l0: &l0 lol\n" + laughs
            )
        },
    )
    await a.create(RSET, "repeat", {"resourcesTemplate": '<< repeat 1000000000 "lol" >>\n'})
    laughed = await a.observe.wait(
        RSET, "laughs", lambda o: stalled(o) is not None, what="Stalled", timeout=60
    )
    assert "the output is not valid YAML: YAML expands to more than 500000 nodes" in (
        stalled(laughed) or ""
    )
    repeated = await a.observe.wait(
        RSET, "repeat", lambda o: stalled(o) is not None, what="Stalled", timeout=60
    )
    assert "error calling repeat: the template made more than 16777216 bytes" in (
        stalled(repeated) or ""
    )
    assert not await a.exists(CONFIG_MAP, "laughs")
