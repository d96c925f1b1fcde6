"""How each Helm action runs: install, upgrade, test, rollback and uninstall, with
the remediation of a failed install or upgrade.

An Application's Helm part takes the same types.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from sluice_api.meta import Duration, KubeModel

CRDsPolicy = Literal["Skip", "Create", "CreateReplace"]
ServerSideApplyMode = Literal["enabled", "disabled", "auto"]


class Strategy(KubeModel):
    """(Flux 2.7) What the controller does when an install or upgrade fails."""

    name: Literal["RemediateOnFailure", "RetryOnFailure"]
    """`RemediateOnFailure` (the default) applies the action's remediation;
    `RetryOnFailure` remediates nothing and retries with an upgrade after
    retryInterval, for as long as it fails."""

    retry_interval: Duration | None = None
    """Time between the retries of RetryOnFailure; 5m when not set. Not allowed
    with RemediateOnFailure."""


class InstallRemediation(KubeModel):
    """What to do when an install fails."""

    retries: int = 0
    """How many times to retry; a negative value retries forever."""

    ignore_test_failures: bool | None = None
    """Do not treat a failed test as a failed install; test.ignoreFailures when not set."""

    remediate_last_failure: bool | None = None
    """Remediate the last failure when retries are exhausted; true when retries > 0."""


class Install(KubeModel):
    """How to run `helm install`."""

    timeout: Duration | None = None
    """Time to wait for the install; spec.timeout when not set."""

    remediation: InstallRemediation | None = None
    """What to do when the install fails."""

    disable_wait: bool = False
    """Do not wait for the release's resources to be ready."""

    disable_wait_for_jobs: bool = False
    """Do not wait for the release's Jobs to complete."""

    disable_hooks: bool = False
    """Do not run the chart's hooks."""

    disable_open_api_validation: bool = Field(default=False, alias="disableOpenAPIValidation")
    """Do not validate the rendered manifests against the Kubernetes OpenAPI schema."""

    disable_schema_validation: bool = False
    """Do not validate the values against the chart's JSON schema."""

    disable_take_ownership: bool = False
    """(Flux 2.6) Do not take ownership of existing objects the chart renders;
    an object another release or tool owns then fails the install."""

    replace: bool = False
    """Reuse the release name even if it is in the history (unsafe in production)."""

    server_side_apply: bool | None = None
    """(Flux 2.8) Apply with server-side apply. This version's helm applies
    client-side only: false is honoured, true is refused."""

    skip_crds: bool = Field(default=False, alias="skipCRDs")
    """Deprecated: use crds: Skip."""

    strategy: Strategy | None = None
    """(Flux 2.7) What to do when the install fails; RemediateOnFailure when not set."""

    crds: CRDsPolicy | None = None
    """How CRDs in the chart's crds/ directory are installed; Create when not set."""

    create_namespace: bool = False
    """Create the target namespace if it does not exist."""


class UpgradeRemediation(KubeModel):
    """What to do when an upgrade fails."""

    retries: int = 0
    """How many times to retry; a negative value retries forever."""

    ignore_test_failures: bool | None = None
    """Do not treat a failed test as a failed upgrade; test.ignoreFailures when not set."""

    remediate_last_failure: bool | None = None
    """Remediate the last failure when retries are exhausted; true when retries > 0."""

    strategy: Literal["rollback", "uninstall"] | None = None
    """How to remediate; rollback when not set."""


class Upgrade(KubeModel):
    """How to run `helm upgrade`."""

    timeout: Duration | None = None
    """Time to wait for the upgrade; spec.timeout when not set."""

    remediation: UpgradeRemediation | None = None
    """What to do when the upgrade fails."""

    disable_wait: bool = False
    """Do not wait for the release's resources to be ready."""

    disable_wait_for_jobs: bool = False
    """Do not wait for the release's Jobs to complete."""

    disable_hooks: bool = False
    """Do not run the chart's hooks."""

    disable_open_api_validation: bool = Field(default=False, alias="disableOpenAPIValidation")
    """Do not validate the rendered manifests against the Kubernetes OpenAPI schema."""

    disable_schema_validation: bool = False
    """Do not validate the values against the chart's JSON schema."""

    disable_take_ownership: bool = False
    """(Flux 2.6) Do not take ownership of existing objects the chart renders."""

    chart_name_change_strategy: Literal["InPlaceUpdate", "Reinstall"] | None = None
    """(Flux 2.9) What a new chart name does to the release: `Reinstall` (the
    default) uninstalls it and installs the new chart; `InPlaceUpdate` upgrades
    it in place."""

    server_side_apply: ServerSideApplyMode | None = None
    """(Flux 2.8) Apply with server-side apply; `auto` follows the release's
    previous apply. This version's helm applies client-side only: `disabled`
    and `auto` are honoured, `enabled` is refused."""

    strategy: Strategy | None = None
    """(Flux 2.7) What to do when the upgrade fails; RemediateOnFailure when not set."""

    force: bool = False
    """Replace resources through delete and re-create when needed."""

    preserve_values: bool = False
    """Reuse the last release's values and merge in the overrides."""

    cleanup_on_fail: bool = False
    """Delete new resources created by a failed upgrade."""

    crds: CRDsPolicy | None = None
    """How CRDs in the chart's crds/ directory are upgraded; Skip when not set."""


class Filter(KubeModel):
    """Selects a chart test hook by name."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    """Name of the test."""

    exclude: bool = False
    """Exclude the test instead of selecting it."""


class Test(KubeModel):
    """How to run `helm test` after an install or upgrade."""

    enable: bool = False
    """Run the chart's tests."""

    timeout: Duration | None = None
    """Time to wait for the tests; spec.timeout when not set."""

    ignore_failures: bool = False
    """Do not treat a failed test as a failed release."""

    filters: list[Filter] | None = None
    """Which tests to run."""


class Rollback(KubeModel):
    """How to run `helm rollback` when remediating a failed upgrade."""

    timeout: Duration | None = None
    """Time to wait for the rollback; spec.timeout when not set."""

    disable_wait: bool = False
    """Do not wait for the release's resources to be ready."""

    disable_wait_for_jobs: bool = False
    """Do not wait for the release's Jobs to complete."""

    disable_hooks: bool = False
    """Do not run the chart's hooks."""

    recreate: bool = False
    """Restart the release's pods."""

    force: bool = False
    """Replace resources through delete and re-create when needed."""

    cleanup_on_fail: bool = False
    """Delete new resources created by a failed rollback."""

    server_side_apply: ServerSideApplyMode | None = None
    """(Flux 2.8) Apply with server-side apply; `auto` follows the release's
    previous apply. `disabled` and `auto` are honoured, `enabled` is refused."""


class Uninstall(KubeModel):
    """How to run `helm uninstall`."""

    timeout: Duration | None = None
    """Time to wait for the uninstall; spec.timeout when not set."""

    disable_hooks: bool = False
    """Do not run the chart's hooks."""

    keep_history: bool = False
    """Keep the release history (and the name) after uninstalling."""

    disable_wait: bool = False
    """Do not wait for the release's resources to be deleted."""

    deletion_propagation: Literal["background", "foreground", "orphan"] = "background"
    """How dependents of the release's resources are deleted."""
