"""What every part of the Kustomization API shares: its group and version, the labels
and annotations the kustomize-controller reads on applied objects, the condition
types and reasons it writes, and the JSON values the API server keeps as they are.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field

GROUP = "kustomize.toolkit.fluxcd.io"
VERSION = "v1"

NAME_LABEL = f"{GROUP}/name"
"""Label on every applied object: the name of the Kustomization that owns it."""
NAMESPACE_LABEL = f"{GROUP}/namespace"
"""Label on every applied object: the namespace of the Kustomization that owns it."""
SSA_ANNOTATION = f"{GROUP}/ssa"
"""Per-object apply policy: Override, Merge, IfNotPresent or Ignore."""
FORCE_ANNOTATION = f"{GROUP}/force"
"""`enabled`: re-create the object when an immutable field changed."""
PRUNE_ANNOTATION = f"{GROUP}/prune"
"""`disabled`: never garbage-collect the object."""
RECONCILE_ANNOTATION = f"{GROUP}/reconcile"
"""`disabled`: do not apply the object."""
SUBSTITUTE_ANNOTATION = f"{GROUP}/substitute"
"""`disabled`: skip `${var}` substitution in the object."""


_PRESERVE = Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
AnyJSON = Annotated[Any, _PRESERVE]
"""Any JSON value, kept by the API server as it is."""
AnyObject = Annotated[dict[str, Any], _PRESERVE]
"""A JSON object of any shape, kept by the API server as it is."""


class KustomizationCondition(StrEnum):
    """Condition types of a Kustomization."""

    READY = "Ready"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"
    HEALTHY = "Healthy"
    APPROVED = "Approved"
    """Sluice: False while a gate in spec.gates is closed."""


class KustomizationReason(StrEnum):
    """Reasons the kustomize-controller gives for its conditions."""

    RECONCILIATION_SUCCEEDED = "ReconciliationSucceeded"
    RECONCILIATION_FAILED = "ReconciliationFailed"
    PROGRESSING = "Progressing"
    PROGRESSING_WITH_RETRY = "ProgressingWithRetry"
    ARTIFACT_FAILED = "ArtifactFailed"
    BUILD_FAILED = "BuildFailed"
    HEALTH_CHECK_FAILED = "HealthCheckFailed"
    PRUNE_FAILED = "PruneFailed"
    DEPENDENCY_NOT_READY = "DependencyNotReady"
    ACCESS_DENIED = "AccessDenied"
    GATE_CLOSED = "GateClosed"
    SUCCEEDED = "Succeeded"
