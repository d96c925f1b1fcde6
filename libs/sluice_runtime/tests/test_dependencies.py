"""dependsOn rules over cached objects."""

from __future__ import annotations

from typing import Any

import pytest

from sluice_runtime.dependencies import (
    DependencyCycle,
    DependencyNotReady,
    check,
    dependents,
    find_cycle,
)
from sluice_runtime.informing.watching import Store


def ks(
    name: str,
    *,
    deps: tuple[str, ...] = (),
    ready: str | None = "True",
    generation: int = 1,
    observed: int = 1,
    applied: str | None = "main@sha1:1",
    source: str = "repo",
    namespace: str = "apps",
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace, "generation": generation},
        "spec": {
            "sourceRef": {"kind": "GitRepository", "name": source},
            "dependsOn": [
                {"name": d.split("/")[-1], **({"namespace": d.split("/")[0]} if "/" in d else {})}
                for d in deps
            ],
        },
        "status": {"observedGeneration": observed, "lastAppliedRevision": applied},
    }
    if ready is not None:
        obj["status"]["conditions"] = [{"type": "Ready", "status": ready}]
    return obj


def lookup_of(*objs: dict[str, Any]) -> Any:
    table = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in objs}
    return table.get


@pytest.mark.parametrize(
    ("dep", "revision", "message"),
    [
        pytest.param(None, "main@sha1:1", "dependency 'apps/base' not found", id="missing"),
        pytest.param(
            ks("base", ready="False"),
            "main@sha1:1",
            "dependency 'apps/base' is not ready",
            id="not-ready",
        ),
        pytest.param(
            ks("base", ready=None),
            "main@sha1:1",
            "dependency 'apps/base' is not ready",
            id="never-reconciled",
        ),
        pytest.param(
            ks("base", generation=2, observed=1),
            "main@sha1:1",
            "dependency 'apps/base' is not ready",
            id="stale-generation",
        ),
        pytest.param(
            ks("base", applied="main@sha1:0"),
            "main@sha1:1",
            "has not applied revision 'main@sha1:1' yet",
            id="same-source-old-revision",
        ),
    ],
)
def test_not_ready_names_the_dependency(
    dep: dict[str, Any] | None, revision: str, message: str
) -> None:
    app = ks("app", deps=("base",))
    objs = [app] + ([dep] if dep else [])
    with pytest.raises(DependencyNotReady, match=message):
        check(app, lookup_of(*objs), source_revision=revision)


def test_ready_dependencies_pass() -> None:
    app = ks("app", deps=("base", "infra/crds"))
    other_source = ks("crds", namespace="infra", source="other", applied="v1@sha1:9")
    check(app, lookup_of(app, ks("base"), other_source), source_revision="main@sha1:1")


def test_a_cycle_is_reported_with_its_path() -> None:
    a, b, c = ks("a", deps=("b",)), ks("b", deps=("c",)), ks("c", deps=("a",))
    with pytest.raises(DependencyCycle, match="apps/a -> apps/b -> apps/c -> apps/a"):
        check(a, lookup_of(a, b, c), source_revision=None)


def test_a_cycle_elsewhere_in_the_graph_is_not_ours() -> None:
    a, b, c = ks("a", deps=("b",)), ks("b", deps=("c",)), ks("c", deps=("b",))
    assert find_cycle("apps/a", lookup_of(a, b, c)) is None


def test_self_dependency_is_a_cycle() -> None:
    a = ks("a", deps=("a",))
    assert find_cycle("apps/a", lookup_of(a)) == ["apps/a", "apps/a"]


def test_dependents_of_a_changed_kustomization() -> None:
    objs = [ks("app", deps=("base",)), ks("web", deps=("base", "app")), ks("base")]
    store = Store.of(objs)
    assert dependents("apps/base", store) == ["apps/app", "apps/web"]
    assert dependents("apps/app", store) == ["apps/web"]
