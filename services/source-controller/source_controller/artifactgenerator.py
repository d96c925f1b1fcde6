"""ArtifactGenerator: ExternalArtifacts composed from the artifacts of other sources.

Flux runs this in its source-watcher; here it is a kind of the
source-controller, which already holds every source artifact in its storage,
so a generator reads them from disk instead of downloading them.

STEPS: validate → sources → generate → prune.

- validate: aliases and artifact names unique, every `@alias` known, a
  source in another namespace only without `--no-cross-namespace-refs`
  (else Stalled, AccessDenied, as in Flux), only
  source kinds whose artifacts live in this storage (GitRepository,
  OCIRepository, Bucket, ExternalArtifact); anything else is Stalled
  (ValidationFailed), naming it.
- sources: each source must be Ready with an artifact; its tarball is
  unpacked (checked) into the work directory. The digest of all source
  digests is compared with `status.observedSourcesDigest`: unchanged sources
  and spec, with every generated file still stored, end the reconcile.
- generate: for each `spec.artifacts` entry the copy operations build a
  staging tree (generating.py), archived deterministically as every source
  is, at `externalartifact/<ns>/<name>/<dirhash>.tar.gz` (Flux's layout).
  The ExternalArtifact gets Flux's revision, `latest@<sha256 of the tarball>`,
  or the revision of the source `revision: "@alias"` names; `originRevision`
  records that source's origin (its Git revision) in the artifact metadata.
  The ExternalArtifact is created (spec.sourceRef → the generator) or its
  status updated, Ready=True.
- prune: ExternalArtifacts of the previous inventory that left the spec are
  deleted with their files; deleting the generator deletes them all. An
  ExternalArtifact deleted or changed by someone else is generated again.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sluice_api.extensions import (
    ORIGIN_REVISION_ANNOTATION,
    RECONCILE_ANNOTATION,
    ArtifactGenerator,
    ExternalArtifactReference,
    GeneratorReason,
    OutputArtifact,
)
from sluice_api.meta import Artifact
from sluice_runtime.artifacts.fetching import ArtifactError, extract_tarball
from sluice_runtime.artifacts.ignoring import IgnoreRules
from sluice_runtime.artifacts.storage import ArtifactTooLarge, Storage
from sluice_runtime.informing.watching import Change, Store
from sluice_runtime.reconciling.errors import Stalling, StepError, Waiting
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import ReconcileContext, Result, done, step
from source_controller import externalartifacts, generating, globbing
from source_controller.externalartifacts import STORAGE_KIND
from source_controller.sources import Limits

SOURCE_KINDS = ("GitRepository", "OCIRepository", "Bucket", "ExternalArtifact")
"""Kinds whose artifacts this storage holds (an ExternalArtifact only when a
generator of this controller made it)."""
VALIDATION_FAILED = GeneratorReason.VALIDATION_FAILED
ACCESS_DENIED = GeneratorReason.ACCESS_DENIED
SOURCE_FETCH_FAILED = GeneratorReason.SOURCE_FETCH_FAILED
BUILD_FAILED = GeneratorReason.BUILD_FAILED
RECONCILIATION_DISABLED = GeneratorReason.RECONCILIATION_DISABLED
INTERVAL = 3600.0
"""Flux's generators are looked at again every hour; changes of their
sources trigger them at once."""
_SOURCE_WAIT = 10.0


@dataclass(frozen=True)
class FetchedSource:
    alias: str
    kind: str
    key: str
    artifact: Artifact
    root: Path


@dataclass(kw_only=True)
class GeneratorContext(ReconcileContext[ArtifactGenerator]):
    storage: Storage
    stores: dict[str, Store]
    limits: Limits
    no_cross_namespace_refs: bool = False
    workdir: Path | None = None
    sources: dict[str, FetchedSource] = field(default_factory=dict)
    sources_digest: str = ""


def _invalid(message: str) -> Stalling:
    return Stalling(VALIDATION_FAILED, message)


@step()
async def reconcile_disabled(ctx: GeneratorContext) -> Result | None:
    """The reconcile annotation set to `disabled` stops the generator (as Flux's)."""
    annotations = ctx.obj.metadata.annotations or {}
    if annotations.get(RECONCILE_ANNOTATION, "").lower() == "disabled":
        raise Waiting(
            RECONCILIATION_DISABLED,
            f"reconciliation is disabled by the {RECONCILE_ANNOTATION} annotation",
            requeue_after=None,
        )
    return None


@step()
async def reconcile_validate(ctx: GeneratorContext) -> Result | None:
    spec = ctx.obj.spec
    aliases: dict[str, str] = {}
    for source in spec.sources:
        if source.alias in aliases:
            raise _invalid(f"duplicate source alias '{source.alias}'")
        if source.kind not in SOURCE_KINDS:
            raise _invalid(
                f"source '{source.alias}': kind {source.kind} is not supported by this version "
                f"of Sluice (supported: {', '.join(SOURCE_KINDS)})"
            )
        namespace = source.namespace or ctx.obj.namespace
        if ctx.no_cross_namespace_refs and namespace != ctx.obj.namespace:
            # A tenant's generator must not copy another tenant's source.
            raise Stalling(
                ACCESS_DENIED,
                f"source '{source.alias}': {source.kind} '{namespace}/{source.name}' is in "
                "another namespace, and cross-namespace references are disabled "
                "(--no-cross-namespace-refs)",
            )
        aliases[source.alias] = source.kind
    names: set[str] = set()
    for output in spec.artifacts:
        if output.name in names:
            raise _invalid(f"duplicate artifact name '{output.name}'")
        names.add(output.name)
        for field_name, ref in (
            ("revision", output.revision),
            ("originRevision", output.origin_revision),
        ):
            if ref and ref.removeprefix("@") not in aliases:
                raise _invalid(
                    f"artifact '{output.name}': {field_name} '{ref}' names no source alias"
                )
        for operation in output.copy_:
            try:
                alias, _ = generating.parse_source(operation.from_)
                generating.parse_destination(operation.to)
                globbing.Excluder(tuple(operation.exclude or ()))
            except generating.CopyError as error:
                raise _invalid(f"artifact '{output.name}': {error}") from None
            if alias not in aliases:
                raise _invalid(
                    f"artifact '{output.name}': copy from '{operation.from_}' names no source alias"
                )
    return None


@step()
async def reconcile_sources(ctx: GeneratorContext) -> Result | None:
    """Resolve every source's artifact; unpack them only when something changed."""
    generator = ctx.obj
    resolved: list[tuple[str, str, str, Artifact]] = []
    for ref in generator.spec.sources:
        namespace = ref.namespace or ctx.obj.namespace
        key = f"{namespace}/{ref.name}"
        raw = ctx.stores[ref.kind].get(key)
        described = f"{ref.kind} '{key}'"
        if raw is None:
            raise Waiting(
                SOURCE_FETCH_FAILED, f"source {described} not found", requeue_after=_SOURCE_WAIT
            )
        artifact_raw = (raw.get("status") or {}).get("artifact")
        if not artifact_raw:
            raise Waiting(
                SOURCE_FETCH_FAILED,
                f"source {described} has no artifact yet",
                requeue_after=_SOURCE_WAIT,
            )
        resolved.append((ref.alias, ref.kind, key, Artifact.model_validate(artifact_raw)))
    lines = "".join(f"{alias} {kind} {key} {a.digest}\n" for alias, kind, key, a in resolved)
    ctx.sources_digest = "sha256:" + hashlib.sha256(lines.encode()).hexdigest()
    status = generator.status
    if (
        status.observed_sources_digest == ctx.sources_digest
        and status.observed_generation == generator.metadata.generation
        and status.inventory is not None
        and await asyncio.to_thread(_inventory_stored, ctx, status.inventory)
        and len(_generated(ctx, {ref.name: ref for ref in status.inventory}))
        == len(status.inventory)
    ):
        # Same sources, same spec, everything still published: nothing to unpack.
        ctx.ready_message = _ready_message(status.inventory)
        return done()
    ctx.workdir = Path(ctx.cleanup.enter_context(tempfile.TemporaryDirectory(prefix="generator-")))
    for alias, kind, key, artifact in resolved:
        root = ctx.workdir / "sources" / alias
        try:
            await asyncio.to_thread(
                extract_tarball,
                ctx.storage.path(artifact.path),
                root,
                max_size=ctx.limits.artifact_max_size,
                max_members=ctx.limits.artifact_max_files,
            )
        except (ArtifactError, OSError, ValueError) as error:
            raise StepError(
                SOURCE_FETCH_FAILED,
                f"cannot read the artifact of source {kind} '{key}': {error}",
            ) from None
        ctx.sources[alias] = FetchedSource(
            alias=alias, kind=kind, key=key, artifact=artifact, root=root
        )
    return None


def _inventory_stored(ctx: GeneratorContext, inventory: list[ExternalArtifactReference]) -> bool:
    """Every generated file still in storage, every ExternalArtifact still serving it."""
    published = ctx.stores["ExternalArtifact"]
    for ref in inventory:
        rel = ctx.storage.relative_path(STORAGE_KIND, ref.namespace, ref.name, ref.filename)
        current = published.get(f"{ref.namespace}/{ref.name}") or {}
        artifact = (current.get("status") or {}).get("artifact") or {}
        if artifact.get("digest") != ref.digest or not ctx.storage.exists(rel):
            return False
    return True


def _ready_message(inventory: list[ExternalArtifactReference]) -> str:
    return f"reconciliation succeeded, generated {len(inventory)} artifact(s)"


@step()
async def reconcile_generate(ctx: GeneratorContext) -> Result | None:
    generator = ctx.obj
    previous = {ref.name: ref for ref in generator.status.inventory or []}
    inventory: list[ExternalArtifactReference] = []
    for output in generator.spec.artifacts:
        ref = await _generate(ctx, output)
        inventory.append(ref)
        old = previous.get(output.name)
        if old is None or old.digest != ref.digest:
            ctx.events.normal(
                "NewArtifact",
                f"generated ExternalArtifact '{ref.namespace}/{ref.name}' "
                f"with digest '{ref.digest}'",
                metadata=ctx.event_metadata,
            )
    kept = {ref.name for ref in inventory}
    await _prune(ctx, [ref for name, ref in _generated(ctx, previous).items() if name not in kept])
    generator.status.inventory = inventory
    generator.status.observed_sources_digest = ctx.sources_digest
    ctx.ready_message = _ready_message(inventory)
    return None


async def _generate(ctx: GeneratorContext, output: OutputArtifact) -> ExternalArtifactReference:
    assert ctx.workdir is not None
    staging = ctx.workdir / "artifacts" / output.name
    staging.mkdir(parents=True)
    copier = generating.Copier(
        sources={alias: source.root for alias, source in ctx.sources.items()},
        staging=staging,
        budget=generating.Budget(
            max_size=ctx.limits.artifact_max_size, max_files=ctx.limits.artifact_max_files
        ),
    )
    try:
        for operation in output.copy_:
            await asyncio.to_thread(
                copier.apply,
                generating.Operation(
                    source=operation.from_,
                    to=operation.to,
                    exclude=tuple(operation.exclude or ()),
                    strategy=operation.strategy or "Overwrite",
                    optional=bool(operation.optional),
                ),
            )
        filename = await asyncio.to_thread(generating.content_hash, staging, output.name)
    except generating.CopyError as error:
        raise StepError(BUILD_FAILED, f"artifact '{output.name}': {error}") from None
    filename += ".tar.gz"
    namespace = ctx.obj.namespace
    rel = ctx.storage.relative_path(STORAGE_KIND, namespace, output.name, filename)
    try:
        ignore = await asyncio.to_thread(IgnoreRules.load, staging, spec_ignore=None)
        written = await asyncio.to_thread(
            ctx.storage.write_archive,
            rel,
            staging,
            ignore,
            max_size=ctx.limits.artifact_max_size,
        )
        await asyncio.to_thread(ctx.storage.set_latest, written.path)
        await asyncio.to_thread(
            ctx.storage.garbage_collect, STORAGE_KIND, namespace, output.name, keep=[written.path]
        )
    except ArtifactTooLarge:
        raise StepError(
            BUILD_FAILED,
            f"artifact '{output.name}' is larger than the limit of "
            f"{ctx.limits.artifact_max_size} bytes (--artifact-max-size)",
        ) from None
    except OSError as error:
        raise StepError(BUILD_FAILED, f"cannot store artifact '{output.name}': {error}") from None
    revision = f"latest@{written.digest}"
    if output.revision:
        revision = ctx.sources[output.revision.removeprefix("@")].artifact.revision
    metadata = None
    if output.origin_revision:
        origin = _origin_revision(ctx.sources[output.origin_revision.removeprefix("@")])
        if origin:
            metadata = {ORIGIN_REVISION_ANNOTATION: origin}
    artifact = Artifact(
        path=written.path,
        url=ctx.storage.url(written.path),
        revision=revision,
        digest=written.digest,
        last_update_time=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        size=written.size,
        metadata=metadata,
    )
    await externalartifacts.publish(ctx.client, ctx.obj, output.name, artifact)
    return ExternalArtifactReference(
        name=output.name, namespace=namespace, digest=written.digest, filename=filename
    )


def _origin_revision(source: FetchedSource) -> str | None:
    """A Git source's revision is its origin; other sources carry one in their metadata."""
    if source.kind == "GitRepository":
        return source.artifact.revision
    return (source.artifact.metadata or {}).get(ORIGIN_REVISION_ANNOTATION)


def _generated(
    ctx: GeneratorContext, inventory: dict[str, ExternalArtifactReference]
) -> dict[str, ExternalArtifactReference]:
    return externalartifacts.generated(ctx.stores["ExternalArtifact"], ctx.obj, inventory)


async def _prune(ctx: GeneratorContext, gone: list[ExternalArtifactReference]) -> None:
    await externalartifacts.prune(ctx.client, ctx.storage, ctx.obj, gone, log=ctx.log)


async def finalize(ctx: GeneratorContext) -> None:
    inventory = {ref.name: ref for ref in ctx.obj.status.inventory or []}
    await _prune(ctx, list(_generated(ctx, inventory).values()))


STEPS = (reconcile_disabled, reconcile_validate, reconcile_sources, reconcile_generate)


def generators_of(store: Store, kind: str) -> Callable[[Change], list[str]]:
    """Which generators to run again when a source of `kind` got a new artifact."""

    def mapper(change: Change) -> list[str]:
        old = ((change.old or {}).get("status") or {}).get("artifact") or {}
        new = ((change.new or {}).get("status") or {}).get("artifact") or {}
        if change.kind == "updated" and old.get("digest") == new.get("digest"):
            return []
        namespace = change.obj["metadata"].get("namespace")
        name = change.obj["metadata"]["name"]
        keys = []
        for generator in store.values():
            meta = generator["metadata"]
            for source in (generator.get("spec") or {}).get("sources") or []:
                if (
                    source.get("kind") == kind
                    and source.get("name") == name
                    and (source.get("namespace") or meta.get("namespace")) == namespace
                ):
                    keys.append(f"{meta.get('namespace')}/{meta['name']}")
                    break
        return keys

    return mapper


def owners_of(change: Change) -> list[str]:
    """The generator of an ExternalArtifact that was deleted or changed by someone else."""
    if change.kind == "updated":
        old = ((change.old or {}).get("status") or {}).get("artifact") or {}
        new = ((change.new or {}).get("status") or {}).get("artifact") or {}
        if old.get("digest") == new.get("digest"):
            return []
    source_ref = (change.obj.get("spec") or {}).get("sourceRef") or {}
    if source_ref.get("kind") != ArtifactGenerator.KIND or not source_ref.get("name"):
        return []
    namespace = source_ref.get("namespace") or change.obj["metadata"].get("namespace")
    return [f"{namespace}/{source_ref['name']}"]


def reconciler(
    storage: Storage,
    *,
    stores: dict[str, Store],
    limits: Limits | None = None,
    no_cross_namespace_refs: bool = False,
) -> Reconciler[GeneratorContext]:
    context = functools.partial(
        GeneratorContext,
        storage=storage,
        stores=stores,
        limits=limits or Limits(),
        no_cross_namespace_refs=no_cross_namespace_refs,
    )

    return Reconciler(
        model=ArtifactGenerator,
        steps=STEPS,
        context=context,
        finalize=finalize,
        default_interval=INTERVAL,
    )
