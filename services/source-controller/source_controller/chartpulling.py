"""Pulling a chart from a HelmRepository: its index (`type: default`) or an OCI registry.

- `type: default`: the newest chart version in the index matching
  `spec.version` (a semver range) is downloaded, digest-checked against the
  index when the index gives one, and stored as is; revision = chart
  version. The index is parsed through the shared `INDEX_CACHE`.
- `type: oci`: the chart is the repository `<url>/<chart>`; an exact
  `spec.version` is its tag (`+` written `_`, as `helm push` does), a range
  picks the newest matching tag. The chart layer is pulled with the
  runtime's bounded registry client, digest-checked, and stored as is;
  revision = chart version. Credentials: `secretRef` with
  `username`/`password` or `.dockerconfigjson`, `certSecretRef` `ca.crt`.
  `spec.verify`: the chart manifest's cosign signature is checked before the
  layer is downloaded; a chart that fails keeps the last artifact.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import tempfile
from pathlib import Path

from sluice_api.meta import parse_duration
from sluice_api.source import HelmRepository, SourceCondition, SourceReason
from sluice_runtime import yamlloading
from sluice_runtime.kube.secrets import SecretError, require, secret_data
from sluice_runtime.oci import registry as oci
from sluice_runtime.reconciling.errors import Stalling, StepError, Waiting
from sluice_runtime.redacting import redact_url
from sluice_runtime.versions import InvalidRange, parse_version
from source_controller.charts import (
    SOURCE_WAIT,
    HelmChartContext,
    already_stored,
    pull_error,
    repackage_with_values,
    select_version,
    source_of,
)
from source_controller.helmrepository import (
    INDEX_CACHE,
    FetchError,
    InvalidIndex,
    chart_url,
    chart_versions,
    credentials,
    fetch,
    index_limits,
    same_host,
)
from source_controller.ocirepository import run_bounded, verify_signature
from source_controller.sources import mark_outdated

HELM_CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
OCI_HINTS = oci.Hints(
    tls="a plain-HTTP registry needs the HelmRepository's spec.insecure: true",
    credentials="the HelmRepository's spec.secretRef",
)


async def from_repository(ctx: HelmChartContext) -> None:
    spec = ctx.obj.spec
    raw = source_of(ctx, ctx.stores.helm_repositories)
    repo = HelmRepository.from_obj(raw)
    if repo.spec.type == "oci":
        await from_oci(ctx, repo)
        return
    if spec.verify is not None:
        raise unverifiable("a chart from a HelmRepository of type 'default'")
    artifact = repo.status.artifact
    if artifact is None or not await asyncio.to_thread(ctx.storage.exists, artifact.path):
        raise Waiting(
            SourceReason.FAILED,
            f"HelmRepository '{ctx.obj.namespace}/{repo.metadata.name}' has no index artifact yet",
            requeue_after=SOURCE_WAIT,
        )
    path = ctx.storage.path(artifact.path)
    try:
        index = await yamlloading.off_loop(
            INDEX_CACHE.get,
            artifact.digest or artifact.revision,
            path.read_bytes,
            limits=index_limits(ctx.index_max_size),
        )
        entries = chart_versions(index, spec.chart)
    except (InvalidIndex, OSError) as error:
        raise pull_error(f"cannot read the index of '{repo.metadata.name}': {error}") from None
    if not entries:
        raise pull_error(f"chart '{spec.chart}' not found in {redact_url(repo.spec.url)}")
    try:
        entry = select_version(entries, spec.version)
    except InvalidRange as error:
        raise Stalling(SourceReason.INVALID_CHART_REFERENCE, str(error)) from None
    except LookupError as error:
        raise pull_error(f"chart '{spec.chart}': {error}") from None
    version = str(entry["version"])
    if already_stored(ctx, version, source_revision=artifact.revision):
        return
    mark_outdated(ctx, version)
    urls = entry.get("urls") or []
    if not isinstance(urls, list) or not urls:
        raise pull_error(f"chart '{spec.chart}' version {version} has no URL in the index")
    url = chart_url(repo.spec.url, str(urls[0]))
    work = Path(ctx.cleanup.enter_context(tempfile.TemporaryDirectory(prefix="helmchart-")))
    try:
        creds = await credentials(ctx.client, ctx.obj.namespace, repo.spec, tmp=work)
    except SecretError as error:
        raise StepError(
            SourceReason.AUTHENTICATION_FAILED, str(error), condition=SourceCondition.FETCH_FAILED
        ) from None
    timeout = repository_timeout(repo)
    try:
        fetched = await fetch(
            url,
            creds=creds,
            # Credentials go to another host only when the repository says so.
            send_auth=repo.spec.pass_credentials or same_host(url, repo.spec.url),
            max_size=ctx.chart_max_size,
            timeout=timeout,
        )
    except FetchError as error:
        raise pull_error(str(error)) from None
    assert fetched.body is not None
    expected = entry.get("digest")
    actual = hashlib.sha256(fetched.body).hexdigest()
    if expected and not hmac.compare_digest(str(expected), actual):
        raise pull_error(
            f"chart '{spec.chart}' version {version}: digest sha256:{actual} does not match "
            f"the index's {expected}"
        )
    package = work / f"{spec.chart}-{version}.tgz"
    package.write_bytes(fetched.body)
    ctx.package = await repackage_with_values(ctx, package, work)


async def from_oci(ctx: HelmChartContext, repo: HelmRepository) -> None:
    spec = ctx.obj.spec
    if repo.spec.provider != "generic":
        raise Stalling(
            SourceReason.INVALID_CHART_REFERENCE,
            f"HelmRepository provider {repo.spec.provider} is not supported by this version "
            "of Sluice",
        )
    try:
        url = oci.OCIURL.parse(f"{repo.spec.url.rstrip('/')}/{spec.chart}")
    except ValueError as error:
        raise Stalling(SourceReason.URL_INVALID, str(error)) from None
    work = Path(ctx.cleanup.enter_context(tempfile.TemporaryDirectory(prefix="helmchart-")))
    registry = await oci_registry(ctx, repo, url, work)
    timeout = repository_timeout(repo)
    where = f"{url.host}/{url.repository}"
    try:
        exact = parse_version(spec.version)
        if exact is not None:
            version = spec.version
        else:
            tags = await run_bounded(registry.list_tags, timeout=timeout, host=url.host)
            # helm push writes `+` (build metadata) as `_`: tags cannot hold `+`.
            entries = [{"version": t.replace("_", "+")} for t in tags]
            version = str(select_version(entries, spec.version)["version"])
        if already_stored(ctx, version, source_revision=version):
            if spec.verify is None or ctx.conditions.is_true(SourceCondition.SOURCE_VERIFIED):
                return
            ctx.noop = False  # stored before spec.verify was set: verified before it stays
        manifest = await run_bounded(
            registry.manifest, version.replace("+", "_"), timeout=timeout, host=url.host
        )
        if spec.verify is not None:
            verified = await verify_signature(
                ctx.client,
                ctx.obj.namespace,
                spec.verify,
                registry=registry,
                digest=manifest.digest,
                revision=version,
                timeout=timeout,
            )
            ctx.conditions.mark_true(
                SourceCondition.SOURCE_VERIFIED, SourceReason.SUCCEEDED, verified
            )
        layers = [m for m in manifest.layers() if m.get("mediaType") == HELM_CHART_LAYER]
        if len(layers) != 1:
            raise pull_error(
                f"'{where}:{version}' holds no Helm chart (no single {HELM_CHART_LAYER} layer)"
            )
        mark_outdated(ctx, version)
        package = work / f"{url.repository.rsplit('/', 1)[-1]}-{version}.tgz"
        digest = str(layers[0].get("digest"))
        await run_bounded(
            lambda: registry.download(digest, package, max_size=ctx.chart_max_size),
            timeout=timeout,
            host=url.host,
        )
    except InvalidRange as error:
        raise Stalling(SourceReason.INVALID_CHART_REFERENCE, str(error)) from None
    except LookupError as error:
        raise pull_error(f"chart '{where}': {error}") from None
    except oci.RegistryError as error:
        if error.auth:
            raise StepError(
                SourceReason.AUTHENTICATION_FAILED,
                str(error),
                condition=SourceCondition.FETCH_FAILED,
            ) from None
        raise pull_error(f"chart '{where}': {error}") from None
    ctx.package = await repackage_with_values(ctx, package, work)


def unverifiable(what: str) -> Stalling:
    """`spec.verify` where there is no signature to check: refused, never ignored."""
    return Stalling(
        SourceReason.VERIFICATION_ERROR,
        f"spec.verify is not supported for {what}: only charts of a HelmRepository of type "
        "'oci' are verified (cosign public keys). No artifact is produced",
        condition=SourceCondition.SOURCE_VERIFIED,
    )


async def oci_registry(
    ctx: HelmChartContext, repo: HelmRepository, url: oci.OCIURL, work: Path
) -> oci.Registry:
    """A registry client with the HelmRepository's credentials and CA."""
    namespace = ctx.obj.namespace
    username = password = None
    ca_file: str | None = None
    try:
        if repo.spec.secret_ref is not None:
            name = f"{namespace}/{repo.spec.secret_ref.name}"
            data = await secret_data(ctx.client, namespace, repo.spec.secret_ref.name)
            if ".dockerconfigjson" in data:
                try:
                    username, password = oci.credentials_for(data[".dockerconfigjson"], url.host)
                except ValueError as error:
                    raise SecretError(f"secret '{name}': {error}") from None
                if username is None:
                    raise SecretError(
                        f"secret '{name}' has no credentials for registry '{url.host}'"
                    )
            else:
                require(data, "username", "password", secret=name)
                username, password = data["username"], data["password"]
        if repo.spec.cert_secret_ref is not None:
            name = f"{namespace}/{repo.spec.cert_secret_ref.name}"
            data = await secret_data(ctx.client, namespace, repo.spec.cert_secret_ref.name)
            require(data, "ca.crt", secret=name)
            ca = work / "ca.crt"
            ca.write_text(data["ca.crt"])
            ca_file = str(ca)
    except SecretError as error:
        raise StepError(
            SourceReason.AUTHENTICATION_FAILED, str(error), condition=SourceCondition.FETCH_FAILED
        ) from None
    return oci.Registry(
        url,
        insecure=repo.spec.insecure,
        ca_file=ca_file,
        username=username,
        password=password,
        timeout=repository_timeout(repo),
        hints=OCI_HINTS,
    )


def repository_timeout(repo: HelmRepository) -> float:
    return parse_duration(repo.spec.timeout).total_seconds() if repo.spec.timeout else 60.0
