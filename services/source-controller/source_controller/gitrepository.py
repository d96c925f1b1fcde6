"""GitRepository: a Git ref, turned into a digest-checked tarball in storage.

STEPS read top to bottom as Flux's source-controller does it:
storage → source → include → artifact. The source step lists the remote's
refs before anything else and, when the resolved commit is the one already
archived, the file is still in storage and nothing that shapes the content
changed (the content config checksum), ends the fetch there: no clone, no
objects downloaded. That is the no-op fetch of the design note.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sluice_api.meta import Artifact, parse_duration
from sluice_api.source import (
    GitRepository,
    GitRepositoryInclude,
    SourceCondition,
    SourceReason,
)
from sluice_runtime import lanes
from sluice_runtime.artifacts.fetching import ArtifactError, extract_tarball
from sluice_runtime.git import client as gitclient
from sluice_runtime.informing.watching import Change, Index, Store
from sluice_runtime.kube.secrets import SecretError, secret_data
from sluice_runtime.reconciling.errors import Stalling, StepError
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import Result, done, step
from sluice_runtime.redacting import redact_url
from source_controller.gitcontexts import GitRepositoryContext, GitServices
from source_controller.gitverification import reconcile_verify, tag_name
from source_controller.refs import InvalidRef, RefNotFound, resolve
from source_controller.sources import (
    finalize,
    mark_outdated,
    mark_stored,
    reconcile_gates,
    reconcile_storage,
    reconcile_unsupported,
    record_artifact,
    source_reconciler,
    write_archive,
    write_file,
)

# -- step 2 ------------------------------------------------------------------


@step(SourceCondition.FETCH_FAILED)
async def reconcile_source(ctx: GitRepositoryContext) -> Result | None:
    repo = ctx.obj
    spec = repo.spec
    _validate_url(spec.url)
    auth = await _auth(ctx)
    timeout = parse_duration(spec.timeout).total_seconds()

    try:
        refs = await gitclient.ls_remote(spec.url, auth, timeout=timeout)
        resolved = resolve(spec.ref, refs)
    except InvalidRef as error:
        raise Stalling(SourceReason.GIT_OPERATION_FAILED, str(error)) from None
    except RefNotFound as error:
        raise _fetch_failed(
            SourceReason.GIT_OPERATION_FAILED, f"{error} in {redact_url(spec.url)}"
        ) from None
    except gitclient.GitError as error:
        raise _git_failure(error, spec.url) from None
    ctx.resolved = resolved
    # Events of this reconcile name the commit even if a later step fails.
    ctx.event_metadata["revision"] = resolved.revision

    ctx.includes = _included_artifacts(ctx)
    ctx.content_checksum = _content_checksum(ctx)
    artifact = repo.status.artifact
    if (
        artifact is not None
        and _commit_of(artifact.revision) == resolved.commit
        and repo.status.content_config_checksum == ctx.content_checksum
        and await lanes.to_thread(ctx.storage.exists, artifact.path)
    ):
        ctx.noop = True
        ctx.log.debug("no-op fetch: artifact is current", revision=resolved.revision)
        return None

    mark_outdated(ctx, resolved.revision)
    if await _from_cache(ctx, refs):
        return None
    ctx.workdir = Path(ctx.cleanup.enter_context(tempfile.TemporaryDirectory(prefix="git-")))
    try:
        checked_out = await gitclient.checkout(
            spec.url,
            auth,
            dest=ctx.workdir,
            commit=resolved.commit,
            refspec=resolved.refspec,
            depth=resolved.depth,
            recurse_submodules=spec.recurse_submodules,
            timeout=timeout,
            max_size=ctx.limits.checkout_max_size,
            max_files=ctx.limits.artifact_max_files,
            tag=tag_name(ctx) if spec.verify is not None else None,
        )
    except gitclient.GitError as error:
        raise _git_failure(error, spec.url) from None
    ctx.checkout_message = checked_out.message
    ctx.checkout = checked_out
    ctx.log.info(
        "fetched",
        revision=resolved.revision,
        bytes=checked_out.received_bytes,
        objects=checked_out.received_objects,
    )
    return None


async def _from_cache(ctx: GitRepositoryContext, refs: dict[str, str]) -> bool:
    """Whether the commit cache had this artifact (see gitcache for who may share)."""
    cache, spec, resolved = ctx.services.cache, ctx.obj.spec, ctx.resolved
    assert resolved is not None
    if (
        cache is None
        or cache.max_size <= 0
        # Only what this tenant's own ls-remote advertised to it.
        or resolved.commit not in refs.values()
        or spec.include
        or spec.verify is not None
        or spec.recurse_submodules
    ):
        return False
    ctx.cache_key = cache.key(spec.url, resolved.commit, ctx.content_checksum)
    # Held to the end of the reconcile: concurrent GitRepositories of the same
    # commit wait for the first one's tarball instead of cloning alongside it.
    await ctx.cleanup.enter_async_context(cache.building(ctx.cache_key))
    ctx.cached = await lanes.to_thread(cache.lookup, ctx.cache_key)
    if ctx.cached is None:
        return False
    ctx.checkout_message = ctx.cached.message
    ctx.log.info("artifact from the commit cache", revision=resolved.revision)
    return True


def _validate_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https", "ssh") or not parts.hostname:
        raise Stalling(
            SourceReason.URL_INVALID,
            f"URL '{redact_url(url)}' is not valid: expected http://, https:// or ssh:// "
            "with a host",
        )


async def _auth(ctx: GitRepositoryContext) -> gitclient.GitAuth:
    ref = ctx.obj.spec.secret_ref
    if ref is None:
        return gitclient.GitAuth()
    namespace = ctx.obj.namespace
    secret = f"{namespace}/{ref.name}"
    try:
        data = await secret_data(ctx.client, namespace, ref.name)
        return gitclient.auth_from_secret(data, secret=secret)
    except SecretError as error:
        raise _fetch_failed(SourceReason.AUTHENTICATION_FAILED, str(error)) from None


def _fetch_failed(reason: str, message: str) -> StepError:
    return StepError(reason, message, condition=SourceCondition.FETCH_FAILED)


def _git_failure(error: gitclient.GitError, url: str) -> StepError:
    # Status, events, alerts and logs are read by many; a token in the URL is not theirs.
    url = redact_url(url)
    if error.kind == "auth":
        return _fetch_failed(
            SourceReason.AUTHENTICATION_FAILED, f"authentication to {url} failed: {error}"
        )
    return _fetch_failed(SourceReason.GIT_OPERATION_FAILED, f"failed to fetch {url}: {error}")


def _commit_of(revision: str) -> str:
    return revision.rsplit("sha1:", 1)[-1]


def _included_artifacts(ctx: GitRepositoryContext) -> list[tuple[GitRepositoryInclude, Artifact]]:
    """The artifacts of included GitRepositories, from the cache (nothing downloaded)."""
    found = []
    namespace = ctx.obj.metadata.namespace
    for include in ctx.obj.spec.include or []:
        name = include.repository.name
        cached = ctx.services.repositories.get(f"{namespace}/{name}")
        artifact = ((cached or {}).get("status") or {}).get("artifact")
        if cached is None or not artifact:
            reason = "NotFound" if cached is None else "NoArtifact"
            what = "does not exist" if cached is None else "has no artifact yet"
            raise StepError(
                reason,
                f"included GitRepository '{namespace}/{name}' {what}",
                condition=SourceCondition.INCLUDE_UNAVAILABLE,
                requeue_after=ctx.services.include_requeue,
            )
        found.append((include, Artifact.model_validate(artifact)))
    return found


def _content_checksum(ctx: GitRepositoryContext) -> str:
    """What, besides the commit, decides the artifact's bytes."""
    spec = ctx.obj.spec
    config: dict[str, Any] = {
        "ignore": spec.ignore,
        "recurseSubmodules": spec.recurse_submodules,
        "sparseCheckout": sorted(spec.sparse_checkout or []),
        "include": [
            {
                "repository": inc.repository.name,
                "fromPath": inc.from_path or "",
                "toPath": inc.to_path or "",
                "digest": art.digest,
            }
            for inc, art in ctx.includes
        ],
    }
    if spec.verify is not None:
        # A new mode or key secret means checking again, so the commit is fetched again.
        config["verify"] = spec.verify.model_dump(by_alias=True, exclude_none=True)
    encoded = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(encoded).hexdigest()


