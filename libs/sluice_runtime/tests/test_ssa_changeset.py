"""Identity and change sets: one ObjectRef from plan to inventory, prune and health."""

from __future__ import annotations

import pytest

from sluice_api.kustomize import ResourceInventory
from sluice_api.meta import ObjectId
from sluice_runtime.kube.health import Health
from sluice_runtime.kube.resources import CONFIG_MAP, NAMESPACE, ObjectRef, ResourceType
from sluice_runtime.ssa.changeset import Action, ChangeSet, ChangeSetEntry

DEPLOYMENT = ResourceType("apps", "v1", "deployments", "Deployment")


@pytest.mark.parametrize(
    ("oid", "inventory_id", "display"),
    [
        pytest.param(
            ObjectId("", "Service", "default", "podinfo"),
            "default_podinfo__Service",
            "Service/default/podinfo",
            id="core",
        ),
        pytest.param(
            ObjectId("apps", "Deployment", "apps", "web"),
            "apps_web_apps_Deployment",
            "Deployment/apps/web",
            id="group",
        ),
        pytest.param(
            ObjectId("", "Namespace", "", "apps"),
            "_apps__Namespace",
            "Namespace/apps",
            id="cluster-scoped",
        ),
        pytest.param(
            ObjectId("apiextensions.k8s.io", "CustomResourceDefinition", "", "widgets.example.com"),
            "_widgets.example.com_apiextensions.k8s.io_CustomResourceDefinition",
            "CustomResourceDefinition/widgets.example.com",
            id="cluster-scoped-group",
        ),
    ],
)
def test_object_ids(oid: ObjectId, inventory_id: str, display: str) -> None:
    assert oid.inventory_id == inventory_id
    assert oid.display == display
    assert ObjectId.from_inventory_id(inventory_id) == oid


@pytest.mark.parametrize(
    ("rt", "name", "namespace", "oid", "request_namespace"),
    [
        pytest.param(
            DEPLOYMENT, "web", "a", ObjectId("apps", "Deployment", "a", "web"), "a", id="namespaced"
        ),
        pytest.param(
            NAMESPACE, "a", "ignored", ObjectId("", "Namespace", "", "a"), None, id="cluster-scoped"
        ),
        pytest.param(NAMESPACE, "a", None, ObjectId("", "Namespace", "", "a"), None, id="none"),
    ],
)
def test_a_ref_drops_the_namespace_of_cluster_scoped_objects(
    rt: ResourceType, name: str, namespace: str | None, oid: ObjectId, request_namespace: str | None
) -> None:
    ref = ObjectRef.to(rt, name, namespace)
    assert (ref.id, ref.namespace, ref.version) == (oid, request_namespace, "v1")
    assert ref.display == oid.display


def entry(
    rt: ResourceType, namespace: str, name: str, action: Action, **kw: object
) -> ChangeSetEntry:
    return ChangeSetEntry(ObjectRef.to(rt, name, namespace), action, **kw)  # type: ignore[arg-type]


ROLLING, ACTIVE = Health("InProgress", "rolling"), Health("Current", "active")
CHANGESET = ChangeSet(
    [
        entry(DEPLOYMENT, "a", "web", Action.CREATED, observed=ROLLING),
        entry(NAMESPACE, "", "a", Action.UNCHANGED, observed=ACTIVE),
        entry(CONFIG_MAP, "a", "c", Action.SKIPPED),
        entry(CONFIG_MAP, "a", "gone", Action.DELETED),
    ]
)


def test_health_reads_what_was_applied_with_the_resource_it_was_applied_through() -> None:
    refs = CHANGESET.health_refs()
    assert refs == [ObjectRef.to(DEPLOYMENT, "web", "a"), ObjectRef.to(NAMESPACE, "a")]
    # Matched by identity; what the apply did not show is read.
    asked = [*refs, ObjectRef.to(CONFIG_MAP, "c", "a"), ObjectRef.to(DEPLOYMENT, "web", "b")]
    assert CHANGESET.observed(asked) == {refs[0]: ROLLING, refs[1]: ACTIVE}


def test_the_inventory_lists_every_entry_once_sorted_by_id() -> None:
    inventory = CHANGESET.to_inventory()
    assert [(e.id, e.version) for e in inventory.entries] == [
        ("_a__Namespace", "v1"),
        ("a_c__ConfigMap", "v1"),
        ("a_gone__ConfigMap", "v1"),
        ("a_web_apps_Deployment", "v1"),
    ]
    assert inventory.ids() == CHANGESET.ids()


@pytest.mark.parametrize(
    ("old", "new", "stale"),
    [
        pytest.param(["a_x__ConfigMap"], ["a_x__ConfigMap"], set(), id="same"),
        pytest.param(
            ["a_x__ConfigMap", "_a__Namespace"], ["a_x__ConfigMap"], {"_a__Namespace"}, id="gone"
        ),
        pytest.param([], ["a_x__ConfigMap"], set(), id="first"),
        # An object that moved group is a different object: the old one is pruned.
        pytest.param(
            ["a_x_apps_Deployment"],
            ["a_x_extensions_Deployment"],
            {"a_x_apps_Deployment"},
            id="group",
        ),
    ],
)
def test_prune_is_a_set_difference_of_inventory_ids(
    old: list[str], new: list[str], stale: set[str]
) -> None:
    def inventory(ids: list[str]) -> ResourceInventory:
        return ResourceInventory.of((ObjectId.from_inventory_id(i), "v1") for i in ids)

    assert inventory(old).ids() - inventory(new).ids() == {
        ObjectId.from_inventory_id(i) for i in stale
    }


def test_an_inventory_keeps_one_entry_per_id_the_last_version_winning() -> None:
    web = ObjectId("apps", "Deployment", "a", "web")
    inventory = ResourceInventory.of(
        [(web, "v1beta1"), (ObjectId("", "Namespace", "", "a"), "v1"), (web, "v1")]
    )
    assert inventory.items() == [(ObjectId("", "Namespace", "", "a"), "v1"), (web, "v1")]


def test_summaries_list_changes_in_kind_order() -> None:
    ordered = ChangeSet.sorted(CHANGESET.entries)
    assert (
        ordered.summary(only_changes=True) == "ConfigMap/a/gone deleted\nDeployment/a/web created"
    )
    assert ordered.summary().splitlines()[0] == "Namespace/a unchanged"
    assert CHANGESET.changed and not ChangeSet(CHANGESET.with_action(Action.SKIPPED)).changed
