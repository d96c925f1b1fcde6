"""The informer store's reference index: "who references X" without a scan."""

from __future__ import annotations

import pytest

from sluice_api.meta import JSON
from sluice_runtime import dependencies, gatekeeping
from sluice_runtime.informing.watching import Index, Store


def obj(name: str, namespace: str = "apps", **spec: object) -> JSON:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


@pytest.mark.parametrize(
    ("index", "source", "references"),
    [
        pytest.param(
            gatekeeping.GATE_REFS,
            obj("a", gates=[{"name": "freeze"}, {"name": "window"}]),
            {"apps/freeze", "apps/window"},
            id="gates-in-own-namespace",
        ),
        pytest.param(gatekeeping.GATE_REFS, obj("a", gates=["junk"]), set(), id="gates-malformed"),
        pytest.param(
            dependencies.DEPENDS_ON,
            obj("a", dependsOn=[{"name": "base"}, {"name": "crds", "namespace": "infra"}]),
            {"apps/base", "infra/crds"},
            id="depends-on-defaults-to-own-namespace",
        ),
        pytest.param(
            dependencies.SOURCE_REF,
            obj("a", sourceRef={"kind": "GitRepository", "name": "repo"}),
            {"GitRepository/apps/repo"},
            id="source-ref-own-namespace",
        ),
        pytest.param(
            dependencies.SOURCE_REF,
            obj("a", sourceRef={"kind": "OCIRepository", "name": "r", "namespace": "flux-system"}),
            {"OCIRepository/flux-system/r"},
            id="source-ref-other-namespace",
        ),
        pytest.param(dependencies.SOURCE_REF, obj("a"), set(), id="no-source-ref"),
        pytest.param(
            dependencies.DEPENDS_ON, obj("a", dependsOn=[{}]), set(), id="malformed-is-no-reference"
        ),
    ],
)
def test_index_references(index: Index, source: JSON, references: set[str]) -> None:
    store = Store.of([source])
    found = {value for value in references if store.referencing(index, value) == ["apps/a"]}
    assert found == references
    assert store.referencing(index, "apps/nothing") == []


def test_the_index_follows_updates_and_deletions() -> None:
    store = Store.of([obj("a", gates=[{"name": "g"}])])
    assert store.referencing(gatekeeping.GATE_REFS, "apps/g") == ["apps/a"]
    store._put("apps/b", obj("b", gates=[{"name": "g"}]))
    assert store.referencing(gatekeeping.GATE_REFS, "apps/g") == ["apps/a", "apps/b"]
    store._put("apps/a", obj("a", gates=[{"name": "h"}]))  # a now waits on another gate
    assert store.referencing(gatekeeping.GATE_REFS, "apps/g") == ["apps/b"]
    assert store.referencing(gatekeeping.GATE_REFS, "apps/h") == ["apps/a"]
    store._pop("apps/b")
    assert store.referencing(gatekeeping.GATE_REFS, "apps/g") == []
    assert store.referencing(gatekeeping.GATE_REFS, "apps/h") == ["apps/a"]


def test_an_index_is_not_recomputed_per_query() -> None:
    calls: list[str] = []

    def refs(o: JSON) -> list[str]:
        calls.append(o["metadata"]["name"])
        return [o["spec"]["ref"]]

    index = Index("spec.ref", refs)
    store = Store.of([obj(f"o{i}", ref=f"apps/t{i % 3}") for i in range(30)])
    assert len(store.referencing(index, "apps/t0")) == 10
    assert len(calls) == 30  # built once, on the first query
    for i in range(3):
        store.referencing(index, f"apps/t{i}")
    store._put("apps/o0", obj("o0", ref="apps/t1"))
    assert len(calls) == 32  # the old and the new version of the one object changed
    assert len(store.referencing(index, "apps/t1")) == 11
