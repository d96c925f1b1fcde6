"""Kustomization: from a source's artifact to healthy, pruned cluster state.

STEPS, in the order of the contract: spec → gates → source → dependencies →
(a health wait in progress continues here, and ends the reconcile) →
artifact → build (SOPS decryption first, in the build's private copy) →
substitution → target → apply (validation, a server-side dry-run of
everything, then the staged apply) → prune → health → status. Nothing of a
revision is applied unless every object of it passed validation and dry-run.
This module holds the steps up to the build; `applying` the target, apply
and prune (and deletion), `health_checking` the health step.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kustomize_controller import decrypting, reusing
from kustomize_controller.applying import (
    finalize,
    reconcile_apply,
    reconcile_prune,
    reconcile_target,
)
from kustomize_controller.context import Condition, KustomizationContext, Reason, Services
from kustomize_controller.health_checking import reconcile_health, reconcile_health_recheck
from kustomize_controller.specs import health_rules, ignore_rules_by_field, unsupported
from sluice_api.kustomize import Kustomization
from sluice_api.meta import Artifact
from sluice_runtime import building, dependencies, gatekeeping, holding, substituting
from sluice_runtime.artifacts.fetching import ArtifactError, fetch_artifact
from sluice_runtime.conditions import condition_of
from sluice_runtime.controller import requested
from sluice_runtime.informing.watching import Change, Store
from sluice_runtime.kube.expressions import InvalidExpression
from sluice_runtime.kube.ignoring import InvalidSelector
from sluice_runtime.kube.ignoring import validate as validate_ignore_rules
from sluice_runtime.kube.secrets import SecretError, secret_data
from sluice_runtime.reconciling.errors import Stalling, Waiting
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import Result, step

MAX_ARTIFACT_SIZE = 512 * 1024 * 1024

# -- 0. spec ---------------------------------------------------------------------


@step()
async def reconcile_spec(ctx: KustomizationContext) -> Result | None:
    problem = unsupported(ctx.obj)
    if problem is not None:
        raise Stalling(Reason.RECONCILIATION_FAILED, problem)
    # Expressions are compiled before anything is applied: a typo in one is the
    # spec's fault, which no retry fixes.
    try:
        ctx.health_rules = health_rules(ctx.obj)
    except InvalidExpression as error:
        raise Stalling(Reason.RECONCILIATION_FAILED, str(error)) from None
    for field, rules in ignore_rules_by_field(ctx.obj).items():
        try:
            validate_ignore_rules(rules)
        except InvalidSelector as error:
            raise Stalling(Reason.RECONCILIATION_FAILED, f"{field}: {error}") from None
    return None


# -- 1. gates -------------------------------------------------------------------


@step(Condition.APPROVED)
async def reconcile_gates(ctx: KustomizationContext) -> Result | None:
    """A closed gate holds the Kustomization before it looks at its source."""
    gatekeeping.hold_while_closed(
        ctx.obj.spec.gates,
        namespace=ctx.obj.namespace,
        store=ctx.services.gates,
        conditions=ctx.conditions,
        requeue_after=ctx.interval,
    )
    return None


# -- 2. source -------------------------------------------------------------------


@step()
async def reconcile_source(ctx: KustomizationContext) -> Result | None:
    ref = ctx.obj.spec.source_ref
    namespace = ref.namespace or ctx.obj.namespace
    if ctx.services.no_cross_namespace_refs and namespace != ctx.obj.namespace:
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
    ctx.obj.status.last_attempted_revision = ctx.artifact.revision
    ctx.event_metadata["revision"] = ctx.artifact.revision
    if ctx.origin_revision:
        ctx.event_metadata["originRevision"] = ctx.origin_revision
    return None


# -- 3. dependencies --------------------------------------------------------------


@step()
async def reconcile_dependencies(ctx: KustomizationContext) -> Result | None:
    if not ctx.obj.spec.depends_on:
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
    ctx.build_key = _build_key(ctx, artifact.digest)
    if ctx.build_key is not None:
        # Built before from this very artifact and spec: neither the download
        # nor the build would change a byte.
        reused = ctx.services.builds.get(ctx.build_key)
        if reused is not None:
            ctx.objects, ctx.built = reused, True
            return None
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
    if ctx.built:
        return None
    assert ctx.workdir is not None
    decryptor = await _decryptor(ctx)
    try:
        ctx.objects = await building.build(
            ctx.workdir,
            ctx.obj.spec,
            kustomize=ctx.services.kustomize,
            sandbox=ctx.services.sandbox,
            allow_remote_bases=ctx.services.allow_remote_bases,
            max_output=ctx.services.max_build_output,
            max_memory=ctx.services.max_build_memory,
            decrypt=decryptor.decrypt_files if decryptor is not None else None,
        )
    except building.BuildError as error:
        raise ctx.failed(Reason.BUILD_FAILED, str(error)) from None
    except decrypting.DecryptionError as error:
        # Nothing is applied: the build stops here, and its private copy
        # (with whatever was decrypted) goes with the work directory.
        raise ctx.failed(Reason.BUILD_FAILED, f"decryption failed: {error}") from None
    if ctx.build_key is not None:
        ctx.services.builds.put(ctx.build_key, ctx.objects)
    return None


def _build_key(ctx: KustomizationContext, digest: str) -> str | None:
    services = ctx.services
    if services.allow_remote_bases:
        return None  # a remote base's content is not covered by the digest
    flags = f"{services.sandbox}|{services.max_build_output}|{services.max_build_memory}"
    return reusing.build_key(ctx.obj, digest=digest, flags=flags)


async def _decryptor(ctx: KustomizationContext) -> decrypting.Decryptor | None:
    """The SOPS decryptor for spec.decryption: the secretRef's keys, then the controller's."""
    decryption = ctx.obj.spec.decryption
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
            data = await secret_data(ctx.client, ctx.obj.namespace, decryption.secret_ref.name)
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
    post_build = ctx.obj.spec.post_build
    if post_build is None or not substituting.post_build_enabled(post_build):
        return None
    try:
        variables = await substituting.collect(ctx.client, ctx.obj.namespace, post_build)
        ctx.objects = substituting.substitute(
            ctx.objects, variables, always=post_build.substitute_strategy == "Always"
        )
    except substituting.SubstitutionError as error:
        raise ctx.failed(Reason.BUILD_FAILED, f"post-build substitution failed: {error}") from None
    return None


# -- 11. status (Ready's reason is the reconciler's success_reason) ------------------------


@step()
async def reconcile_status(ctx: KustomizationContext) -> Result | None:
    ctx.applied()
    return None


STEPS = (
    reconcile_spec,
    reconcile_gates,
    reconcile_source,
    reconcile_dependencies,
    reconcile_health_recheck,
    reconcile_artifact,
    reconcile_build,
    reconcile_substitution,
    reconcile_target,
    reconcile_apply,
    reconcile_prune,
    reconcile_health,
    reconcile_status,
)


# -- what makes a Kustomization reconcile ---------------------------------------------------


def _followers(change: Change, kustomizations: Store) -> list[str]:
    """The Kustomizations that follow the changed source (suspended ones ignore it)."""
    meta = change.obj["metadata"]
    source = dependencies.source_ref(
        str(change.obj.get("kind")), meta.get("namespace", ""), meta["name"]
    )
    return [
        key
        for key in kustomizations.referencing(dependencies.SOURCE_REF, source)
        if not ((kustomizations.get(key) or {}).get("spec") or {}).get("suspend")
    ]


def _revision(obj: dict[str, Any] | None) -> Any:
    return (((obj or {}).get("status") or {}).get("artifact") or {}).get("revision")


def source_watchers(kustomizations: Store) -> Callable[[Change], list[str]]:
    """Kustomizations to reconcile when a source's artifact revision changes."""

    def mapper(change: Change) -> list[str]:
        if change.kind == "deleted" or _revision(change.old) == _revision(change.new):
            return []
        return _followers(change, kustomizations)

    return mapper