# -- step 4 ------------------------------------------------------------------


@step(SourceCondition.INCLUDE_UNAVAILABLE)
async def reconcile_include(ctx: GitRepositoryContext) -> Result | None:
    """Copy each included artifact's `fromPath` to `toPath` in the checkout."""
    if ctx.noop or not ctx.includes:
        return None
    assert ctx.workdir is not None
    storage = ctx.storage
    for include, artifact in ctx.includes:
        name = include.repository.name
        unpacked = Path(ctx.cleanup.enter_context(tempfile.TemporaryDirectory(prefix="inc-")))
        try:
            await lanes.to_thread(
                extract_tarball,
                storage.path(artifact.path),
                unpacked,
                max_size=ctx.limits.artifact_max_size,
                max_members=ctx.limits.artifact_max_files,
            )
        except (ArtifactError, OSError) as error:
            raise StepError(
                SourceReason.COPY_FAILED,
                f"included artifact of '{name}' is unusable: {error}",
                condition=SourceCondition.INCLUDE_UNAVAILABLE,
            ) from None
        source = _inside(unpacked, include.from_path or ".", what="fromPath")
        target = _inside(ctx.workdir, include.to_path or name, what="toPath")
        if not source.exists():
            raise Stalling(
                SourceReason.COPY_FAILED,
                f"include '{name}': fromPath '{include.from_path}' does not exist in its artifact",
            )
        await lanes.to_thread(_copy_into, source, target)
    return None


