"""Bucket: the objects of an S3-compatible bucket, stored as a deterministic tarball.

STEPS: storage → unsupported → gates → source → artifact, as for Git.

The source step lists the bucket once (ListObjectsV2, every page) and builds
Flux's index: object key → ETag for every object that is not a "directory"
marker, not the root `.sourceignore` and not ignored by it or by
`spec.ignore`. The revision is Flux's: `sha256:` and the sha256 of the index
written as `key etag\\n` lines in key order. When that revision and the
ignore rules are the ones already archived and the file is still in
storage, nothing else is requested: an unchanged bucket costs one listing
(the no-op fetch of the Git design, for buckets).

Otherwise the artifact step brings this process's copy of the bucket up to
date: it downloads only the objects whose ETag differs from the copy's index
(with If-Match, so an object replaced since the listing fails the fetch
rather than pairing new bytes with an old ETag), deletes the files of
objects that left, and archives the tree as the Git artifact is archived.
The copy lives in a work directory of the process, not in the served
storage; after a restart the first change downloads everything once.

Only static credentials are implemented: `provider: gcp` and `azure`,
`spec.sts` and `spec.serviceAccountName` are refused (Stalled, naming the
field), never silently replaced by another identity. `provider: aws` without
`spec.secretRef` would sign with the controller's own AWS identity (its
environment, IRSA, Pod Identity, the node's role), for any tenant, against
any endpoint the tenant names: refused unless the operator starts the
controller with `--allow-controller-level-workload-identity`.

An empty bucket (or prefix) gives an empty artifact, as in Flux, whose
revision is that of the empty index.
"""

from __future__ import annotations

import asyncio
import functools
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice_api.meta import parse_duration
from sluice_api.source import Bucket, SourceCondition, SourceReason
from sluice_runtime.artifacts.ignoring import IGNORE_FILE, InvalidIgnorePattern
from sluice_runtime.artifacts.storage import Storage
from sluice_runtime.informing.watching import Store
from sluice_runtime.kube.secrets import SecretError, require, secret_data
from sluice_runtime.reconciling.errors import Stalling, StepError
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import Result, done, step
from source_controller.bucketindex import (
    ObjectInfo,
    build_index,
    describe_error,
    index_revision,
    read_state,
    remove_file,
    safe_key,
    write_state,
)
from source_controller.sources import (
    Limits,
    SourceContext,
    mark_outdated,
    mark_stored,
    reconcile_gates,
    reconcile_storage,
    reconcile_unsupported,
    record_artifact,
    source_reconciler,
    write_archive,
)
from source_controller.sources import finalize as finalize_storage

DEFAULT_REGION = "us-east-1"
DOWNLOADS_AT_ONCE = 4
_CHUNK = 1 << 16
_FILES = "files"


@dataclass(kw_only=True)
class BucketContext(SourceContext[Bucket]):
    cache_root: Path
    objects: dict[str, ObjectInfo] | None = None
    index: dict[str, str] | None = None
    revision: str = ""
    noop: bool = False
    client_options: dict[str, Any] | None = None
    controller_identity: bool = False
    """--allow-controller-level-workload-identity: `provider: aws` without a
    secretRef may use the controller's own AWS credentials."""

    @property
    def cache_dir(self) -> Path:
        return self.cache_root / self.obj.namespace / self.obj.metadata.name


@step()
async def reconcile_refused(ctx: BucketContext) -> Result | None:
    """Refuse what this version accepts in the API but cannot do, naming the field."""
    spec = ctx.obj.spec
    unsupported = None
    if spec.provider in ("gcp", "azure"):
        unsupported = f"spec.provider '{spec.provider}'"
    elif spec.sts is not None:
        unsupported = "spec.sts (temporary credentials from a Security Token Service)"
    elif spec.service_account_name:
        unsupported = "spec.serviceAccountName (workload identity)"
    borrowing = spec.provider == "aws" and spec.secret_ref is None
    if unsupported is None and borrowing and not ctx.controller_identity:
        raise Stalling(
            SourceReason.FAILED,
            "spec.provider 'aws' without spec.secretRef would sign requests with the "
            "source-controller's own AWS identity, which this controller does not lend "
            "to objects; give static credentials in spec.secretRef, or start the "
            "controller with --allow-controller-level-workload-identity",
        )
    if unsupported is not None:
        raise Stalling(
            SourceReason.FAILED,
            f"{unsupported} is not supported by this version of Sluice; use provider "
            "'generic' or 'aws' with static credentials in spec.secretRef",
        )
    return None


