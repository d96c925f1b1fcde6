"""ResourceSet: templates times input sets → objects, applied as one inventory.

STEPS: spec → dependencies → inputs → build → apply → garbage collection →
health → status.

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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from resourceset_controller import applying, inputs, templating, timing
from resourceset_controller.inputs import Input, InputError
from sluice_api.kustomize import ResourceInventory
from sluice_api.meta import ObjectId
from sluice_api.resourceset import (
    COPY_FROM_ANNOTATION,
    FORCE_ANNOTATION,
    NAME_LABEL,
    NAMESPACE_LABEL,
    HistoryEntry,
    ResourceSet,
    ResourceSetInputProvider,
    ResourceSetReason,
)
from sluice_runtime.describing import describe
from sluice_runtime.informing.watching import Change, Store
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.discovery import RestMapper, UnknownKind
from sluice_runtime.kube.errors import KubeError, NotFound, is_transient
from sluice_runtime.kube.resources import CONFIG_MAP, SECRET
from sluice_runtime.reconciling.errors import Stalling, StepError, Waiting
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import ReconcileContext, Result, done, step
from sluice_runtime.ssa.changeset import ChangeSet
from sluice_runtime.ssa.manager import ResourceManager

Reason = ResourceSetReason
DEFAULT_INTERVAL = 3600.0
DEFAULT_TIMEOUT = 300.0
HISTORY_SIZE = 5


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


# -- 1. spec ------------------------------------------------------------------------


@step()
async def reconcile_spec(ctx: ResourceSetContext) -> Result | None:
    if timing.disabled(ctx.obj.metadata.annotations):
        ctx.ready_reason = Reason.RECONCILIATION_DISABLED
        ctx.ready_message = "Reconciliation is disabled"
        return done(requeue_after=timing.DISABLED_RECHECK)
    env = celpy.Environment()
    for index, dep in enumerate(ctx.obj.spec.depends_on or []):
        if dep.ready_expr:
            try:
                ctx.ready_exprs[index] = env.program(env.compile(dep.ready_expr))
            except CELParseError as error:
                first = str(error).splitlines()[0] if str(error) else "syntax error"
                raise Stalling(
                    Reason.INVALID_SPEC,
                    f"spec.dependsOn[{index}].readyExpr {dep.ready_expr!r} is invalid: {first}",
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
            activation = {str(k): json_to_cel(v) for k, v in obj.items()}
            try:
                value = program.evaluate(activation)
            except CELEvalError:
                value = None
            if not (isinstance(value, celtypes.BoolType) and bool(value)):
                raise _not_ready(ctx, f"dependency {where} does not satisfy its readyExpr yet")
        elif not _ready(obj):
            raise _not_ready(ctx, f"dependency {where} is not ready")
    return None


def _ready(obj: dict[str, Any]) -> bool:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _not_ready(ctx: ResourceSetContext, message: str) -> Waiting:
    return Waiting(
        Reason.DEPENDENCY_NOT_READY, message, requeue_after=ctx.services.requeue_dependency
    )


# -- 3. inputs ----------------------------------------------------------------------------


def providers_of(rset: ResourceSet, store: Store) -> list[tuple[str, dict[str, Any]]]:
    """The providers `inputsFrom` names, in order, each once: (name, object)."""
    namespace = rset.namespace
    found: dict[str, dict[str, Any]] = {}
    missing: list[str] = []
    for ref in rset.spec.inputs_from or []:
        if ref.name is not None:
            obj = store.get(f"{namespace}/{ref.name}")
            if obj is None:
                missing.append(ref.name)
            else:
                found.setdefault(ref.name, obj)
            continue
        selector = ref.selector
        assert selector is not None
        for obj in sorted(store.values(), key=lambda o: o["metadata"]["name"]):
            meta = obj["metadata"]
            if meta.get("namespace") == namespace and _selects(selector, meta.get("labels") or {}):
                found.setdefault(meta["name"], obj)
    if missing:
        raise Waiting(
            Reason.DEPENDENCY_NOT_READY,
            f"ResourceSetInputProvider {', '.join(missing)} not found in '{namespace}'",
            requeue_after=30.0,
        )
    return list(found.items())


def _selects(selector: Any, labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in (selector.match_labels or {}).items()):
        return False
    for req in selector.match_expressions or []:
        has = req.key in labels
        value = labels.get(req.key)
        values = req.values or []
        if (
            (req.operator == "In" and value not in values)
            or (req.operator == "NotIn" and has and value in values)
            or (req.operator == "Exists" and not has)
            or (req.operator == "DoesNotExist" and has)
        ):
            return False
    return True


@step()
async def reconcile_inputs(ctx: ResourceSetContext) -> Result | None:
    spec = ctx.obj.spec
    sources: list[tuple[str, list[Input]]] = []
    if spec.inputs:
        sources.append((ctx.obj.metadata.name, [dict(i) for i in spec.inputs]))
    for name, obj in providers_of(ctx.obj, ctx.services.providers):
        provider = ResourceSetInputProvider.from_obj(obj)
        if provider.status.last_exported_revision is None:
            raise Waiting(
                Reason.DEPENDENCY_NOT_READY,
                f"ResourceSetInputProvider {name} has not exported inputs yet",
                requeue_after=30.0,
            )
        sources.append((name, [dict(i) for i in provider.status.exported_inputs or []]))
    strategy = spec.input_strategy.name if spec.input_strategy is not None else "Flatten"
    try:
        if strategy == "Permute":
            ctx.input_sets = inputs.permute(sources)
        else:
            ctx.input_sets = inputs.flatten(sources)
    except InputError as error:
        raise Stalling(Reason.BUILD_FAILED, str(error)) from None
    return None


# -- 4. build ------------------------------------------------------------------------------


@step()
async def reconcile_build(ctx: ResourceSetContext) -> Result | None:
    spec = ctx.obj.spec
    stages = (
        [(s.name, s.resources or [], s.resources_template) for s in spec.steps]
        if spec.steps
        else [("", spec.resources or [], spec.resources_template)]
    )
    seen: dict[tuple[str, str, str, str], str] = {}
    for name, resources, template in stages:
        try:
            built = templating.build(resources, template, ctx.input_sets)
        except templating.RenderError as error:
            where = f"step '{name}': " if name else ""
            raise Stalling(Reason.BUILD_FAILED, f"build failed: {where}{error}") from None
        for obj in built:
            key = templating.identity(obj)
            if key in seen:
                raise Stalling(
                    Reason.BUILD_FAILED,
                    f"build failed: {key[1]}/{key[3]} is generated by steps "
                    f"'{seen[key]}' and '{name}'",
                )
            seen[key] = name
        ctx.stages.append((name, built))
    objects = [obj for _, built in ctx.stages for obj in built]
    common = spec.common_metadata
    for obj in objects:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if str(annotations.get(FORCE_ANNOTATION, "")).lower() == "enabled":
            where = f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"
            raise Stalling(
                Reason.UNSUPPORTED,
                f"{where}: the {FORCE_ANNOTATION} annotation is not supported by this "
                "version of Sluice; remove it",
            )
        meta = obj.setdefault("metadata", {})
        if not meta.get("namespace") and await _namespaced(ctx, obj):
            meta["namespace"] = ctx.obj.namespace
        if common is not None:
            if common.labels:
                meta["labels"] = {**(meta.get("labels") or {}), **common.labels}
            if common.annotations:
                meta["annotations"] = {**(meta.get("annotations") or {}), **common.annotations}
        await _copy_from(ctx, obj)
    ctx.objects = objects
    return None


async def _namespaced(ctx: ResourceSetContext, obj: dict[str, Any]) -> bool:
    try:
        rt = await ctx.services.mapper.resource_for(
            str(obj.get("apiVersion")), str(obj.get("kind"))
        )
    except UnknownKind:
        return True  # the apply names the unknown kind
    return rt.namespaced


async def _copy_from(ctx: ResourceSetContext, obj: dict[str, Any]) -> None:
    """`copyFrom: <namespace>/<name>`: a ConfigMap's or Secret's data from another."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    source = annotations.get(COPY_FROM_ANNOTATION)
    if not source:
        return
    kind = obj.get("kind")
    where = f"{kind}/{obj['metadata'].get('name')}"
    if obj.get("apiVersion") != "v1" or kind not in ("ConfigMap", "Secret"):
        raise Stalling(
            Reason.BUILD_FAILED,
            f"{where}: {COPY_FROM_ANNOTATION} applies to ConfigMaps and Secrets only",
        )
    namespace, _, name = str(source).rpartition("/")
    if not namespace or not name:
        raise Stalling(
            Reason.BUILD_FAILED, f"{where}: {COPY_FROM_ANNOTATION} must be <namespace>/<name>"
        )
    client, _ = ctx.services.target(ctx.obj.namespace, ctx.obj.spec.service_account_name)
    try:
        found = await client.get(CONFIG_MAP if kind == "ConfigMap" else SECRET, name, namespace)
    except NotFound:
        raise ctx.failed(
            Reason.BUILD_FAILED, f"{where}: {kind} {namespace}/{name} to copy from not found"
        ) from None
    except KubeError as error:
        # The tenant's account decides what it may copy: a 403 names the source.
        raise ctx.failed(
            Reason.BUILD_FAILED,
            f"{where}: cannot read {kind} {namespace}/{name}: {describe(error)}",
            transient=is_transient(error),
        ) from None
    for key in ("data", "binaryData", "stringData"):
        if key in found:
            obj[key] = found[key]
    if kind == "Secret" and found.get("type"):
        obj["type"] = found["type"]


