"""HelmRepository: a chart repository's index.yaml, stored as a digest-named artifact.

STEPS: storage → gates → index → artifact for `type: default`; `type: oci`
has no index, and is Ready as soon as the registry answers (as in Flux,
where OCI HelmRepositories produce no artifact).

The index is fetched with If-None-Match when the last answer carried an
ETag: an unchanged repository costs one small request and no write. Its
size is bounded (`--helm-index-max-size`), and so is what it parses into
(`index_limits`); it is parsed off the event loop (yamlloading.py), and its
parsed form is kept in `INDEX_CACHE`, keyed by the stored file's digest, so
that many HelmCharts on one repository parse it once.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import ssl
import tempfile
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp

from sluice_api.meta import parse_duration
from sluice_api.source import HelmRepository, HelmRepositorySpec, SourceCondition, SourceReason
from sluice_runtime import resolving, yamlloading
from sluice_runtime.artifacts.storage import Storage
from sluice_runtime.describing import describe_transport
from sluice_runtime.informing.watching import Store
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.secrets import SecretError, require, secret_data
from sluice_runtime.reconciling.errors import Stalling, StepError
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import Result, done, step
from sluice_runtime.redacting import redact_url
from source_controller.sources import (
    Limits,
    SourceContext,
    finalize,
    mark_outdated,
    mark_stored,
    reconcile_gates,
    reconcile_storage,
    record_artifact,
    source_reconciler,
    write_file,
)

DEFAULT_TIMEOUT = 60.0
MiB = 1 << 20
DEFAULT_INDEX_MAX_SIZE = 50 * MiB
"""Flux's default `--helm-index-max-size`."""
INDEX_BYTES_PER_NODE = 12
"""An index's nodes are bounded at one per this many bytes of its size limit: real
indexes hold one per 15 to 20 bytes (digests, URLs and descriptions are long), so
bitnami's 20+ MiB index fits with room, while a 50 MiB index of one-byte scalars
(25 million nodes, gigabytes once built) does not."""
DEFAULT_CHART_MAX_SIZE = 10 * MiB
"""Flux's default `--helm-chart-max-size`."""


class FetchError(Exception):
    """An HTTP fetch failed; `auth` when the server refused the credentials."""

    def __init__(self, message: str, *, auth: bool = False) -> None:
        super().__init__(message)
        self.auth = auth


@dataclass(frozen=True, kw_only=True)
class Credentials:
    """What a HelmRepository's secrets give a fetch: basic auth and TLS."""

    username: str | None = None
    password: str | None = None
    ssl_context: ssl.SSLContext | None = None


async def credentials(
    client: KubeClient, namespace: str, spec: HelmRepositorySpec, *, tmp: Path
) -> Credentials:
    """Basic auth from secretRef; CA and client certificate from certSecretRef
    (or, as Flux still accepts, from secretRef when certSecretRef is not set)."""
    username = password = None
    tls: dict[str, str] = {}
    if spec.secret_ref is not None:
        data = await secret_data(client, namespace, spec.secret_ref.name)
        if "username" in data or "password" in data:
            require(data, "username", "password", secret=f"{namespace}/{spec.secret_ref.name}")
            username, password = data["username"], data["password"]
        if spec.cert_secret_ref is None:
            tls = {k: v for k, v in data.items() if k in ("ca.crt", "tls.crt", "tls.key")}
    if spec.cert_secret_ref is not None:
        name = spec.cert_secret_ref.name
        data = await secret_data(client, namespace, name)
        tls = {k: v for k, v in data.items() if k in ("ca.crt", "tls.crt", "tls.key")}
        if not tls:
            raise SecretError(f"secret '{namespace}/{name}' has no 'ca.crt' or 'tls.crt' key")
    context = None
    if tls:
        context = ssl.create_default_context(cadata=tls.get("ca.crt") or None)
        if "tls.crt" in tls or "tls.key" in tls:
            require(tls, "tls.crt", "tls.key", secret=f"{namespace}/certSecretRef")
            cert, key = tmp / "tls.crt", tmp / "tls.key"
            cert.write_text(tls["tls.crt"])
            key.touch(mode=0o600)
            key.write_text(tls["tls.key"])
            context.load_cert_chain(cert, key)
    return Credentials(username=username, password=password, ssl_context=context)


