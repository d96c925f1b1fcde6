"""What a ResourceSet's steps share: the controller's services and one reconcile's context."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from resourceset_controller import timing
from resourceset_controller.inputs import Input
from sluice_api.resourceset import (
    NAME_LABEL,
    NAMESPACE_LABEL,
    ResourceSet,
    ResourceSetReason,
)
from sluice_runtime import gotemplate
from sluice_runtime.informing.watching import Store
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.discovery import RestMapper
from sluice_runtime.reconciling.errors import StepError
from sluice_runtime.reconciling.steps import ReconcileContext
from sluice_runtime.ssa.changeset import ChangeSet
from sluice_runtime.ssa.manager import ResourceManager

Reason = ResourceSetReason
DEFAULT_TIMEOUT = 300.0


@dataclass
class Services:
    """What ResourceSet steps share across reconciles."""

    client: KubeClient
    providers: Store
    mapper: RestMapper
    requeue_dependency: float = 5.0
    default_service_account: str | None = None
    """--default-service-account: the account of ResourceSets that name none."""
    no_cross_namespace_refs: bool = False
    template_max_steps: int = gotemplate.DEFAULT_MAX_STEPS
    """--template-max-steps: the step budget of one ResourceSet's renders together."""

    def target(self, namespace: str, account: str | None) -> tuple[KubeClient, RestMapper]:
        """The client applies go through: the controller's, or the tenant's account."""
        account = account or self.default_service_account
        if not account:
            return self.client, self.mapper
        user = f"system:serviceaccount:{namespace}:{account}"
        # Discovery stays the controller's: every identity may read it.
        return self.client.impersonate(user), self.mapper


@dataclass(kw_only=True)
class ResourceSetContext(ReconcileContext[ResourceSet]):
    services: Services
    ready_exprs: dict[int, Any] = field(default_factory=dict)
    input_sets: list[Input] = field(default_factory=list)
    objects: list[dict[str, Any]] = field(default_factory=list)
    stages: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)
    """The objects per step (one unnamed stage without `spec.steps`), in order."""
    manager: ResourceManager | None = None
    changeset: ChangeSet = field(default_factory=ChangeSet)
    started: float = field(default_factory=time.monotonic)

    @property
    def timeout(self) -> float:
        return timing.timeout(self.obj.metadata.annotations, default=DEFAULT_TIMEOUT)

    def failed(self, reason: str, message: str, *, transient: bool = False) -> StepError:
        return StepError(reason, message, requeue_after=None if transient else 30.0)


def owner_labels(rset: ResourceSet) -> dict[str, str]:
    return {NAME_LABEL: rset.metadata.name, NAMESPACE_LABEL: rset.namespace}
