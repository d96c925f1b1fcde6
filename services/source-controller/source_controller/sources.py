"""What every source kind does with its artifact, written once.

Each kind (GitRepository, OCIRepository) produces a directory or a file from
its remote; from there on the work is the same: check the stored artifact
is still there, write the new one atomically, point `latest` at it, record
it in status, collect old ones, announce a new revision, and delete
everything when the source is deleted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sluice_api.meta import Artifact, Resource, format_time, parse_duration
from sluice_api.source import SourceCondition, SourceReason
from sluice_runtime import failpoints, gatekeeping, holding, lanes
from sluice_runtime.artifacts.fetching import DEFAULT_MAX_MEMBERS
from sluice_runtime.artifacts.ignoring import IgnoreRules, InvalidIgnorePattern
from sluice_runtime.artifacts.storage import ArtifactFile, ArtifactTooLarge, Storage
from sluice_runtime.informing.watching import Store
from sluice_runtime.reconciling.errors import Stalling, StepError, Waiting
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import (
    ContextFactory,
    ReconcileContext,
    Result,
    Step,
    done,
    step,
)

LATEST = "latest.tar.gz"
MiB = 1 << 20


@dataclass(frozen=True, kw_only=True)
class Limits:
    """How much one source may make this process hold, write or serve.

    A repository or artifact is content its owner controls; without bounds a
    single tenant can fill the storage volume or exhaust memory for all.
    """

    artifact_max_size: int = 512 * MiB
    """Bytes of a stored artifact (`--artifact-max-size`); also bounds an OCI
    layer's download and its unpacked size."""
    artifact_max_files: int = DEFAULT_MAX_MEMBERS
    """Files of a Git checkout, entries of an OCI layer or included artifact
    unpacked (`--artifact-max-files`)."""
    checkout_max_size: int = 1024 * MiB
    """Bytes of a Git checkout, submodules included, and of the packs fetched
    for it (`--git-checkout-max-size`)."""


S = TypeVar("S", bound=Resource[Any, Any])


@dataclass(kw_only=True)
class SourceContext(ReconcileContext[S]):
    """What every source kind's steps share; `S` is the source's model."""

    storage: Storage
    gates: Store | None = None
    """The Gate cache, for sources that list `spec.gates`."""
    limits: Limits = field(default_factory=Limits)

    @property
    def kind(self) -> str:
        return self.obj.KIND.lower()

    def relative_path(self, filename: str) -> str:
        obj = self.obj
        return self.storage.relative_path(self.kind, obj.namespace, obj.metadata.name, filename)


@step(SourceCondition.BLOCKED)
async def reconcile_gates(ctx: SourceContext[Any]) -> Result | None:
    """A closed gate freezes the source at its last artifact (a change freeze)."""
    refs = ctx.obj.spec.gates
    if not refs or ctx.gates is None:
        return None
    closed = gatekeeping.closed_gates(refs, namespace=ctx.obj.namespace, store=ctx.gates)
    if not closed:
        return None
    first = closed[0]
    message = f"gate '{first.key}' {first.why}: no new revision is fetched"
    ctx.conditions.mark_true(SourceCondition.BLOCKED, SourceReason.GATE_CLOSED, message)
    artifact = ctx.obj.status.artifact
    if artifact is None:
        raise Waiting(
            SourceReason.GATE_CLOSED,
            f"{message}, and there is no artifact yet",
            requeue_after=parse_duration(ctx.obj.spec.interval).total_seconds(),
        )
    mark_stored(ctx, artifact.revision)
    return done()


def unsupported_identity(kind: str, spec: Any) -> str | None:
    """Why a Git or OCI source's identity fields cannot be honoured, naming the field.

    `provider` (GitHub App, cloud workload identity) and `serviceAccountName`
    (a service account's cloud identity or pull secrets) decide which
    credentials the fetch presents; ignored, the fetch would go out
    anonymously or with `secretRef` alone and fail (or succeed) for the
    wrong reason. Pure.
    """
    provider = getattr(spec, "provider", None)
    if kind == "GitRepository" and provider not in (None, "generic"):
        what = "GitHub App" if provider == "github" else "workload identity"
        return f"spec.provider '{provider}' ({what} authentication)"
    if kind == "OCIRepository" and provider not in (None, "generic"):
        return f"spec.provider '{provider}' (registry login by workload identity)"
    if kind in ("GitRepository", "OCIRepository") and getattr(spec, "service_account_name", None):
        return "spec.serviceAccountName (the service account's identity or pull secrets)"
    return None