def answers_a_request(change: Change) -> bool:
    """A source's new artifact fetched because someone asked (a webhook's or the
    CLI's requestedAt, handled in the same status write): its Kustomizations go
    ahead of the queue, so the push is applied without waiting behind interval
    reconciles."""
    old = ((change.old or {}).get("status") or {}).get("lastHandledReconcileAt")
    new = ((change.new or {}).get("status") or {}).get("lastHandledReconcileAt")
    return change.kind == "updated" and new is not None and new != old


def announced_requests(kustomizations: Store) -> Callable[[Change], None]:
    """Hold bulk API requests (sluice_runtime.holding) from the moment a source
    Kustomizations follow is asked to reconcile: its new artifact comes as
    requested work here, and the source's own fetch and status write are
    requests the API server serves sooner without ours. The hold ends with
    the requested reconcile, or at once when the source answered without a
    new revision (nothing will come)."""

    def handler(change: Change) -> None:
        if change.kind != "updated":
            return
        if requested(change):
            if _followers(change, kustomizations):
                holding.HOLD.expect()
        elif answers_a_request(change) and _revision(change.old) == _revision(change.new):
            # One expectation for all sources: with several asked at once, the
            # others lose only the wait before their work arrives, not its hold.
            holding.HOLD.answered()

    return handler


def dependent_watchers(kustomizations: Store) -> Callable[[Change], list[str]]:
    """Kustomizations to reconcile when one they depend on becomes ready or applies."""

    def mapper(change: Change) -> list[str]:
        if change.kind != "updated":
            return []

        def state(obj: dict[str, Any] | None) -> tuple[Any, ...]:
            status = (obj or {}).get("status") or {}
            ready = (condition_of(obj or {}) or {}).get("status")
            return (ready, status.get("lastAppliedRevision"), status.get("observedGeneration"))

        if state(change.old) == state(change.new):
            return []
        return dependencies.dependents(change.key, kustomizations)

    return mapper


def reconciler(services: Services) -> Reconciler[KustomizationContext]:
    context = functools.partial(KustomizationContext, services=services)
    return Reconciler(
        model=Kustomization,
        steps=STEPS,
        context=context,
        finalize=finalize,
        success_reason=Reason.RECONCILIATION_SUCCEEDED,
    )
