"""Inputs rendered into objects: the inputs and build steps of a ResourceSet.

- inputs: in-line `inputs` plus the exported inputs of `inputsFrom`
  providers, each set given the built-in `provider` (the object it came
  from), combined by `inputStrategy` (Flatten or Permute).
- build: every template rendered per input set (`templating.py`), with
  `copyFrom` and `commonMetadata` applied to each object.
"""

from __future__ import annotations

from typing import Any

from resourceset_controller import inputs, templating
from resourceset_controller.contexts import Reason, ResourceSetContext
from resourceset_controller.inputs import Input, InputError
from sluice_api.resourceset import (
    COPY_FROM_ANNOTATION,
    FORCE_ANNOTATION,
    GROUP,
    VERSION,
    ResourceSet,
    ResourceSetInputProvider,
)
from sluice_runtime import gotemplate, yamlloading
from sluice_runtime.describing import describe
from sluice_runtime.informing.watching import Store
from sluice_runtime.kube.discovery import UnknownKind
from sluice_runtime.kube.errors import KubeError, NotFound, is_transient
from sluice_runtime.kube.resources import CONFIG_MAP, SECRET
from sluice_runtime.reconciling.errors import Stalling, Waiting
from sluice_runtime.reconciling.steps import Result, step

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
            if meta.get("namespace") == namespace and selects(selector, meta.get("labels") or {}):
                found.setdefault(meta["name"], obj)
    if missing:
        raise Waiting(
            Reason.DEPENDENCY_NOT_READY,
            f"ResourceSetInputProvider {', '.join(missing)} not found in '{namespace}'",
            requeue_after=30.0,
        )
    return list(found.items())


def selects(selector: Any, labels: dict[str, str]) -> bool:
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


def _provider_ref(kind: str, name: str, namespace: str) -> dict[str, str]:
    """Flux Operator's built-in `inputs.provider`: the object an input set came from; it
    replaces any `provider` the set itself holds."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "name": name, "namespace": namespace}


@step()
async def reconcile_inputs(ctx: ResourceSetContext) -> Result | None:
    spec = ctx.obj.spec
    sources: list[tuple[str, list[Input]]] = []
    if spec.inputs:
        origin = _provider_ref(ResourceSet.KIND, ctx.obj.metadata.name, ctx.obj.namespace)
        sources.append((ctx.obj.metadata.name, [{**i, "provider": origin} for i in spec.inputs]))
    for name, obj in providers_of(ctx.obj, ctx.services.providers):
        provider = ResourceSetInputProvider.from_obj(obj)
        if provider.status.last_exported_revision is None:
            raise Waiting(
                Reason.DEPENDENCY_NOT_READY,
                f"ResourceSetInputProvider {name} has not exported inputs yet",
                requeue_after=30.0,
            )
        origin = _provider_ref(ResourceSetInputProvider.KIND, name, ctx.obj.namespace)
        exported = provider.status.exported_inputs or []
        sources.append((name, [{**i, "provider": origin} for i in exported]))
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
    # One budget for every step's renders; rendering blocks, so it runs off the loop.
    budget = gotemplate.Budget(max_steps=ctx.services.template_max_steps)
    for name, resources, template in stages:
        try:
            built = await yamlloading.off_loop(
                templating.build, resources, template, ctx.input_sets, budget=budget
            )
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