@step()
async def reconcile_unsupported(ctx: SourceContext[Any]) -> Result | None:
    """Refuse fields this version accepts in the API but does not implement.

    Ignoring them would be worse than failing: `proxySecretRef` ignored
    sends traffic the network policy meant for the proxy straight out. The
    source stalls until the field is removed, and no artifact is produced.
    """
    spec = ctx.obj.spec
    if getattr(spec, "proxy_secret_ref", None) is not None:
        raise Stalling(
            SourceReason.FAILED,
            "spec.proxySecretRef is not supported by this version of Sluice: the source "
            "would be fetched without the proxy; remove it or allow direct access",
        )
    identity = unsupported_identity(ctx.obj.KIND, spec)
    if identity is not None:
        raise Stalling(
            SourceReason.FAILED,
            f"{identity} is not supported by this version of Sluice; use static "
            "credentials in spec.secretRef",
        )
    return None


@step()
async def reconcile_storage(ctx: SourceContext[Any]) -> Result | None:
    """Forget an artifact whose file vanished, collect old files, and keep URLs on the
    advertised address."""
    status = ctx.obj.status
    storage = ctx.storage
    if status.artifact is None:
        return None
    if not await lanes.to_thread(_stored_and_collected, ctx, status.artifact.path):
        ctx.log.info("artifact file missing from storage", path=status.artifact.path)
        status.artifact = None
        status.url = None
        ctx.conditions.delete(SourceCondition.ARTIFACT_IN_STORAGE)
        return None
    status.artifact.url = storage.url(status.artifact.path)
    status.url = storage.url(latest(status.artifact.path))
    return None


def _stored_and_collected(ctx: SourceContext[Any], rel: str) -> bool:
    """Whether `rel` is in storage; if so, the object's garbage collected around it.

    Collected on every reconcile, as Flux's reconcileStorage does, not only when a
    new artifact is written: a write killed between its bytes and its rename
    leaves a temporary file that only a collection past `retention_ttl` removes,
    and a source with no new revision would otherwise keep it for good (found by
    the chaos suite's `storage.artifact.mid-write` kill).
    """
    if not ctx.storage.exists(rel):
        return False
    obj = ctx.obj
    ctx.storage.garbage_collect(ctx.kind, obj.namespace, obj.metadata.name, keep=[rel])
    return True


def latest(rel: str) -> str:
    return rel.rsplit("/", 1)[0] + "/" + LATEST


def ignore_rules(root: Path, spec_ignore: str | None) -> IgnoreRules:
    try:
        return IgnoreRules.load(root, spec_ignore=spec_ignore)
    except InvalidIgnorePattern as error:
        raise Stalling(SourceReason.FAILED, str(error)) from None


async def write_archive(
    ctx: SourceContext[Any], filename: str, src: Path, spec_ignore: str | None
) -> ArtifactFile:
    return await lanes.to_thread(archive, ctx, filename, src, spec_ignore)


def archive(
    ctx: SourceContext[Any], filename: str, src: Path, spec_ignore: str | None
) -> ArtifactFile:
    """`write_archive` in the calling thread: the ignore rules read and the tarball written
    in one hop, as a kind's own blocking work can do in the hop it already takes."""
    rel = ctx.relative_path(filename)
    ignore = ignore_rules(src, spec_ignore)
    limit = ctx.limits.artifact_max_size
    try:
        return ctx.storage.write_archive(rel, src, ignore, max_size=limit, linked=True)
    except ArtifactTooLarge:
        raise _too_large(limit) from None
    except OSError as error:
        raise _storage_failed(SourceReason.ARCHIVE_OPERATION_FAILED, error) from None


async def write_file(ctx: SourceContext[Any], filename: str, src: Path) -> ArtifactFile:
    return await lanes.to_thread(copy_file, ctx, filename, src)


def copy_file(ctx: SourceContext[Any], filename: str, src: Path) -> ArtifactFile:
    """`write_file` in the calling thread."""
    limit = ctx.limits.artifact_max_size
    try:
        rel = ctx.relative_path(filename)
        return ctx.storage.write_file(rel, src, max_size=limit, linked=True)
    except ArtifactTooLarge:
        raise _too_large(limit) from None
    except OSError as error:
        raise _storage_failed(SourceReason.ARCHIVE_OPERATION_FAILED, error) from None


def _too_large(limit: int) -> StepError:
    # Retried like any failure: a later revision may fit again. The last
    # good artifact stays in status and in storage meanwhile.
    return StepError(
        SourceReason.FAILED,
        f"artifact is larger than the limit of {limit} bytes (--artifact-max-size); "
        "the last artifact is still served",
        condition=SourceCondition.STORAGE_OPERATION_FAILED,
    )


