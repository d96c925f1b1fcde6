"""Which Applications a child's or a template's change wakes: pure, table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from application_controller.applications import child_watchers, template_watchers
from sluice_runtime.informing.watching import Change, Store

OWNER = {"apiVersion": "gitops.kubesphere.io/v1alpha1", "kind": "Application", "name": "shop"}


def child(status: dict[str, Any] | None = None, owners: list[dict[str, Any]] | None = None) -> Any:
    return {
        "metadata": {"name": "shop-web", "namespace": "team", "ownerReferences": owners or [OWNER]},
        "status": status or {},
    }


READY = {"conditions": [{"type": "Ready", "status": "True"}]}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(Change("added", "team/shop-web", None, child()), ["team/shop"], id="created"),
        pytest.param(Change("updated", "team/shop-web", child(), child(READY)), ["team/shop"], id="status-changed"),
        pytest.param(Change("updated", "team/shop-web", child(READY), child(READY)), [], id="status-unchanged"),
        pytest.param(Change("deleted", "team/shop-web", child(READY), None), ["team/shop"], id="deleted"),
        pytest.param(Change("added", "team/x", None, child(owners=[{**OWNER, "apiVersion": "argoproj.io/v1alpha1"}])), [], id="another-groups-application"),
        pytest.param(Change("added", "team/x", None, child(owners=[{"apiVersion": "v1", "kind": "ConfigMap", "name": "c"}])), [], id="not-an-application"),
    ],
)  # fmt: skip
def test_a_child_wakes_its_owner_when_its_status_changes(
    change: Change, expected: list[str]
) -> None:
    assert child_watchers()(change) == expected


def test_a_template_wakes_the_applications_naming_it() -> None:
    apps = Store()

    def app(name: str, template: str | None, namespace: str = "team") -> None:
        helm = {"template": template} if template else {"chart": {"chart": "c"}}
        apps._put(
            f"{namespace}/{name}",
            {
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"fluxApp": {"spec": {"config": {"helmRelease": helm}}}},
            },
        )

    app("uses-it", "saved")
    app("inline", None)
    app("other-namespace", "saved", namespace="elsewhere")
    chart = {"metadata": {"name": "saved", "namespace": "team"}, "spec": {"chart": "c"}}
    mapper = template_watchers(apps)
    assert mapper(Change("added", "team/saved", None, chart)) == ["team/uses-it"]
    changed = {**chart, "spec": {"chart": "d"}}
    assert mapper(Change("updated", "team/saved", chart, changed)) == ["team/uses-it"]
    status_only = {**chart, "status": {"artifact": {}}}
    assert mapper(Change("updated", "team/saved", chart, status_only)) == []
