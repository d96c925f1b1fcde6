"""What every part of the HelmRelease API shares: its group and version, the
annotations that ask for a release action or a reset, the labels on the HelmChart
a HelmRelease owns, and the condition types and reasons the helm-controller writes.
"""

from __future__ import annotations

from enum import StrEnum

GROUP = "helm.toolkit.fluxcd.io"
VERSION = "v2"

FORCE_REQUESTED_AT_ANNOTATION = "reconcile.fluxcd.io/forceAt"
"""When its value changes (together with requestedAt), run a release action now."""
RESET_REQUESTED_AT_ANNOTATION = "reconcile.fluxcd.io/resetAt"
"""When its value changes (together with requestedAt), reset the failure counters."""

NAME_LABEL = f"{GROUP}/name"
"""Label on the HelmChart a HelmRelease owns: the HelmRelease's name."""
NAMESPACE_LABEL = f"{GROUP}/namespace"
"""Label on the HelmChart a HelmRelease owns: the HelmRelease's namespace."""


class HelmReleaseCondition(StrEnum):
    """Condition types of a HelmRelease."""

    READY = "Ready"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"
    RELEASED = "Released"
    TEST_SUCCESS = "TestSuccess"
    REMEDIATED = "Remediated"
    APPROVED = "Approved"
    """Sluice: False while a gate in spec.gates is closed."""


class HelmReleaseReason(StrEnum):
    """Reasons the helm-controller gives for its conditions, as Flux's."""

    INSTALL_SUCCEEDED = "InstallSucceeded"
    INSTALL_FAILED = "InstallFailed"
    UPGRADE_SUCCEEDED = "UpgradeSucceeded"
    UPGRADE_FAILED = "UpgradeFailed"
    TEST_SUCCEEDED = "TestSucceeded"
    TEST_FAILED = "TestFailed"
    ROLLBACK_SUCCEEDED = "RollbackSucceeded"
    ROLLBACK_FAILED = "RollbackFailed"
    UNINSTALL_SUCCEEDED = "UninstallSucceeded"
    UNINSTALL_FAILED = "UninstallFailed"
    ARTIFACT_FAILED = "ArtifactFailed"
    INIT_FAILED = "InitFailed"
    GET_LAST_RELEASE_FAILED = "GetLastReleaseFailed"
    DEPENDENCY_NOT_READY = "DependencyNotReady"
    PROGRESSING = "Progressing"
    PROGRESSING_WITH_RETRY = "ProgressingWithRetry"
    RECONCILIATION_FAILED = "ReconciliationFailed"
    RETRIES_EXCEEDED = "RetriesExceeded"
    VALUES_ERROR = "ValuesError"
    UNSUPPORTED = "UnsupportedField"
    """Sluice: a field the controller does not build is set."""
    GATE_CLOSED = "GateClosed"
    SUCCEEDED = "Succeeded"
    DRIFT_DETECTED = "DriftDetected"
    DRIFT_CORRECTED = "DriftCorrected"
    DRIFT_CORRECTION_FAILED = "DriftCorrectionFailed"
