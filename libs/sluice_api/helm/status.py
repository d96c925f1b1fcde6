"""The HelmRelease's status: the release history as Helm stored it, the last attempt,
and the failure counters remediation works from.
"""

from __future__ import annotations

from typing import Literal

from sluice_api.kustomize import ResourceInventory
from sluice_api.meta import KubeModel, ReconcileStatus


class TestHookStatus(KubeModel):
    """The last run of one chart test hook."""

    last_started: str | None = None
    """When the test last started."""

    last_completed: str | None = None
    """When the test last completed."""

    phase: str | None = None
    """The test's phase: Succeeded, Failed, Running, Unknown."""


class Snapshot(KubeModel):
    """One release in the history, as Helm stored it."""

    api_version: str | None = None
    """Version of the snapshot format."""

    action: str | None = None
    """(Flux 2.8) The action that made this release: install, upgrade or rollback."""

    digest: str
    """Digest of the release object in Helm's storage."""

    name: str
    """Release name."""

    namespace: str
    """Namespace the release is deployed to."""

    version: int
    """Helm's release revision."""

    status: str
    """Helm's release status: deployed, failed, superseded, ..."""

    chart_name: str
    """Name of the chart."""

    chart_version: str
    """Version of the chart."""

    app_version: str | None = None
    """App version of the chart."""

    config_digest: str
    """Digest of the values the release was made with."""

    first_deployed: str
    """When the release was first deployed."""

    last_deployed: str
    """When this release revision was deployed."""

    deleted: str | None = None
    """When the release was uninstalled."""

    test_hooks: dict[str, TestHookStatus] | None = None
    """Test hooks of this release and their last runs."""

    oci_digest: str | None = None
    """Digest of the OCI artifact the chart came from."""


class HelmReleaseStatus(ReconcileStatus):
    """Observed state of a HelmRelease."""

    observed_post_renderers_digest: str | None = None
    """Digest of the post-renderers last reconciled."""

    observed_common_metadata_digest: str | None = None
    """(Flux 2.7) Digest of the commonMetadata last reconciled."""

    inventory: ResourceInventory | None = None
    """(Flux 2.8) The objects of the current release."""

    last_attempted_release_action_duration: str | None = None
    """(Flux 2.8) How long the last release action took, as a Go duration."""

    last_applied_revision: str | None = None
    """(v2beta1) The chart version of the last successful release."""

    last_attempted_generation: int | None = None
    """The generation of the last release attempt."""

    helm_chart: str | None = None
    """`<namespace>/<name>` of the HelmChart the controller created."""

    storage_namespace: str | None = None
    """Namespace of Helm's release storage of the current release."""

    history: list[Snapshot] | None = None
    """The releases, newest first."""

    last_attempted_release_action: Literal["install", "upgrade"] | None = None
    """The last release action attempted."""

    failures: int | None = None
    """Failures since the last success."""

    install_failures: int | None = None
    """Install failures since the last successful install."""

    upgrade_failures: int | None = None
    """Upgrade failures since the last successful upgrade."""

    last_attempted_revision: str | None = None
    """The chart version of the last attempt."""

    last_attempted_revision_digest: str | None = None
    """Digest of the chart artifact of the last attempt."""

    last_attempted_values_checksum: str | None = None
    """Deprecated: SHA1 of the values of the last attempt."""

    last_release_revision: int | None = None
    """Deprecated: the last successful Helm release revision."""

    last_attempted_config_digest: str | None = None
    """Digest of the values of the last attempt."""

    last_handled_force_at: str | None = None
    """The value of the reconcile.fluxcd.io/forceAt annotation last handled."""

    last_handled_reset_at: str | None = None
    """The value of the reconcile.fluxcd.io/resetAt annotation last handled."""