def _storage_failed(reason: SourceReason, error: OSError) -> StepError:
    # Flux's reasons for the same storage operations (ArchiveOperationFailed,
    # SymlinkUpdateFailed): alerts and dashboards match on them.
    return StepError(
        reason,
        f"failed to store artifact: {error}",
        condition=SourceCondition.STORAGE_OPERATION_FAILED,
    )


async def record_artifact(
    ctx: SourceContext[Any],
    written: ArtifactFile,
    *,
    revision: str,
    metadata: dict[str, str] | None = None,
    new_artifact_message: str,
) -> None:
    """Make `written` the served artifact: latest link, status, GC, event."""
    storage = ctx.storage
    try:
        collect_error = await lanes.to_thread(_link_and_collect, ctx, written.path)
    except OSError as error:
        raise _storage_failed(SourceReason.SYMLINK_UPDATE_FAILED, error) from None
    status: Any = ctx.obj.status
    previous = status.artifact
    status.artifact = Artifact(
        path=written.path,
        url=storage.url(written.path),
        revision=revision,
        digest=written.digest,
        last_update_time=format_time(datetime.now(UTC), fraction="none"),
        size=written.size,
        metadata=metadata or None,
    )
    status.url = storage.url(latest(written.path))
    if collect_error is not None:
        raise collect_error
    mark_stored(ctx, revision)
    if previous is None or previous.revision != revision:
        ctx.events.normal("NewArtifact", new_artifact_message, metadata=ctx.event_metadata)
        ctx.success_announced = True
        if lanes.is_requested():
            # Its consumers apply it as requested work next: bulk fetches and status
            # writes of ours would compete with their requests (holding.py).
            holding.HOLD.followed()
        failpoints.hit("source.status.before-patch")


def _link_and_collect(ctx: SourceContext[Any], rel: str) -> OSError | None:
    """Point `latest` at `rel` (its OSError raised), then collect old files (its OSError
    returned, raised once status names the new artifact): one hop to a thread for both,
    each hop a wake-up of the event loop that a thousand sources pay."""
    ctx.storage.set_latest(rel)
    try:
        ctx.storage.garbage_collect(ctx.kind, ctx.obj.namespace, ctx.obj.metadata.name, keep=[rel])
    except OSError as error:
        return error
    return None


def mark_stored(ctx: SourceContext[Any], revision: str) -> None:
    message = f"stored artifact for revision '{revision}'"
    ctx.conditions.mark_true(SourceCondition.ARTIFACT_IN_STORAGE, SourceReason.SUCCEEDED, message)
    ctx.conditions.delete(SourceCondition.ARTIFACT_OUTDATED)
    ctx.ready_message = message


def mark_outdated(ctx: SourceContext[Any], revision: str) -> None:
    artifact = ctx.obj.status.artifact
    if artifact is not None and artifact.revision != revision:
        ctx.conditions.mark_true(
            SourceCondition.ARTIFACT_OUTDATED,
            SourceReason.NEW_REVISION,
            f"new upstream revision '{revision}'",
        )


async def finalize(ctx: SourceContext[Any]) -> None:
    await lanes.to_thread(
        ctx.storage.remove_all, ctx.kind, ctx.obj.namespace, ctx.obj.metadata.name
    )


NEGATIVE_CONDITIONS = (
    SourceCondition.FETCH_FAILED,
    SourceCondition.INCLUDE_UNAVAILABLE,
    SourceCondition.STORAGE_OPERATION_FAILED,
    SourceCondition.BUILD_FAILED,
    SourceCondition.ARTIFACT_OUTDATED,
)


SC = TypeVar("SC", bound=SourceContext[Any])


def source_reconciler(
    model: type[Resource[Any, Any]],
    context: ContextFactory[SC],
    steps: Sequence[Step[SC]],
    *,
    finalize: Callable[[SC], Awaitable[None]] = finalize,
) -> Reconciler[SC]:
    """A source kind's Reconciler: every source kind shares the negative conditions
    (FetchFailed, ...) and, unless it keeps more than its artifacts, the finalizer."""
    return Reconciler(
        model=model,
        steps=steps,
        context=context,
        negative_conditions=NEGATIVE_CONDITIONS,
        finalize=finalize,
        # The steps only write storage, which `finalize` removes: the
        # finalizer's round trip runs beside the fetch (issue 19).
        finalizer_beside_steps=True,
    )
