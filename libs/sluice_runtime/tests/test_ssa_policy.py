"""The per-object annotations, read from the desired object and the live one."""

from __future__ import annotations

from typing import Any

import pytest

from sluice_runtime.ssa.policy import SSAPolicy, prunable, skip_reason, ssa_policy, wants_force

K = "kustomize.toolkit.fluxcd.io"


def obj(annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> Any:
    meta: dict[str, Any] = {"name": "x"}
    if annotations is not None:
        meta["annotations"] = annotations
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


PLAIN = obj()


@pytest.mark.parametrize(
    ("desired", "existing", "policy"),
    [
        pytest.param(PLAIN, None, SSAPolicy.OVERRIDE, id="default"),
        pytest.param(obj({f"{K}/ssa": "merge"}), None, SSAPolicy.MERGE, id="case-insensitive"),
        pytest.param(PLAIN, obj({f"{K}/ssa": "IfNotPresent"}), SSAPolicy.IF_NOT_PRESENT, id="live"),
        pytest.param(
            obj({f"{K}/ssa": "Ignore"}),
            obj({f"{K}/ssa": "Merge"}),
            SSAPolicy.IGNORE,
            id="desired-wins",
        ),
        pytest.param(obj({f"{K}/ssa": "bogus"}), None, SSAPolicy.OVERRIDE, id="unknown"),
    ],
)
def test_ssa_policy(desired: Any, existing: Any, policy: SSAPolicy) -> None:
    assert ssa_policy(desired, existing) is policy


@pytest.mark.parametrize(
    ("desired", "existing", "reason"),
    [
        pytest.param(PLAIN, None, "", id="create"),
        pytest.param(PLAIN, PLAIN, "", id="update"),
        pytest.param(obj({f"{K}/ssa": "Ignore"}), None, f"{K}/ssa: Ignore", id="ignore-create"),
        pytest.param(obj({f"{K}/ssa": "IfNotPresent"}), None, "", id="if-not-present-create"),
        pytest.param(
            obj({f"{K}/ssa": "IfNotPresent"}),
            PLAIN,
            f"{K}/ssa: IfNotPresent and it exists",
            id="if-not-present-exists",
        ),
        pytest.param(obj({f"{K}/reconcile": "disabled"}), None, "", id="reconcile-disabled-create"),
        pytest.param(
            PLAIN,
            obj({f"{K}/reconcile": "Disabled"}),
            f"{K}/reconcile: disabled",
            id="disabled-live",
        ),
    ],
)
def test_skip_reason(desired: Any, existing: Any, reason: str) -> None:
    assert skip_reason(desired, existing) == reason


@pytest.mark.parametrize(
    ("desired", "existing", "force", "can_prune"),
    [
        pytest.param(PLAIN, None, False, True, id="plain"),
        pytest.param(obj({f"{K}/force": "Enabled"}), PLAIN, True, True, id="force"),
        pytest.param(PLAIN, obj({f"{K}/force": "enabled"}), True, True, id="force-live"),
        pytest.param(obj({f"{K}/prune": "disabled"}), None, False, False, id="prune-disabled"),
        # Flux's exclusions match labels as well as annotations.
        pytest.param(PLAIN, obj(labels={f"{K}/reconcile": "disabled"}), False, False, id="label"),
    ],
)
def test_force_and_prune(desired: Any, existing: Any, force: bool, can_prune: bool) -> None:
    assert (wants_force(desired, existing), prunable(desired, existing)) == (force, can_prune)