def _inside(root: Path, rel: str, *, what: str) -> Path:
    path = (root / rel).resolve()
    if path != root.resolve() and root.resolve() not in path.parents:
        raise Stalling(
            SourceReason.COPY_FAILED, f"include {what} '{rel}' points outside the artifact"
        )
    return path


def _copy_into(source: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True)
    else:
        shutil.copy2(source, target)


# -- step 5 ------------------------------------------------------------------


@step(SourceCondition.STORAGE_OPERATION_FAILED)
async def reconcile_artifact(ctx: GitRepositoryContext) -> Result | None:
    repo = ctx.obj
    status = repo.status
    resolved = ctx.resolved
    assert resolved is not None
    if ctx.noop and status.artifact is not None:
        mark_stored(ctx, resolved.revision)
        return done()

    filename = f"{resolved.commit}.tar.gz"
    if ctx.cached is not None:
        written = await write_file(ctx, filename, ctx.cached.tarball)
        if written.digest != ctx.cached.digest:
            raise StepError(
                SourceReason.ARCHIVE_OPERATION_FAILED,
                "cached artifact changed while being copied; fetching again",
                condition=SourceCondition.STORAGE_OPERATION_FAILED,
            )
    else:
        assert ctx.workdir is not None
        if repo.spec.sparse_checkout:
            await lanes.to_thread(_keep_only, ctx.workdir, repo.spec.sparse_checkout)
        written = await write_archive(ctx, filename, ctx.workdir, repo.spec.ignore)
        if ctx.cache_key is not None and ctx.services.cache is not None:
            try:
                await lanes.to_thread(
                    ctx.services.cache.put,
                    ctx.cache_key,
                    ctx.storage.path(written.path),
                    digest=written.digest,
                    size=written.size,
                    message=ctx.checkout_message,
                )
            except OSError as error:
                # The artifact is stored; only the sharing is lost.
                ctx.log.warning("commit cache not updated", error=str(error))
    status.content_config_checksum = ctx.content_checksum
    status.observed_ignore = repo.spec.ignore
    status.observed_recurse_submodules = repo.spec.recurse_submodules
    status.observed_include = repo.spec.include
    status.observed_sparse_checkout = repo.spec.sparse_checkout
    status.included_artifacts = [art for _, art in ctx.includes] or None
    await record_artifact(
        ctx,
        written,
        revision=resolved.revision,
        new_artifact_message=f"stored artifact for commit '{ctx.checkout_message}'",
    )
    return None


def _keep_only(root: Path, directories: list[str]) -> None:
    """Sparse checkout: drop everything not under one of `directories`."""
    keep = [Path(d.strip("/")) for d in directories if d.strip("/")]
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        rel = path.relative_to(root)
        if rel.parts and rel.parts[0] == ".git":
            continue
        inside = any(rel == k or k in rel.parents for k in keep)
        ancestor = any(rel in k.parents for k in keep)
        if inside or ancestor:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def includers_of(store: Store) -> Callable[[Change], list[str]]:
    """Which GitRepositories to rebuild when `change` gave one a new artifact."""

    def mapper(change: Change) -> list[str]:
        if change.kind != "updated":
            return []
        old = ((change.old or {}).get("status") or {}).get("artifact") or {}
        new = ((change.new or {}).get("status") or {}).get("artifact") or {}
        if old.get("digest") == new.get("digest"):
            return []
        return store.referencing(INCLUDES, change.key)

    return mapper


def _included(obj: dict[str, Any]) -> list[str]:
    namespace = obj["metadata"].get("namespace", "")
    includes = (obj.get("spec") or {}).get("include") or []
    return [
        f"{namespace}/{inc['repository']['name']}"
        for inc in includes
        if isinstance(inc, dict)
        and isinstance(inc.get("repository"), dict)
        and "name" in inc["repository"]
    ]


INCLUDES = Index("spec.include", _included)
"""GitRepositories by the GitRepositories they include (`namespace/name`)."""


STEPS = (
    reconcile_storage,
    reconcile_unsupported,
    reconcile_gates,
    reconcile_source,
    reconcile_verify,
    reconcile_include,
    reconcile_artifact,
)


def reconciler(services: GitServices) -> Reconciler[GitRepositoryContext]:
    context = functools.partial(
        GitRepositoryContext,
        services=services,
        storage=services.storage,
        gates=services.gates,
        limits=services.limits,
    )
    return source_reconciler(GitRepository, context, STEPS, finalize=finalize)
