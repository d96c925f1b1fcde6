"""Taking over kubectl's fields for `ssa: Override`."""

from __future__ import annotations

from typing import Any

import pytest

from sluice_runtime.ssa.managed_fields import take_over_managed_fields, take_over_patch

OURS = {
    "manager": "flux",
    "operation": "Apply",
    "apiVersion": "v1",
    "fieldsType": "FieldsV1",
    "fieldsV1": {"f:data": {"f:a": {}}},
}
EDIT = {
    "manager": "kubectl-edit",
    "operation": "Update",
    "apiVersion": "v1",
    "fieldsType": "FieldsV1",
    "fieldsV1": {"f:data": {"f:b": {}}},
}
OTHER = {
    "manager": "hpa",
    "operation": "Update",
    "apiVersion": "v1",
    "fieldsType": "FieldsV1",
    "fieldsV1": {"f:data": {"f:c": {}}},
}
STATUS = {"manager": "kubectl", "operation": "Update", "subresource": "status", "fieldsV1": {}}


def test_take_over_merges_kubectl_fields_into_our_apply_entry() -> None:
    assert take_over_managed_fields([OURS, OTHER], "flux") is None
    merged = take_over_managed_fields([OURS, EDIT, OTHER, STATUS], "flux")
    assert merged == [{**OURS, "fieldsV1": {"f:data": {"f:a": {}, "f:b": {}}}}, OTHER, STATUS]
    renamed = take_over_managed_fields([EDIT], "flux")
    assert renamed == [{**EDIT, "manager": "flux", "operation": "Apply"}]
    # Before 1.22 a status write is listed without `subresource`: status is not ours.
    old_status = {**EDIT, "fieldsV1": {"f:status": {"f:replicas": {}}}}
    assert take_over_managed_fields([OURS, old_status], "flux") is None
    both = {**EDIT, "fieldsV1": {"f:data": {"f:b": {}}, "f:status": {"f:replicas": {}}}}
    assert take_over_managed_fields([both], "flux") == [
        {**EDIT, "manager": "flux", "operation": "Apply"}
    ]


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
REMOVE = {
    "op": "remove",
    "path": "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration",
}
TEST = {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}


def live(managed: list[Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "x", "resourceVersion": "7", "managedFields": managed}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta}


@pytest.mark.parametrize(
    ("existing", "ops"),
    [
        pytest.param(live([OURS, OTHER]), [], id="nothing-to-take"),
        pytest.param(live([OURS], {LAST_APPLIED: "{}"}), [TEST, REMOVE], id="annotation-only"),
        pytest.param(
            live([EDIT]),
            [
                TEST,
                {
                    "op": "replace",
                    "path": "/metadata/managedFields",
                    "value": [{**EDIT, "manager": "flux", "operation": "Apply"}],
                },
            ],
            id="fields",
        ),
        pytest.param(
            {"metadata": {"annotations": {LAST_APPLIED: "{}"}}}, [REMOVE], id="no-version-no-test"
        ),
    ],
)
def test_take_over_patch(existing: Any, ops: list[Any]) -> None:
    assert take_over_patch(existing, "flux") == ops
