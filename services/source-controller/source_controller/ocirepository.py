"""OCIRepository: one layer of an OCI artifact, stored as a digest-checked tarball.

STEPS: storage → source → verify → artifact. The source step resolves the ref to a
manifest digest first (one small request); when that digest is the one
already stored, the file is still there and the layer selection and ignore
rules are unchanged, the layer is not downloaded again.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice_api.meta import parse_duration
from sluice_api.source import (
    OCIRepository,
    OCIRepositoryVerification,
    SourceCondition,
    SourceReason,
)
from sluice_runtime import lanes
from sluice_runtime.artifacts.storage import Storage
from sluice_runtime.informing.watching import Store
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.secrets import SecretError, require, secret_data
from sluice_runtime.oci import registry as oci
from sluice_runtime.patterns import InvalidPattern, compile_pattern
from sluice_runtime.reconciling.errors import Stalling, StepError
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import Result, done, step
from source_controller import pulling
from source_controller.refs import InvalidRef, RefNotFound, highest_matching_tag
from source_controller.sources import (
    Limits,
    SourceContext,
    finalize,
    mark_outdated,
    mark_stored,
    reconcile_gates,
    reconcile_storage,
    reconcile_unsupported,
    record_artifact,
    source_reconciler,
)

DEFAULT_TAG = "latest"
HINTS = oci.Hints(
    tls="a plain-HTTP registry needs spec.insecure: true, a private CA spec.certSecretRef",
    credentials="spec.secretRef",
)

_REGISTRY_THREADS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="oci-registry")
"""Blocking registry calls run here, not in asyncio's default executor: a
call that outlives its timeout keeps its thread until requests' own socket
timeout ends it, and a stuck registry must not take the threads the file
server and storage work need. Four bound the damage; further calls queue."""


@dataclass(kw_only=True)
class OCIRepositoryContext(SourceContext[OCIRepository]):
    revision: str = ""
    manifest: oci.Manifest | None = None
    registry: oci.Registry | None = None
    noop: bool = False
    content_checksum: str = ""


@step(SourceCondition.FETCH_FAILED)
async def reconcile_source(ctx: OCIRepositoryContext) -> Result | None:
    spec = ctx.obj.spec
    try:
        url = oci.OCIURL.parse(spec.url)
    except ValueError as error:
        raise Stalling(SourceReason.URL_INVALID, str(error)) from None
    ctx.registry = await _registry(ctx, url)
    registry = ctx.registry
    ref = spec.ref
    timeout = parse_duration(spec.timeout).total_seconds()
    try:
        if ref is not None and ref.digest:
            reference, tag = ref.digest, None
        elif ref is not None and ref.semver:
            tags = await run_bounded(registry.list_tags, timeout=timeout, host=registry.url.host)
            if ref.semver_filter:
                try:
                    keep = compile_pattern(ref.semver_filter, what="spec.ref.semverFilter")
                except InvalidPattern as error:
                    raise Stalling(SourceReason.FAILED, str(error)) from None
                tags = [t for t in tags if keep.search(t)]
            tag = highest_matching_tag(ref.semver, tags)
            reference = tag
        else:
            tag = (ref.tag if ref is not None else None) or DEFAULT_TAG
            reference = tag
        manifest = await run_bounded(
            registry.manifest, reference, timeout=timeout, host=registry.url.host
        )
    except InvalidRef as error:
        raise Stalling(SourceReason.OCI_ARTIFACT_PULL_FAILED, str(error)) from None
    except RefNotFound as error:
        raise _pull_failed(f"{error} in {spec.url}") from None
    except oci.RegistryError as error:
        raise _registry_failure(error) from None

    ctx.manifest = manifest
    ctx.revision = f"{tag}@{manifest.digest}" if tag else manifest.digest
    ctx.event_metadata["revision"] = ctx.revision
    ctx.content_checksum = _content_checksum(ctx)
    artifact = ctx.obj.status.artifact
    if (
        artifact is not None
        and artifact.revision == ctx.revision
        and ctx.obj.status.content_config_checksum == ctx.content_checksum
        and await lanes.to_thread(ctx.storage.exists, artifact.path)
    ):
        ctx.noop = True
        return None
    mark_outdated(ctx, ctx.revision)
    return None


async def run_bounded(fn: Any, *args: Any, timeout: float, host: str) -> Any:
    """Run a blocking registry call in the registry pool; give up after `timeout`.

    The message names the registry: when every pool thread is held by a hung
    one, a call times out in the queue, before it could say where it went."""
    loop = asyncio.get_running_loop()
    call = loop.run_in_executor(lanes.executor(_REGISTRY_THREADS), functools.partial(fn, *args))
    try:
        return await asyncio.wait_for(call, timeout + 5)
    except TimeoutError:
        raise oci.RegistryError(
            f"registry {host}: operation timed out after {timeout:g}s"
        ) from None


async def _registry(ctx: OCIRepositoryContext, url: oci.OCIURL) -> oci.Registry:
    spec = ctx.obj.spec
    namespace = ctx.obj.namespace
    username = password = None
    ca_file: str | None = None
    try:
        if spec.secret_ref is not None:
            name = f"{namespace}/{spec.secret_ref.name}"
            data = await secret_data(ctx.client, namespace, spec.secret_ref.name)
            require(data, ".dockerconfigjson", secret=name)
            try:
                username, password = oci.credentials_for(data[".dockerconfigjson"], url.host)
            except ValueError as error:
                raise SecretError(f"secret '{name}': {error}") from None
            if username is None:
                raise SecretError(f"secret '{name}' has no credentials for registry '{url.host}'")
        if spec.cert_secret_ref is not None:
            name = f"{namespace}/{spec.cert_secret_ref.name}"
            data = await secret_data(ctx.client, namespace, spec.cert_secret_ref.name)
            require(data, "ca.crt", secret=name)
            handle = tempfile.NamedTemporaryFile("w", suffix=".crt", delete=False)  # noqa: SIM115
            ctx.cleanup.callback(Path(handle.name).unlink, missing_ok=True)
            with handle:
                handle.write(data["ca.crt"])
            ca_file = handle.name
    except SecretError as error:
        raise StepError(
            SourceReason.AUTHENTICATION_FAILED, str(error), condition=SourceCondition.FETCH_FAILED
        ) from None
    return oci.Registry(
        url,
        insecure=spec.insecure,
        ca_file=ca_file,
        username=username,
        password=password,
        timeout=parse_duration(spec.timeout).total_seconds(),
        hints=HINTS,
    )


def _pull_failed(message: str) -> StepError:
    return StepError(
        SourceReason.OCI_ARTIFACT_PULL_FAILED, message, condition=SourceCondition.FETCH_FAILED
    )


def _registry_failure(error: oci.RegistryError) -> StepError:
    if error.auth:
        return StepError(
            SourceReason.AUTHENTICATION_FAILED, str(error), condition=SourceCondition.FETCH_FAILED
        )
    return _pull_failed(str(error))


def _content_checksum(ctx: OCIRepositoryContext) -> str:
    spec = ctx.obj.spec
    selector = spec.layer_selector
    config: dict[str, Any] = {
        "ignore": spec.ignore,
        "mediaType": selector.media_type if selector else None,
        "operation": (selector.operation if selector else None) or "extract",
    }
    if spec.verify is not None:
        # New keys or a new provider mean checking again, so the digest is pulled again.
        config["verify"] = spec.verify.model_dump(by_alias=True, exclude_none=True)
    encoded = json.dumps(config, sort_keys=True).encode()
    return "sha256:" + hashlib.sha256(encoded).hexdigest()


@step(SourceCondition.STORAGE_OPERATION_FAILED)
async def reconcile_artifact(ctx: OCIRepositoryContext) -> Result | None:
    repo = ctx.obj
    status = repo.status
    if ctx.noop and status.artifact is not None:
        mark_stored(ctx, ctx.revision)
        return done()
    registry = ctx.registry
    assert ctx.manifest is not None and registry is not None
    layer = _select_layer(ctx)
    digest = str(layer["digest"])
    operation = (
        repo.spec.layer_selector.operation if repo.spec.layer_selector else None
    ) or "extract"
    filename = ctx.manifest.digest.removeprefix("sha256:") + ".tar.gz"
    work = pulling.work_dir(ctx.cleanup)
    timeout = parse_duration(repo.spec.timeout).total_seconds()
    try:
        await run_bounded(
            lambda: registry.download(
                digest, work / pulling.LAYER, max_size=ctx.limits.artifact_max_size
            ),
            timeout=timeout,
            host=registry.url.host,
        )
    except oci.RegistryError as error:
        raise _registry_failure(error) from None
    written = await lanes.to_thread(pulling.store_layer, ctx, filename, work, digest, operation)
    status.content_config_checksum = ctx.content_checksum
    status.observed_ignore = repo.spec.ignore
    status.observed_layer_selector = repo.spec.layer_selector
    annotations = ctx.manifest.body.get("annotations") or {}
    await record_artifact(
        ctx,
        written,
        revision=ctx.revision,
        metadata={str(k): str(v) for k, v in annotations.items()},
        new_artifact_message=(
            f"stored artifact with revision '{ctx.revision}' from '{repo.spec.url}'"
        ),
    )
    return None


def _select_layer(ctx: OCIRepositoryContext) -> dict[str, Any]:
    assert ctx.manifest is not None
    layers = ctx.manifest.layers()
    selector = ctx.obj.spec.layer_selector
    wanted = selector.media_type if selector else None
    for layer in layers:
        if wanted is None or layer.get("mediaType") == wanted:
            return layer
    raise StepError(
        SourceReason.OCI_ARTIFACT_LAYER_OPERATION_FAILED,
        f"no layer with media type '{wanted}' in artifact '{ctx.revision}'"
        if wanted
        else f"artifact '{ctx.revision}' has no layers",
        condition=SourceCondition.FETCH_FAILED,
    )


@step()
async def reconcile_verify(ctx: OCIRepositoryContext) -> Result | None:
    """Check the cosign signature of the resolved digest; a failure keeps the last artifact.

    SourceVerified is set here rather than owned by the step, so that a
    no-op pull (the stored digest was verified when it was stored) keeps it.
    """
    verify = ctx.obj.spec.verify
    if verify is None:
        ctx.conditions.delete(SourceCondition.SOURCE_VERIFIED)
        return None
    refuse_unsupported_verification(verify)
    if ctx.noop:
        return None
    assert ctx.manifest is not None and ctx.registry is not None
    message = await verify_signature(
        ctx.client,
        ctx.obj.namespace,
        verify,
        registry=ctx.registry,
        digest=ctx.manifest.digest,
        revision=ctx.revision,
        timeout=parse_duration(ctx.obj.spec.timeout).total_seconds(),
    )
    ctx.conditions.mark_true(SourceCondition.SOURCE_VERIFIED, SourceReason.SUCCEEDED, message)
    return None


async def verify_signature(
    client: KubeClient,
    namespace: str,
    verify: OCIRepositoryVerification,
    *,
    registry: oci.Registry,
    digest: str,
    revision: str,
    timeout: float,
) -> str:
    """Check the cosign signature of manifest `digest` with the public keys of
    `verify.secretRef`; the SourceVerified message, or a StepError saying why not.

    Shared by OCIRepositories and HelmCharts of OCI HelmRepositories.
    """
    # Imported here: cryptography costs about 8 MiB resident from the moment it
    # loads, and only a source with spec.verify needs it.
    from source_controller import cosigning

    assert verify.secret_ref is not None
    secret = f"{namespace}/{verify.secret_ref.name}"
    try:
        data = await secret_data(client, namespace, verify.secret_ref.name)
        keys = cosigning.public_keys(data)
    except (SecretError, cosigning.CosignError) as error:
        raise _unverified(f"verification keys: {error}") from None
    if not keys:
        raise _unverified(f"verification keys: secret '{secret}' holds no '*.pub' public key")
    failed = f"failed to verify the signature of '{revision}' using provider 'cosign'"
    try:
        signatures = await run_bounded(
            registry.manifest,
            cosigning.signature_tag(digest),
            timeout=timeout,
            host=registry.url.host,
        )
        verified = await run_bounded(
            functools.partial(
                cosigning.verify_signatures,
                signatures.body,
                digest=digest,
                keys=keys,
                read_blob=functools.partial(
                    registry.read_blob, max_size=cosigning.MAX_PAYLOAD_SIZE
                ),
            ),
            timeout=timeout,
            host=registry.url.host,
        )
    except oci.RegistryError as error:
        if error.not_found:
            raise _unverified(f"{failed}: no signature found for '{digest}'") from None
        raise _unverified(f"{failed}: {error}") from None
    except cosigning.CosignError as error:
        raise _unverified(f"{failed}: {error}") from None
    return f"verified signature of revision {revision} with key '{verified.key}'"


def refuse_unsupported_verification(verify: OCIRepositoryVerification) -> None:
    unsupported = None
    if verify.provider == "notation":
        unsupported = "spec.verify.provider 'notation'"
    elif verify.match_oidc_identity:
        unsupported = "keyless cosign verification (spec.verify.matchOIDCIdentity)"
    elif verify.trusted_root_secret_ref is not None:
        unsupported = "spec.verify.trustedRootSecretRef (a self-hosted Sigstore)"
    elif verify.secret_ref is None:
        unsupported = "keyless cosign verification (spec.verify without secretRef)"
    if unsupported is not None:
        raise Stalling(
            SourceReason.VERIFICATION_ERROR,
            f"{unsupported} is not supported by this version of Sluice; verify with cosign "
            "public keys in spec.verify.secretRef. No artifact is produced",
            condition=SourceCondition.SOURCE_VERIFIED,
        )


def _unverified(message: str) -> StepError:
    return StepError(
        SourceReason.VERIFICATION_ERROR, message, condition=SourceCondition.SOURCE_VERIFIED
    )


STEPS = (
    reconcile_storage,
    reconcile_unsupported,
    reconcile_gates,
    reconcile_source,
    reconcile_verify,
    reconcile_artifact,
)


def reconciler(
    storage: Storage, *, gates: Store | None = None, limits: Limits | None = None
) -> Reconciler[OCIRepositoryContext]:
    context = functools.partial(
        OCIRepositoryContext,
        storage=storage,
        gates=gates,
        limits=limits or Limits(),
    )
    return source_reconciler(OCIRepository, context, STEPS, finalize=finalize)
