"""ResourceSet: templates times input sets → objects, applied as one inventory.

STEPS: spec → dependencies → inputs → build → apply → garbage collection →
health → status. This module holds the checks before any work (spec,
dependencies), the status step and the wiring; inputs and build are in
`rendering.py`, apply, garbage collection, health and the finalizer in
`deploying.py`, the context they share in `contexts.py`.

- spec: `fluxcd.controlplane.io/reconcile: disabled` stops here; CEL
  `readyExpr`s are compiled first, so a typo stalls before anything applies.
- dependencies: each `dependsOn` object must exist (and, with `ready`, have
  Ready=True or satisfy `readyExpr`), else the ResourceSet waits.
- inputs: in-line `inputs` plus the exported inputs of `inputsFrom`
  providers (by name or label selector, same namespace), combined by
  `inputStrategy` (Flatten, or Permute: the Cartesian product keyed by
  provider name, refused past 10,000 sets). A provider that has not
  exported yet is waited for.
- build: every template rendered per input set (`templating.py`); a
  template error stalls with BuildFailed naming the template and the input
  id, and nothing of that build is applied. `copyFrom` fills a ConfigMap's
  or Secret's data from another in the same namespace; `commonMetadata`
  and the owner labels are set on every object.
- apply and garbage collection: the shared engine (`applying.py`), as
  `serviceAccountName` when set (RBAC decides; a denial names the object).
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from resourceset_controller import timing
from resourceset_controller.contexts import Reason, ResourceSetContext, Services
from resourceset_controller.deploying import (
    finalize,
    reconcile_apply,
    reconcile_health,
    reconcile_prune,
)
from resourceset_controller.rendering import reconcile_build, reconcile_inputs, selects
from sluice_api.resourceset import HistoryEntry, ResourceSet
from sluice_runtime import evaluating
from sluice_runtime.describing import describe
from sluice_runtime.informing.watching import Change, Store
from sluice_runtime.kube.discovery import UnknownKind
from sluice_runtime.kube.errors import KubeError, NotFound
from sluice_runtime.reconciling.errors import Stalling, Waiting
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import Result, done, step

DEFAULT_INTERVAL = 3600.0
HISTORY_SIZE = 5


# -- 1. spec ------------------------------------------------------------------------


@step()
async def reconcile_spec(ctx: ResourceSetContext) -> Result | None:
    if timing.disabled(ctx.obj.metadata.annotations):
        ctx.ready_reason = Reason.RECONCILIATION_DISABLED
        ctx.ready_message = "Reconciliation is disabled"
        return done(requeue_after=timing.DISABLED_RECHECK)
    for index, dep in enumerate(ctx.obj.spec.depends_on or []):
        if dep.ready_expr:
            # celpy costs about 7 MiB resident once loaded; only a readyExpr loads it.
            try:
                ctx.ready_exprs[index] = evaluating.compile_expression(dep.ready_expr)
            except evaluating.InvalidExpression as error:
                raise Stalling(
                    Reason.INVALID_SPEC,
                    f"spec.dependsOn[{index}].readyExpr {dep.ready_expr!r} is invalid: {error}",
                ) from None
    spec = ctx.obj.spec
    if spec.steps and (spec.resources or spec.resources_template):
        raise Stalling(
            Reason.INVALID_SPEC,
            "spec.steps cannot be combined with spec.resources or spec.resourcesTemplate",
        )
    names = [s.name for s in spec.steps or []]
    if len(set(names)) != len(names):
        raise Stalling(Reason.INVALID_SPEC, "spec.steps names must be unique")
    for index, ref in enumerate(ctx.obj.spec.inputs_from or []):
        if (ref.name is None) == (ref.selector is None):
            raise Stalling(
                Reason.INVALID_SPEC,
                f"spec.inputsFrom[{index}] needs exactly one of name and selector",
            )
    return None


# -- 2. dependencies ------------------------------------------------------------------


@step()
async def reconcile_dependencies(ctx: ResourceSetContext) -> Result | None:
    for index, dep in enumerate(ctx.obj.spec.depends_on or []):
        namespace = dep.namespace or ctx.obj.namespace
        if ctx.services.no_cross_namespace_refs and namespace != ctx.obj.namespace:
            raise Stalling(
                Reason.INVALID_SPEC,
                f"spec.dependsOn[{index}]: cannot depend on {dep.kind}/{namespace}/{dep.name}: "
                "cross-namespace references are not allowed",
            )
        where = f"{dep.kind}/{namespace}/{dep.name}" if namespace else f"{dep.kind}/{dep.name}"
        # Read as the tenant: a ResourceSet may wait only on what its account may see.
        client, mapper = ctx.services.target(ctx.obj.namespace, ctx.obj.spec.service_account_name)
        try:
            rt = await mapper.resource_for(dep.api_version, dep.kind)
            obj = await client.get(rt, dep.name, namespace if rt.namespaced else None)
        except (NotFound, UnknownKind):
            raise _not_ready(ctx, f"dependency {where} not found") from None
        except KubeError as error:
            raise ctx.failed(
                Reason.DEPENDENCY_NOT_READY,
                f"dependency {where}: {describe(error)}",
                transient=True,
            ) from None
        if not dep.ready:
            continue
        program = ctx.ready_exprs.get(index)
        if program is not None:
            try:
                satisfied = await evaluating.off_loop(functools.partial(_satisfies, program, obj))
            except evaluating.BudgetExceeded as error:
                # Judged again after the dependency changes, within a new budget.
                raise _not_ready(ctx, f"dependency {where}: readyExpr: {error}") from None
            if not satisfied:
                raise _not_ready(ctx, f"dependency {where} does not satisfy its readyExpr yet")
        elif not _ready(obj):
            raise _not_ready(ctx, f"dependency {where} is not ready")
    return None


def _satisfies(program: evaluating.Program, obj: dict[str, Any]) -> bool:
    """Whether `obj` satisfies a readyExpr; one that cannot be evaluated is not yet."""
    # A compiled readyExpr means reconcile_spec loaded celpy: lookups.
    from celpy import celtypes
    from celpy.adapter import json_to_cel
    from celpy.evaluation import CELEvalError

    activation = {str(k): json_to_cel(v) for k, v in obj.items()}
    try:
        value = program.evaluate(activation)
    except CELEvalError:
        return False
    return isinstance(value, celtypes.BoolType) and bool(value)


def _ready(obj: dict[str, Any]) -> bool:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _not_ready(ctx: ResourceSetContext, message: str) -> Waiting:
    return Waiting(
        Reason.DEPENDENCY_NOT_READY, message, requeue_after=ctx.services.requeue_dependency
    )


# -- 3 to 7: inputs and build (rendering.py), apply, garbage collection
# and health (deploying.py)


# -- 8. status -----------------------------------------------------------------------------


def digest_of(objects: list[dict[str, Any]]) -> str:
    encoded = json.dumps(objects, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(encoded).hexdigest()


@step()
async def reconcile_status(ctx: ResourceSetContext) -> Result | None:
    status = ctx.obj.status
    revision = digest_of(ctx.objects)
    status.last_applied_revision = revision
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    took = f"{time.monotonic() - ctx.started:.3f}s"
    history = list(status.history or [])
    if history and history[0].digest == revision:
        entry = history[0]
        entry.last_reconciled = now
        entry.last_reconciled_duration = took
        entry.last_reconciled_status = Reason.RECONCILIATION_SUCCEEDED
        entry.total_reconciliations += 1
    else:
        history.insert(
            0,
            HistoryEntry(
                digest=revision,
                first_reconciled=now,
                last_reconciled=now,
                last_reconciled_duration=took,
                last_reconciled_status=Reason.RECONCILIATION_SUCCEEDED,
                total_reconciliations=1,
                metadata={"inputs": str(len(ctx.input_sets)), "resources": str(len(ctx.objects))},
            ),
        )
    status.history = history[:HISTORY_SIZE]
    ctx.ready_reason = Reason.RECONCILIATION_SUCCEEDED
    ctx.ready_message = f"Reconciliation finished in {took}"
    return done(
        requeue_after=timing.interval(ctx.obj.metadata.annotations, default=DEFAULT_INTERVAL)
    )


STEPS = (
    reconcile_spec,
    reconcile_dependencies,
    reconcile_inputs,
    reconcile_build,
    reconcile_apply,
    reconcile_prune,
    reconcile_health,
    reconcile_status,
)


# -- what makes a ResourceSet reconcile ----------------------------------------------------------


def provider_watchers(rsets: Store) -> Callable[[Change], list[str]]:
    """ResourceSets to reconcile when a provider's exported revision changes."""

    def mapper(change: Change) -> list[str]:
        def revision(obj: dict[str, Any] | None) -> Any:
            return ((obj or {}).get("status") or {}).get("lastExportedRevision")

        if change.kind != "deleted" and revision(change.old) == revision(change.new):
            return []
        obj = change.obj
        namespace = obj["metadata"].get("namespace")
        name = obj["metadata"]["name"]
        labels = obj["metadata"].get("labels") or {}
        keys = []
        for raw in rsets.values():
            if raw["metadata"].get("namespace") != namespace:
                continue
            try:
                rset = ResourceSet.from_obj(raw)
            except ValueError:
                continue
            for ref in rset.spec.inputs_from or []:
                if ref.name == name or (ref.selector is not None and selects(ref.selector, labels)):
                    keys.append(rset.key)
                    break
        return keys

    return mapper


def reconciler(services: Services) -> Reconciler[ResourceSetContext]:
    context = functools.partial(ResourceSetContext, services=services)
    return Reconciler(
        model=ResourceSet,
        steps=STEPS,
        context=context,
        finalize=finalize,
        success_reason=Reason.RECONCILIATION_SUCCEEDED,
        default_interval=DEFAULT_INTERVAL,
    )