@step(SourceCondition.FETCH_FAILED)
async def reconcile_source(ctx: BucketContext) -> Result | None:
    spec = ctx.obj.spec
    ctx.client_options = await _client_options(ctx)
    timeout = parse_duration(spec.timeout).total_seconds()
    try:
        async with _client(ctx.client_options) as client:
            objects = await asyncio.wait_for(_list(client, ctx), timeout)
            sourceignore = await asyncio.wait_for(_sourceignore(client, ctx, objects), timeout)
    except TimeoutError:
        raise _bucket_error(ctx, f"listing timed out after {timeout:g}s") from None
    except ValueError as error:
        # botocore refuses an endpoint it cannot parse before any request.
        raise Stalling(
            SourceReason.URL_INVALID, f"spec.endpoint '{spec.endpoint}' is invalid: {error}"
        ) from None
    ctx.objects = objects
    try:
        ctx.index = build_index(objects, spec_ignore=spec.ignore, sourceignore=sourceignore)
    except InvalidIgnorePattern as error:
        raise Stalling(SourceReason.FAILED, str(error)) from None
    if len(ctx.index) > ctx.limits.artifact_max_files:
        raise _bucket_error(
            ctx,
            f"{len(ctx.index)} objects are more than the limit of "
            f"{ctx.limits.artifact_max_files} (--artifact-max-files)",
        )
    ctx.revision = index_revision(ctx.index)
    ctx.event_metadata["revision"] = ctx.revision
    status = ctx.obj.status
    artifact = status.artifact
    if (
        artifact is not None
        and artifact.revision == ctx.revision
        and status.observed_ignore == spec.ignore
        and await asyncio.to_thread(ctx.storage.exists, artifact.path)
    ):
        ctx.noop = True
        return None
    mark_outdated(ctx, ctx.revision)
    return None


async def _client_options(ctx: BucketContext) -> dict[str, Any]:
    """create_client's arguments; secret material goes into temporary files it cleans up."""
    spec = ctx.obj.spec
    namespace = ctx.obj.namespace
    endpoint = spec.endpoint
    if "://" not in endpoint:
        endpoint = f"{'http' if spec.insecure else 'https'}://{endpoint}"
    timeout = parse_duration(spec.timeout).total_seconds()
    config: dict[str, Any] = {
        "s3": {"addressing_style": "path" if spec.provider == "generic" else "auto"},
        "connect_timeout": timeout,
        "read_timeout": timeout,
        "retries": {"max_attempts": 1},
    }
    options: dict[str, Any] = {
        "region_name": spec.region or DEFAULT_REGION,
        "endpoint_url": endpoint,
    }
    try:
        if spec.secret_ref is not None:
            name = f"{namespace}/{spec.secret_ref.name}"
            data = await secret_data(ctx.client, namespace, spec.secret_ref.name)
            require(data, "accesskey", "secretkey", secret=name)
            options["aws_access_key_id"] = data["accesskey"]
            options["aws_secret_access_key"] = data["secretkey"]
        elif spec.provider == "generic":
            from botocore import UNSIGNED  # see _boto_errors: botocore is loaded on first use

            # A generic bucket without a secret is read anonymously, as by
            # Flux's minio client; never with whatever the process holds.
            config["signature_version"] = UNSIGNED
        if spec.cert_secret_ref is not None:
            name = f"{namespace}/{spec.cert_secret_ref.name}"
            data = await secret_data(ctx.client, namespace, spec.cert_secret_ref.name)
            if not data.get("ca.crt") and not (data.get("tls.crt") and data.get("tls.key")):
                raise SecretError(
                    f"secret '{name}' has neither 'ca.crt' nor 'tls.crt' and 'tls.key'"
                )
            if data.get("ca.crt"):
                options["verify"] = _temp_file(ctx, data["ca.crt"], ".crt")
            if data.get("tls.crt") and data.get("tls.key"):
                config["client_cert"] = (
                    _temp_file(ctx, data["tls.crt"], ".crt"),
                    _temp_file(ctx, data["tls.key"], ".key"),
                )
    except SecretError as error:
        raise StepError(
            SourceReason.AUTHENTICATION_FAILED, str(error), condition=SourceCondition.FETCH_FAILED
        ) from None
    from aiobotocore.config import AioConfig

    options["config"] = AioConfig(**config)
    return options