@dataclass(frozen=True)
class Fetched:
    body: bytes | None
    """None: the server said 304 Not Modified."""
    etag: str | None


async def fetch(
    url: str,
    *,
    creds: Credentials,
    send_auth: bool = True,
    max_size: int,
    timeout: float,
    etag: str | None = None,
) -> Fetched:
    """GET `url`, bounded in size and time, refusing redirects to other hosts
    with the credentials attached (aiohttp drops auth on cross-host redirects)."""
    headers = {"If-None-Match": etag} if etag else {}
    size = 0
    if send_auth and creds.username is not None:
        token = base64.b64encode(f"{creds.username}:{creds.password or ''}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    try:
        async with (
            aiohttp.ClientSession(
                connector=resolving.connector(lookup_timeout=timeout),
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as session,
            session.get(url, headers=headers, ssl=creds.ssl_context or True) as answer,
        ):
            if answer.status == 304:
                return Fetched(None, etag)
            if answer.status in (401, 403):
                raise FetchError(
                    f"failed to fetch {redact_url(url)}: {answer.status} {answer.reason}",
                    auth=True,
                )
            if answer.status != 200:
                raise FetchError(
                    f"failed to fetch {redact_url(url)}: {answer.status} {answer.reason}"
                )
            if answer.content_length is not None and answer.content_length > max_size:
                raise FetchError(_too_large(url, max_size))
            chunks: list[bytes] = []
            async for chunk in answer.content.iter_chunked(1 << 16):
                size += len(chunk)
                if size > max_size:
                    raise FetchError(_too_large(url, max_size))
                chunks.append(chunk)
            return Fetched(b"".join(chunks), answer.headers.get("ETag"))
    except aiohttp.ClientPayloadError as error:
        # The server promised more than it sent: a transfer cut off midway.
        raise FetchError(
            f"failed to fetch {redact_url(url)}: the download broke off after {size} bytes "
            f"({describe_transport(error)})"
        ) from None
    except (aiohttp.ClientError, TimeoutError, ssl.SSLError) as error:
        raise FetchError(
            f"failed to fetch {redact_url(url)}: {describe_transport(error)}"
        ) from None


def _too_large(url: str, max_size: int) -> str:
    return f"{redact_url(url)} is larger than the limit of {max_size} bytes"


def index_url(repo_url: str) -> str:
    return repo_url.rstrip("/") + "/index.yaml"


def chart_url(repo_url: str, url: str) -> str:
    """A chart URL from the index, absolute or relative to the repository."""
    return urljoin(repo_url.rstrip("/") + "/", url)


def same_host(a: str, b: str) -> bool:
    return urlsplit(a).netloc.rsplit("@", 1)[-1] == urlsplit(b).netloc.rsplit("@", 1)[-1]


# The parsed-index cache ----------------------------------------------------------


class IndexCache:
    """Parsed indexes by artifact digest, least recently used dropped first."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._items: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.parses = 0
        """How many times an index was parsed (a test's figure of the hit rate)."""

    def get(self, digest: str, load: Any, *, limits: yamlloading.YamlLimits) -> dict[str, Any]:
        """The parsed index; a blocking call (it may parse), for `yamlloading.off_loop`."""
        if digest in self._items:
            self._items.move_to_end(digest)
            return self._items[digest]
        index = parse_index(load(), limits=limits)
        self.parses += 1
        self._items[digest] = index
        while len(self._items) > self.size:
            self._items.popitem(last=False)
        return index


class InvalidIndex(ValueError):
    pass


def index_limits(max_size: int) -> yamlloading.YamlLimits:
    """What an index within `--helm-index-max-size` may parse into."""
    return yamlloading.YamlLimits(max_bytes=max_size, max_nodes=max_size // INDEX_BYTES_PER_NODE)


def parse_index(data: bytes, *, limits: yamlloading.YamlLimits) -> dict[str, Any]:
    """The index as a map; blocking (run it with `yamlloading.off_loop`)."""
    try:
        index = yamlloading.load(data, limits=limits)
    except yamlloading.YamlLimitExceeded as error:
        raise InvalidIndex(f"index is too large: {error}") from None
    except yamlloading.YAMLError as error:
        raise InvalidIndex(f"index is not valid YAML: {error}") from None
    if not isinstance(index, dict) or not isinstance(index.get("entries", {}), dict):
        raise InvalidIndex("index has no 'entries' map")
    if not index.get("apiVersion"):
        raise InvalidIndex("index has no apiVersion")
    return index


def chart_versions(index: dict[str, Any], chart: str) -> list[dict[str, Any]]:
    """The entries of `chart` in a parsed index (empty when it is not there); refuses
    (InvalidIndex) a chart whose entries are not a list of mappings, which the version
    selection and the download read."""
    entries = (index.get("entries") or {}).get(chart) or []
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InvalidIndex(f"index entry '{chart}' is not a list of chart versions")
    return entries


INDEX_CACHE = IndexCache()


# Steps ------------------------------------------------------------------------------


@dataclass(kw_only=True)
class HelmRepositoryContext(SourceContext[HelmRepository]):
    index_max_size: int = DEFAULT_INDEX_MAX_SIZE
    etags: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Per object key: (ETag, artifact digest) of the last index stored."""
    revision: str = ""
    body: bytes | None = None
    noop: bool = False

    @property
    def timeout(self) -> float:
        spec = self.obj.spec
        return parse_duration(spec.timeout).total_seconds() if spec.timeout else DEFAULT_TIMEOUT


def _fetch_failed(message: str, *, auth: bool = False) -> StepError:
    reason = SourceReason.AUTHENTICATION_FAILED if auth else SourceReason.INDEXATION_FAILED
    return StepError(reason, message, condition=SourceCondition.FETCH_FAILED)


@step(SourceCondition.FETCH_FAILED)
async def reconcile_oci(ctx: HelmRepositoryContext) -> Result | None:
    """`type: oci`: no index and no artifact; Ready once the registry answers."""
    spec = ctx.obj.spec
    if spec.type != "oci":
        if spec.url.startswith("oci://"):
            raise Stalling(SourceReason.URL_INVALID, "an oci:// URL needs spec.type: oci")
        return None
    if not spec.url.startswith("oci://"):
        raise Stalling(
            SourceReason.URL_INVALID, f"spec.type oci needs an oci:// URL, not {spec.url}"
        )
    if spec.provider != "generic":
        raise Stalling(
            SourceReason.FAILED,
            f"spec.provider {spec.provider} is not supported by this version of Sluice",
        )
    host = urlsplit(spec.url).netloc
    scheme = "http" if spec.insecure else "https"
    with tempfile.TemporaryDirectory(prefix="helmrepo-") as tmp:
        creds = await _credentials(ctx, Path(tmp))
        try:
            await fetch(
                f"{scheme}://{host}/v2/", creds=creds, max_size=1 << 20, timeout=ctx.timeout
            )
        except FetchError as error:
            # 401 is an answer: the registry is there, and wants the
            # credentials charts will be pulled with.
            if not error.auth:
                raise _fetch_failed(str(error)) from None
    ctx.obj.status.artifact = None
    ctx.ready_message = "Helm repository is ready"
    return done()


async def _credentials(ctx: HelmRepositoryContext, tmp: Path) -> Credentials:
    try:
        return await credentials(ctx.client, ctx.obj.namespace, ctx.obj.spec, tmp=tmp)
    except SecretError as error:
        raise _fetch_failed(str(error), auth=True) from None
    except ssl.SSLError as error:
        raise Stalling(SourceReason.AUTHENTICATION_FAILED, f"invalid TLS data: {error}") from None


@step(SourceCondition.FETCH_FAILED)
async def reconcile_index(ctx: HelmRepositoryContext) -> Result | None:
    spec = ctx.obj.spec
    artifact = ctx.obj.status.artifact
    known = ctx.etags.get(ctx.obj.key)
    etag = None
    if (
        known is not None
        and artifact is not None
        and artifact.digest == known[1]
        and await asyncio.to_thread(ctx.storage.exists, artifact.path)
    ):
        etag = known[0]
    with tempfile.TemporaryDirectory(prefix="helmrepo-") as tmp:
        creds = await _credentials(ctx, Path(tmp))
        try:
            fetched = await fetch(
                index_url(spec.url),
                creds=creds,
                max_size=ctx.index_max_size,
                timeout=ctx.timeout,
                etag=etag,
            )
        except FetchError as error:
            raise _fetch_failed(str(error), auth=error.auth) from None
    if fetched.body is None:
        assert artifact is not None
        ctx.noop = True
        ctx.revision = artifact.revision
        return None
    try:
        await yamlloading.off_loop(
            parse_index, fetched.body, limits=index_limits(ctx.index_max_size)
        )
    except InvalidIndex as error:
        raise _fetch_failed(f"{redact_url(index_url(spec.url))}: {error}") from None
    ctx.body = fetched.body
    ctx.revision = "sha256:" + hashlib.sha256(fetched.body).hexdigest()
    ctx.event_metadata["revision"] = ctx.revision
    if fetched.etag:
        ctx.etags[ctx.obj.key] = (fetched.etag, ctx.revision)
    if (
        artifact is not None
        and artifact.revision == ctx.revision
        and await asyncio.to_thread(ctx.storage.exists, artifact.path)
    ):
        ctx.noop = True
        return None
    mark_outdated(ctx, ctx.revision)
    return None


@step(SourceCondition.STORAGE_OPERATION_FAILED)
async def reconcile_artifact(ctx: HelmRepositoryContext) -> Result | None:
    if ctx.noop and ctx.obj.status.artifact is not None:
        mark_stored(ctx, ctx.revision)
        return None
    assert ctx.body is not None
    filename = f"index-{ctx.revision.removeprefix('sha256:')}.yaml"
    with tempfile.TemporaryDirectory(prefix="helmrepo-") as tmp:
        src = Path(tmp) / "index.yaml"
        src.write_bytes(ctx.body)
        written = await write_file(ctx, filename, src)
    await record_artifact(
        ctx,
        written,
        revision=ctx.revision,
        new_artifact_message=f"stored fetched index of size {len(ctx.body)} from "
        f"'{redact_url(ctx.obj.spec.url)}'",
    )
    if written.digest == ctx.revision:
        known = ctx.etags.get(ctx.obj.key)
        if known is not None:
            ctx.etags[ctx.obj.key] = (known[0], written.digest)
    return None


STEPS = (reconcile_storage, reconcile_gates, reconcile_oci, reconcile_index, reconcile_artifact)


def reconciler(
    storage: Storage,
    *,
    gates: Store | None = None,
    limits: Limits | None = None,
    index_max_size: int = DEFAULT_INDEX_MAX_SIZE,
) -> Reconciler[HelmRepositoryContext]:
    etags: dict[str, tuple[str, str]] = {}

    context = functools.partial(
        HelmRepositoryContext,
        storage=storage,
        gates=gates,
        limits=limits or Limits(),
        index_max_size=index_max_size,
        etags=etags,
    )
    return source_reconciler(HelmRepository, context, STEPS, finalize=finalize)