# -- 5. apply ------------------------------------------------------------------------------


@step()
async def reconcile_apply(ctx: ResourceSetContext) -> Result | None:
    client, mapper = ctx.services.target(ctx.obj.namespace, ctx.obj.spec.service_account_name)
    ctx.manager = applying.manager(client, mapper, owner_labels=owner_labels(ctx.obj))
    try:
        for index, (name, objects) in enumerate(ctx.stages):
            applied = await ctx.manager.apply_all_staged(objects, wait_timeout=ctx.timeout)
            ctx.changeset.extend(applied)
            if name and index < len(ctx.stages) - 1:
                # A step is healthy before the next starts (a migration Job before
                # the Deployment that needs it).
                await ctx.progress(f"Waiting for step '{name}' to be healthy")
                report = await applying.wait(ctx.manager, applied, timeout=ctx.timeout)
                if not report.healthy:
                    _merge_inventory(ctx, ctx.changeset)
                    raise ctx.failed(
                        Reason.HEALTH_CHECK_FAILED,
                        f"step '{name}': health check "
                        + ("timed out: " if report.timed_out else "failed: ")
                        + report.summary(),
                    )
    except applying.ValidationFailed as error:
        raise Stalling(Reason.BUILD_FAILED, str(error)) from None
    except applying.ApplyFailed as error:
        _merge_inventory(ctx, ctx.changeset)
        _merge_inventory(ctx, error.changeset)
        raise ctx.failed(
            Reason.RECONCILIATION_FAILED, f"apply failed: {error}", transient=error.transient
        ) from None
    except (UnknownKind, KubeError) as error:
        raise ctx.failed(
            Reason.RECONCILIATION_FAILED,
            f"apply failed: {describe(error)}",
            transient=is_transient(error),
        ) from None
    if ctx.changeset.changed:
        ctx.events.normal(Reason.PROGRESSING, ctx.changeset.summary(only_changes=True))
    return None


