"""One object of a set to write is applied without a dry-run (`Applier._apply_alone`).

Against the real API server, with the manager's memory of what it applied:
the requests are counted by verb (what each change costs), and the cluster
is read afterwards (what it holds), never timed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from sluice_runtime.kube.attributing import Request
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import CONFIG_MAP
from sluice_runtime.ssa.changeset import ChangeSet
from sluice_runtime.ssa.errors import ApplyFailed
from sluice_runtime.ssa.manager import ResourceManager
from sluice_runtime.ssa.remembering import AppliedObjects

from .test_ssa_manager import SERVICE, configmap, make_manager, service

T = TypeVar("T")


class Verbs:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def requested(self, request: Request) -> None:
        self.sent.append(request.verb)


async def counted(kube: KubeClient, work: Callable[[], Awaitable[T]]) -> tuple[T, list[str]]:
    verbs = Verbs()
    stop = kube.observe(verbs)
    try:
        return await work(), sorted(verbs.sent)
    finally:
        stop()


def actions(changeset: ChangeSet) -> dict[str, str]:
    return {e.subject.split("/")[-1]: str(e.action) for e in changeset.entries}


def remembering(kube: KubeClient, namespace: str) -> ResourceManager:
    return make_manager(kube, namespace, memory=AppliedObjects())


def three(namespace: str, a: str = "1", b: str = "1") -> list[JSON]:
    return [
        configmap("a", namespace, {"v": a}),
        configmap("b", namespace, {"v": b}),
        configmap("c", namespace, {"v": "1"}),
    ]


@pytest.mark.parametrize(
    ("a", "b", "touched_by_another", "verbs", "expected"),
    [
        pytest.param(
            "2", "1", False, ["apply", "list"],
            {"a": "configured", "b": "unchanged", "c": "unchanged"},
            id="one-changed-applied-alone",
        ),
        pytest.param(
            "2", "2", False, ["apply", "apply", "dry-run", "dry-run", "get", "get", "list"],
            {"a": "configured", "b": "configured", "c": "unchanged"},
            id="two-changed-dry-run-first",
        ),
        pytest.param(
            "2", "1", True, ["apply", "dry-run", "get", "list"],
            {"a": "configured", "b": "unchanged", "c": "unchanged"},
            id="one-changed-but-written-since-read-and-dry-run",
        ),
    ],
)  # fmt: skip
async def test_a_set_with_one_object_to_write_costs_its_apply(
    kube: KubeClient,
    namespace: str,
    a: str,
    b: str,
    touched_by_another: bool,
    verbs: list[str],
    expected: dict[str, str],
) -> None:
    manager = remembering(kube, namespace)
    await manager.apply_all_staged(three(namespace))
    if touched_by_another:
        # Its live form is no longer the last apply's answer: the long way.
        await kube.merge_patch(
            CONFIG_MAP, "a", {"metadata": {"labels": {"team": "x"}}}, namespace=namespace
        )
    changeset, sent = await counted(
        kube, lambda: manager.apply_all_staged(three(namespace, a=a, b=b))
    )
    assert sent == verbs
    assert actions(changeset) == expected
    for name, value in (("a", a), ("b", b), ("c", "1")):
        assert (await kube.get(CONFIG_MAP, name, namespace))["data"] == {"v": value}


async def test_a_lone_change_the_api_refuses_is_named_and_nothing_is_written(
    kube: KubeClient, namespace: str
) -> None:
    manager = remembering(kube, namespace)
    await manager.apply_all_staged([configmap("a", namespace), service("s", namespace, 80)])
    before = await kube.get(SERVICE, "s", namespace)

    async def refused() -> None:
        with pytest.raises(ApplyFailed) as caught:
            await manager.apply_all_staged(
                [configmap("a", namespace), service("s", namespace, 70000)]
            )
        assert caught.value.subject == f"Service/{namespace}/s"
        assert caught.value.dry_run, "reported as the dry-run's refusal, as any refused set"
        assert "70000" in caught.value.message

    _, sent = await counted(kube, refused)
    # The apply was refused, so the long way ran as for any refused object (a
    # dry-run, then a read and a dry-run to tell an immutable change): one
    # apply and one LIST (the Service's kind) more than a set that is dry-run.
    assert sent == ["apply", "dry-run", "dry-run", "get", "list", "list"]
    after = await kube.get(SERVICE, "s", namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_a_lone_immutable_change_is_re_created_when_forced(
    kube: KubeClient, namespace: str
) -> None:
    manager = remembering(kube, namespace)
    frozen = {**configmap("c", namespace, {"a": "1"}), "immutable": True}
    await manager.apply_all_staged([frozen, configmap("other", namespace)], force=True)
    uid = (await kube.get(CONFIG_MAP, "c", namespace))["metadata"]["uid"]
    changed = {**configmap("c", namespace, {"a": "2"}), "immutable": True}

    forced = await manager.apply_all_staged([changed, configmap("other", namespace)], force=True)

    assert actions(forced) == {"c": "created", "other": "unchanged"}
    assert forced.entries[0].reason == "recreated: immutable field changed"
    live = await kube.get(CONFIG_MAP, "c", namespace)
    assert live["data"] == {"a": "2"} and live["metadata"]["uid"] != uid


async def test_a_lone_change_to_an_object_that_keeps_another_managers_fields_is_dry_run(
    kube: KubeClient, namespace: str
) -> None:
    """Only an object whose last answer asked for nothing but an apply goes alone
    (`Remembered.plain`); one merged with kubectl's fields (`ssa: Merge`)
    takes the long way, and kubectl's field stays."""
    manager = remembering(kube, namespace)
    merge = {"kustomize.toolkit.fluxcd.io/ssa": "Merge"}
    await kube.request(
        "POST",
        CONFIG_MAP.path(namespace=namespace),
        query=[("fieldManager", "kubectl-edit")],
        body=configmap("a", namespace, {"v": "0", "extra": "kubectl"}),
    )
    await manager.apply_all_staged([configmap("a", namespace, {"v": "1"}, annotations=merge)])
    changeset, sent = await counted(
        kube,
        lambda: manager.apply_all_staged(
            [configmap("a", namespace, {"v": "2"}, annotations=merge)]
        ),
    )
    assert "dry-run" in sent
    assert actions(changeset) == {"a": "configured"}
    live = await kube.get(CONFIG_MAP, "a", namespace)
    assert live["data"] == {"v": "2", "extra": "kubectl"}