def _boto_errors() -> tuple[type[Exception], ...]:
    """The errors an S3 call raises, imported on first use.

    botocore and aiobotocore cost the source-controller about 5 MiB resident
    (botocore's service models, urllib3, charset tables) from the moment they
    load; only Bucket sources need them, so they load with the first Bucket
    fetch rather than at startup. An `except` clause evaluates this only when
    something was raised.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError)


def _temp_file(ctx: BucketContext, text: str, suffix: str) -> str:
    handle = tempfile.NamedTemporaryFile("w", suffix=suffix, delete=False)  # noqa: SIM115
    ctx.cleanup.callback(Path(handle.name).unlink, missing_ok=True)
    with handle:
        handle.write(text)
    return handle.name


@asynccontextmanager
async def _client(options: dict[str, Any]) -> AsyncIterator[Any]:
    from aiobotocore.session import get_session

    async with get_session().create_client("s3", **options) as client:
        yield client


async def _list(client: Any, ctx: BucketContext) -> dict[str, ObjectInfo]:
    spec = ctx.obj.spec
    objects: dict[str, ObjectInfo] = {}
    total = 0
    arguments: dict[str, Any] = {"Bucket": spec.bucket_name}
    if spec.prefix:
        arguments["Prefix"] = spec.prefix
    try:
        async for page in client.get_paginator("list_objects_v2").paginate(**arguments):
            for item in page.get("Contents") or []:
                key = str(item["Key"])
                if key.endswith("/"):
                    continue
                if not safe_key(key):
                    raise _bucket_error(ctx, f"object key '{key}' is not a safe relative path")
                size = int(item.get("Size") or 0)
                total += size
                objects[key] = ObjectInfo(etag=str(item.get("ETag") or "").strip('"'), size=size)
            if total > ctx.limits.artifact_max_size:
                raise _bucket_error(
                    ctx,
                    f"objects are larger than the limit of {ctx.limits.artifact_max_size} "
                    "bytes (--artifact-max-size)",
                )
    except _boto_errors() as error:
        raise _bucket_error(ctx, f"listing objects failed: {describe_error(error)}") from None
    return objects


async def _sourceignore(
    client: Any, ctx: BucketContext, objects: dict[str, ObjectInfo]
) -> str | None:
    """The root `.sourceignore`, from the process's copy unless its ETag changed."""
    info = objects.get(IGNORE_FILE)
    if info is None:
        return None
    state = await asyncio.to_thread(read_state, ctx.cache_dir)
    cached = ctx.cache_dir / IGNORE_FILE
    if state.get("sourceignore") == info.etag and cached.is_file():
        return cached.read_text(errors="replace")
    await _download(client, ctx, key=IGNORE_FILE, info=info, dest=cached)
    state["sourceignore"] = info.etag
    await asyncio.to_thread(write_state, ctx.cache_dir, state)
    return cached.read_text(errors="replace")


async def _download(
    client: Any, ctx: BucketContext, key: str, info: ObjectInfo, dest: Path
) -> None:
    spec = ctx.obj.spec
    arguments: dict[str, Any] = {"Bucket": spec.bucket_name, "Key": key}
    if info.etag:
        arguments["IfMatch"] = f'"{info.etag}"'
    dest.parent.mkdir(parents=True, exist_ok=True)
    temp = dest.with_name(dest.name + ".part")
    written = 0
    try:
        answer = await client.get_object(**arguments)
        async with answer["Body"] as body:
            with temp.open("wb") as out:
                while chunk := await body.read(_CHUNK):
                    written += len(chunk)
                    if written > ctx.limits.artifact_max_size:
                        raise _bucket_error(
                            ctx,
                            f"object '{key}' is larger than the limit of "
                            f"{ctx.limits.artifact_max_size} bytes (--artifact-max-size)",
                        )
                    out.write(chunk)
        temp.replace(dest)
    except _boto_errors() as error:
        raise _bucket_error(
            ctx, f"fetching object '{key}' failed: {describe_error(error)}"
        ) from None
    finally:
        temp.unlink(missing_ok=True)