def _entries(ctx: ResourceSetContext) -> dict[str, str]:
    inventory = ctx.obj.status.inventory
    return {e.id: e.version for e in inventory.entries} if inventory is not None else {}


def _set_inventory(ctx: ResourceSetContext, entries: dict[str, str]) -> None:
    ctx.obj.status.inventory = ResourceInventory.of(
        (ObjectId.from_inventory_id(i), v) for i, v in entries.items()
    )


def _applied(changeset: ChangeSet) -> dict[str, str]:
    return {e.id: e.version for e in changeset.to_inventory().entries}


def _merge_inventory(ctx: ResourceSetContext, applied: ChangeSet) -> None:
    entries = {**_entries(ctx), **_applied(applied)}
    if entries:
        _set_inventory(ctx, entries)


# -- 6. garbage collection -----------------------------------------------------------------


@step()
async def reconcile_prune(ctx: ResourceSetContext) -> Result | None:
    assert ctx.manager is not None
    new = _applied(ctx.changeset)
    old = _entries(ctx)
    stale = sorted(set(old) - set(new))
    if stale:
        try:
            pruned = await applying.garbage_collect(
                ctx.manager, [ObjectId.from_inventory_id(i) for i in stale], timeout=ctx.timeout
            )
        except applying.ApplyFailed as error:
            handled = {e.id.inventory_id for e in error.changeset.entries}
            left = {i: old[i] for i in stale if i not in handled}
            _set_inventory(ctx, {**left, **new})
            raise ctx.failed(
                Reason.RECONCILIATION_FAILED,
                f"garbage collection failed: {error}",
                transient=error.transient,
            ) from None
        if pruned.changed:
            ctx.events.normal(Reason.PROGRESSING, pruned.summary(only_changes=True))
    _set_inventory(ctx, new)
    return None


# -- 7. health -----------------------------------------------------------------------------


@step()
async def reconcile_health(ctx: ResourceSetContext) -> Result | None:
    if not ctx.obj.spec.wait or ctx.manager is None:
        return None
    await ctx.progress(f"Waiting for {len(ctx.changeset.entries)} objects to be healthy")
    report = await applying.wait(ctx.manager, ctx.changeset, timeout=ctx.timeout)
    if not report.healthy:
        raise ctx.failed(
            Reason.HEALTH_CHECK_FAILED,
            ("health check timed out: " if report.timed_out else "health check failed: ")
            + report.summary(),
        )
    return None


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


# -- deletion ----------------------------------------------------------------------------------


async def finalize(ctx: ResourceSetContext) -> None:
    """Garbage-collect everything the ResourceSet applied, Flux kinds first."""
    entries = _entries(ctx)
    if not entries or timing.disabled(ctx.obj.metadata.annotations):
        return
    client, mapper = ctx.services.target(ctx.obj.namespace, ctx.obj.spec.service_account_name)
    rm = applying.manager(client, mapper, owner_labels=owner_labels(ctx.obj))
    try:
        await applying.garbage_collect(
            rm, [ObjectId.from_inventory_id(i) for i in entries], timeout=ctx.timeout
        )
    except applying.ApplyFailed as error:
        ctx.log.warning("garbage collection on deletion failed", error=str(error))


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
                if ref.name == name or (
                    ref.selector is not None and _selects(ref.selector, labels)
                ):
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