def _bucket_error(ctx: BucketContext, message: str) -> StepError:
    spec = ctx.obj.spec
    return StepError(
        SourceReason.BUCKET_OPERATION_FAILED,
        f"bucket '{spec.bucket_name}' at '{spec.endpoint}': {message}",
        condition=SourceCondition.FETCH_FAILED,
    )


@step(SourceCondition.STORAGE_OPERATION_FAILED)
async def reconcile_artifact(ctx: BucketContext) -> Result | None:
    bucket = ctx.obj
    if ctx.noop and bucket.status.artifact is not None:
        mark_stored(ctx, ctx.revision)
        return done()
    assert ctx.index is not None and ctx.objects is not None and ctx.client_options is not None
    files = ctx.cache_dir / _FILES
    # An empty bucket downloads nothing, and archives an empty tree (Flux's empty artifact).
    await asyncio.to_thread(files.mkdir, parents=True, exist_ok=True)
    await _sync(ctx, files)
    filename = ctx.revision.removeprefix("sha256:") + ".tar.gz"
    written = await write_archive(ctx, filename, files, bucket.spec.ignore)
    bucket.status.observed_ignore = bucket.spec.ignore
    await record_artifact(
        ctx,
        written,
        revision=ctx.revision,
        new_artifact_message=(
            f"stored artifact with {len(ctx.index)} fetched files from "
            f"'{bucket.spec.bucket_name}' bucket"
        ),
    )
    return None


async def _sync(ctx: BucketContext, files: Path) -> None:
    """Make `files` hold exactly the index's objects, downloading only changed ones."""
    assert ctx.index is not None and ctx.objects is not None and ctx.client_options is not None
    state = await asyncio.to_thread(read_state, ctx.cache_dir)
    held: dict[str, str] = dict(state.get("index") or {})
    stale = [k for k in held if k not in ctx.index or not (files / k).is_file()]
    for key in stale:
        held.pop(key, None)
        await asyncio.to_thread(remove_file, files, key)
    wanted = [k for k, etag in ctx.index.items() if held.get(k) != etag]
    limit = asyncio.Semaphore(DOWNLOADS_AT_ONCE)
    timeout = parse_duration(ctx.obj.spec.timeout).total_seconds()

    async def fetch(client: Any, key: str) -> None:
        async with limit:
            assert ctx.objects is not None
            await _download(client, ctx, key=key, info=ctx.objects[key], dest=files / key)
            held[key] = ctx.objects[key].etag

    try:
        async with _client(ctx.client_options) as client, asyncio.TaskGroup() as group:
            for key in wanted:
                group.create_task(asyncio.wait_for(fetch(client, key), timeout))
    except* StepError as errors:
        raise errors.exceptions[0] from None
    except* TimeoutError:
        raise _bucket_error(ctx, f"fetching objects timed out after {timeout:g}s") from None
    except* OSError as errors:
        raise StepError(
            SourceReason.CACHE_OPERATION_FAILED,
            f"cannot write fetched objects: {errors.exceptions[0]}",
            condition=SourceCondition.STORAGE_OPERATION_FAILED,
        ) from None
    finally:
        state["index"] = held
        await asyncio.to_thread(write_state, ctx.cache_dir, state)
    ctx.log.debug("bucket objects fetched", fetched=len(wanted), removed=len(stale))


async def finalize(ctx: BucketContext) -> None:
    await finalize_storage(ctx)
    await asyncio.to_thread(shutil.rmtree, ctx.cache_dir, ignore_errors=True)


STEPS = (
    reconcile_storage,
    reconcile_unsupported,
    reconcile_refused,
    reconcile_gates,
    reconcile_source,
    reconcile_artifact,
)


def reconciler(
    storage: Storage,
    *,
    cache_root: Path,
    gates: Store | None = None,
    limits: Limits | None = None,
    controller_identity: bool = False,
) -> Reconciler[BucketContext]:
    context = functools.partial(
        BucketContext,
        storage=storage,
        cache_root=cache_root,
        gates=gates,
        limits=limits or Limits(),
        controller_identity=controller_identity,
    )
    return source_reconciler(Bucket, context, STEPS, finalize=finalize)
