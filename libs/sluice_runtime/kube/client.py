"""One small async client for every resource, built on kubernetes-asyncio's transport.

kubernetes-asyncio loads the controller's own kubeconfig (certificates,
tokens, exec plugins, in-cluster service accounts) and owns the connection
pool; kubeconfigs that tenants supply never go through its loader (see
`from_credentials` and `kubeconfigs.py`); its generated
per-kind classes do not fit a runtime that handles any kind generically, so
requests go through `ApiClient.call_api` with raw responses and come back as
plain dicts. Errors become the typed exceptions in `errors.py`.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import itertools
import json
import os
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

import aiohttp

from sluice_api.meta import JSON as JSON
from sluice_runtime.kube.errors import (
    ApiError,
    ApiUnavailable,
    ConfigError,
    error_from_response,
    error_from_status_object,
)
from sluice_runtime.kube.exec_plugins import run_exec_plugin
from sluice_runtime.kube.kubeconfigs import Credentials, ExecPlugin
from sluice_runtime.kube.resources import ResourceType
from sluice_runtime.kube.transport import k8s_client, k8s_config

DEFAULT_TIMEOUT = 30.0
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
METADATA = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io,application/json"
METADATA_LIST = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"


@dataclass(frozen=True, slots=True)
class ObjectList:
    items: list[JSON]
    resource_version: str


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
    object: JSON


@dataclass(frozen=True, slots=True)
class Request:
    """One request as an observer sees it: what it did and on whose behalf."""

    verb: str
    """get, list, watch, create, update, patch, apply, dry-run or delete."""
    path: str
    key: str
    """The `namespace/name` of the object being reconciled ("" outside a reconcile)."""
    phase: str
    """The step of that reconcile ("" outside a reconcile)."""
    seconds: float = 0.0
    """From sending to the answer's headers (a throttled wait excluded)."""
    status: int = 0
    """The HTTP status; 0 when no answer came."""


class RequestObserver(Protocol):
    """Told of every request once answered (metrics, the benchmark's per-phase counts)."""

    def requested(self, request: Request) -> None: ...


_attribution: ContextVar[tuple[str, str]] = ContextVar(
    "sluice_request_attribution", default=("", "")
)


@contextlib.contextmanager
def attributed(*, key: str | None = None, phase: str | None = None) -> Iterator[None]:
    """Requests sent inside this block are counted for `key` (the reconciled object)
    and `phase` (its step); either left out keeps the enclosing one."""
    outer_key, outer_phase = _attribution.get()
    token = _attribution.set(
        (outer_key if key is None else key, outer_phase if phase is None else phase)
    )
    try:
        yield
    finally:
        _attribution.reset(token)


def _verb(method: str, query: Sequence[tuple[str, str]], content_type: str) -> str:
    names = {name for name, _ in query}
    if method == "GET":
        return "watch" if "watch" in names else "list" if "limit" in names else "get"
    if method == "PATCH" and content_type == APPLY_PATCH:
        return "dry-run" if "dryRun" in names else "apply"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower()
    )


MAX_RETRIES_ON_429 = 10
"""client-go's default: a request refused with 429 is sent again up to ten times."""


def _retry_after(value: str | None) -> float:
    """Seconds to wait before sending again, from a Retry-After header (1 s when
    missing or unreadable, capped so a confused server cannot park us for long)."""
    try:
        seconds = float(value) if value is not None else 1.0
    except ValueError:
        seconds = 1.0
    return min(max(seconds, 0.0), 30.0)


FLOWCONTROL_VERSIONS = ("v1", "v1beta3", "v1beta2", "v1beta1")
"""flowcontrol.apiserver.k8s.io versions that mean API Priority and Fairness is on
(v1.20 serves v1beta1; current servers v1 and v1beta3)."""


class _TokenBucket:
    """Client-side rate limit (like client-go's QPS/burst) so a busy controller
    never floods a shared API server."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.capacity = float(max(burst, 1))
        self.tokens = self.capacity
        self.stamp = time.monotonic()
        self.lock = asyncio.Lock()

    async def take(self) -> None:
        if self.qps <= 0:
            return
        async with self.lock:
            now = time.monotonic()
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.qps)
            self.stamp = now
            if self.tokens < 1:
                await asyncio.sleep((1 - self.tokens) / self.qps)
                self.stamp = time.monotonic()
                self.tokens = 0
            else:
                self.tokens -= 1


@dataclass
class _Shared:
    api: Any  # kubernetes_asyncio.client.ApiClient (untyped)
    limiter: _TokenBucket
    requests: int = 0
    observers: list[RequestObserver] = field(default_factory=list)


def _private_file(directory: str, name: str, data: bytes | None) -> str | None:
    if data is None:
        return None
    path = os.path.join(directory, name)
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    return path


def _exec_token_refresher(plugin: ExecPlugin, expires: datetime | None) -> Any:
    """A kubernetes-asyncio refresh hook that reruns the plugin shortly before its
    token expires (tokens without an expiry are kept for the client's life)."""
    lock = asyncio.Lock()
    state = {"expires": expires}

    async def refresh(configuration: Any) -> None:
        async with lock:
            due = state["expires"]
            if due is None or datetime.now(UTC) < due - timedelta(seconds=30):
                return
            issued = await run_exec_plugin(plugin)
            if issued.token:
                configuration.api_key["BearerToken"] = f"Bearer {issued.token}"
            state["expires"] = issued.expires

    return refresh


@dataclass
class KubeClient:
    """A client bound to one identity; `impersonate()` derives a tenant's client."""

    _shared: _Shared
    _headers: Mapping[str, str] = field(default_factory=dict)
    user: str | None = None

    # -- construction -----------------------------------------------------

    @classmethod
    async def connect(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        qps: float = 50.0,
        burst: int = 300,
        verify: bool = True,
    ) -> KubeClient:
        """Load configuration the way kubectl does, then check the server answers.

        Order: the explicit path, `$KUBECONFIG`, in-cluster service account,
        `~/.kube/config`. Raises ConfigError or ApiUnavailable with a message
        meant for a person.
        """
        configuration = k8s_client.Configuration()
        path = kubeconfig or os.environ.get("KUBECONFIG")
        try:
            if path:
                if not os.path.exists(path):
                    raise ConfigError(f"kubeconfig {path} does not exist")
                await k8s_config.load_kube_config(
                    config_file=path, context=context, client_configuration=configuration
                )
            elif os.environ.get("KUBERNETES_SERVICE_HOST"):
                k8s_config.load_incluster_config(client_configuration=configuration)
            elif os.path.exists(os.path.expanduser("~/.kube/config")):
                await k8s_config.load_kube_config(
                    context=context, client_configuration=configuration
                )
            else:
                raise ConfigError(
                    "no kubeconfig: pass --kubeconfig, set KUBECONFIG, or run in a cluster"
                )
        except ConfigError:
            raise
        except Exception as error:  # any failure to read a user's file is a config error
            where = path or "~/.kube/config"
            raise ConfigError(f"kubeconfig {where} is not usable: {error}") from None
        # Watches hold a connection each; the default pool of 100 could be
        # exhausted by informers plus concurrent reconciles.
        configuration.connection_pool_maxsize = 512
        api = k8s_client.ApiClient(configuration=configuration)
        return await cls._started(api, qps=qps, burst=burst, verify=verify)

    @classmethod
    async def from_credentials(
        cls,
        credentials: Credentials,
        *,
        qps: float = 50.0,
        burst: int = 300,
        verify: bool = True,
    ) -> KubeClient:
        """A client for credentials parsed by `kubeconfigs.parse`, e.g. a tenant's.

        The kubeconfig loader is never involved: the Configuration is built
        field by field from inline values, so nothing here reads a file the
        kubeconfig names or runs a command it did not get explicitly (an
        exec plugin only reaches here when the parse allowed it).
        """
        configuration = k8s_client.Configuration()
        configuration.host = credentials.server
        configuration.verify_ssl = not credentials.insecure_skip_tls_verify
        configuration.tls_server_name = credentials.tls_server_name
        configuration.proxy = credentials.proxy_url
        configuration.connection_pool_maxsize = 64
        cert, key = credentials.cert_data, credentials.key_data
        if credentials.token:
            configuration.api_key["BearerToken"] = f"Bearer {credentials.token}"
        elif credentials.username is not None:
            pair = f"{credentials.username}:{credentials.password or ''}".encode()
            configuration.api_key["BearerToken"] = f"Basic {base64.b64encode(pair).decode()}"
        elif credentials.exec is not None:
            issued = await run_exec_plugin(credentials.exec)
            if issued.token:
                configuration.api_key["BearerToken"] = f"Bearer {issued.token}"
                configuration.refresh_api_key_hook = _exec_token_refresher(
                    credentials.exec, issued.expires
                )
            else:
                cert, key = issued.cert_data, issued.key_data
        # The ssl module reads certificates and keys only from files: they live
        # in a private directory just long enough for the client's SSLContext
        # to load them, then are deleted.
        with tempfile.TemporaryDirectory(prefix="sluice-tls-") as scratch:
            configuration.ssl_ca_cert = _private_file(scratch, "ca.crt", credentials.ca_data)
            configuration.cert_file = _private_file(scratch, "tls.crt", cert)
            configuration.key_file = _private_file(scratch, "tls.key", key)
            try:
                if credentials.ca_data is not None:
                    ssl.create_default_context(cadata=credentials.ca_data.decode(errors="replace"))
            except (ssl.SSLError, ValueError):
                raise ConfigError(
                    "kubeconfig certificate-authority-data is not a PEM certificate"
                ) from None
            try:
                api = k8s_client.ApiClient(configuration=configuration)
            except (ssl.SSLError, ValueError):
                raise ConfigError(
                    "kubeconfig client-certificate-data and client-key-data are not a PEM "
                    "certificate and its key"
                ) from None
        configuration.ssl_ca_cert = configuration.cert_file = configuration.key_file = None
        return await cls._started(api, qps=qps, burst=burst, verify=verify)

    @classmethod
    async def _started(cls, api: Any, *, qps: float, burst: int, verify: bool) -> KubeClient:
        """Wrap a kubernetes-asyncio ApiClient, checking the server answers when asked."""
        configuration = api.configuration
        api.user_agent = "sluice"
        client = cls(_Shared(api=api, limiter=_TokenBucket(qps, burst)))
        if verify:
            try:
                await client.request("GET", "/version", timeout=10.0)
            except ApiError as error:
                await client.close()
                raise ApiUnavailable(
                    f"API server {configuration.host} refused us: {error.status} {error}"
                ) from None
            except ApiUnavailable:
                await client.close()
                raise
            if qps > 0 and await client._has_priority_and_fairness():
                # As Flux (fluxcd/pkg runtime/client): the server's own fairness
                # protects it, and a client-side limit would only slow every
                # reconcile down; --kube-api-qps/--kube-api-burst apply to
                # servers without it.
                client._shared.limiter = _TokenBucket(0, burst)
        return client

    async def _has_priority_and_fairness(self) -> bool:
        """Whether the server serves API Priority and Fairness (any known version)."""
        try:
            group = await self.request("GET", "/apis/flowcontrol.apiserver.k8s.io", timeout=10.0)
        except (ApiError, ApiUnavailable):
            return False
        served = {str(v.get("version")) for v in (group or {}).get("versions") or []}
        return any(version in served for version in FLOWCONTROL_VERSIONS)

    @property
    def throttled(self) -> bool:
        """Whether requests wait for a client-side rate limit (no APF on the server)."""
        return self._shared.limiter.qps > 0

    @property
    def host(self) -> str:
        return str(self._shared.api.configuration.host)

    @property
    def request_count(self) -> int:
        """Requests sent so far by every client sharing this connection pool."""
        return self._shared.requests

    def observe(self, observer: RequestObserver) -> Callable[[], None]:
        """Tell `observer` of every request of this connection pool (impersonated
        clients included); returns the function that stops it."""
        self._shared.observers.append(observer)
        return lambda: self._shared.observers.remove(observer)

    def impersonate(self, user: str) -> KubeClient:
        """A client acting as `user`, so RBAC decides what a tenant may touch.

        For `system:serviceaccount:<ns>:<name>` the API server adds the
        service-account groups itself, as it would for the real token.
        """
        return KubeClient(self._shared, {"Impersonate-User": user}, user)

    async def close(self) -> None:
        await self._shared.api.close()

    # -- raw requests -----------------------------------------------------

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | aiohttp.ClientTimeout | None = DEFAULT_TIMEOUT,
        throttle: bool = True,
        accept: str = "application/json",
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": accept, "Content-Type": content_type, **self._headers}
        for attempt in itertools.count():
            if throttle:
                await self._shared.limiter.take()
            self._shared.requests += 1
            started = time.monotonic()
            status = 0
            try:
                response: aiohttp.ClientResponse = await self._shared.api.call_api(
                    path,
                    method,
                    query_params=list(query),
                    header_params=headers,
                    body=body,
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=timeout,
                )
                status = response.status
            except (TimeoutError, aiohttp.ClientError, ssl.SSLError, OSError) as error:
                raise ApiUnavailable(
                    f"cannot reach API server {self.host}: {error or type(error).__name__}"
                ) from None
            finally:
                if self._shared.observers:
                    key, phase = _attribution.get()
                    request = Request(
                        _verb(method, query, content_type),
                        path,
                        key,
                        phase,
                        time.monotonic() - started,
                        status,
                    )
                    for observer in self._shared.observers:
                        observer.requested(request)
            # API Priority and Fairness sheds load with 429 and says when to come
            # back; as client-go, wait that long and send again, a few times.
            if status != 429 or attempt >= MAX_RETRIES_ON_429:
                return response
            delay = _retry_after(response.headers.get("Retry-After"))
            response.release()
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = DEFAULT_TIMEOUT,
        accept: str = "application/json",
    ) -> Any:
        response = await self._send(
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            timeout=timeout,
            accept=accept,
        )
        try:
            text = await response.text()
        except (TimeoutError, aiohttp.ClientError) as error:
            raise ApiUnavailable(f"API server {self.host} dropped the answer: {error}") from None
        finally:
            response.release()
        if response.status >= 400:
            raise error_from_response(response.status, text)
        return json.loads(text) if text else None

    async def stream_lines(
        self, path: str, *, query: Sequence[tuple[str, str]] = ()
    ) -> AsyncIterator[str]:
        """The lines of a plain-text answer as they arrive (pods/log, with or without follow)."""
        timeout = aiohttp.ClientTimeout(total=None, connect=DEFAULT_TIMEOUT, sock_read=None)
        response = await self._send("GET", path, query=query, timeout=timeout, throttle=False)
        try:
            if response.status >= 400:
                raise error_from_response(response.status, await response.text())
            while True:
                try:
                    line = await response.content.readline()
                except (TimeoutError, aiohttp.ClientError, ValueError) as error:
                    raise ApiUnavailable(f"stream of {path} interrupted: {error}") from None
                if not line:
                    return
                yield line.decode(errors="replace").rstrip("\n")
        finally:
            response.close()

    # -- typed verbs ------------------------------------------------------

    async def get(self, rt: ResourceType, name: str, namespace: str | None = None) -> JSON:
        result: JSON = await self.request("GET", rt.path(namespace=namespace, name=name))
        return result

    async def list(
        self,
        rt: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        metadata_only: bool = False,
    ) -> ObjectList:
        """All objects, fetched in pages so a big list never needs one huge answer.

        `metadata_only` asks for PartialObjectMetadata (names, labels,
        resourceVersions...) instead of whole objects: a fraction of the bytes.
        """
        accept = METADATA_LIST if metadata_only else "application/json"
        items: list[JSON] = []
        token: str | None = None
        resource_version = ""
        while True:
            query = [("limit", str(page_size))]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if field_selector:
                query.append(("fieldSelector", field_selector))
            if token:
                query.append(("continue", token))
            page = await self.request(
                "GET", rt.path(namespace=namespace), query=query, accept=accept
            )
            for item in page.get("items") or []:
                # List items omit apiVersion/kind; the cache wants whole objects.
                item.setdefault("apiVersion", rt.api_version)
                item.setdefault("kind", rt.kind)
                items.append(item)
            meta = page.get("metadata") or {}
            resource_version = str(meta.get("resourceVersion") or resource_version)
            token = meta.get("continue")
            if not token:
                return ObjectList(items, resource_version)

    async def watch(
        self,
        rt: ResourceType,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
        metadata_only: bool = False,
    ) -> AsyncIterator[WatchEvent]:
        """Stream changes after `resource_version` until the server ends the watch
        (`metadata_only`: each object as PartialObjectMetadata).

        Raises Gone when the version is too old (the caller relists), and
        ApiUnavailable when the connection drops (the caller resumes).
        """
        query = [
            ("watch", "1"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        timeout = aiohttp.ClientTimeout(
            total=None, connect=DEFAULT_TIMEOUT, sock_read=timeout_seconds + 30
        )
        response = await self._send(
            "GET",
            rt.path(namespace=namespace),
            query=query,
            timeout=timeout,
            throttle=False,
            accept=METADATA if metadata_only else "application/json",
        )
        try:
            if response.status >= 400:
                raise error_from_response(response.status, await response.text())
            while True:
                try:
                    line = await response.content.readline()
                except (TimeoutError, aiohttp.ClientError, ValueError) as error:
                    raise ApiUnavailable(f"watch of {rt.plural} interrupted: {error}") from None
                if not line:
                    return
                if not line.strip():
                    continue
                event = json.loads(line)
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    raise error_from_status_object(obj)
                if kind in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
                    yield WatchEvent(kind, obj)
        finally:
            response.close()

    async def create(self, rt: ResourceType, obj: JSON, namespace: str | None = None) -> JSON:
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        result: JSON = await self.request("POST", rt.path(namespace=ns), body=obj)
        return result

    async def replace(self, rt: ResourceType, obj: JSON) -> JSON:
        meta = obj["metadata"]
        result: JSON = await self.request(
            "PUT", rt.path(namespace=meta.get("namespace"), name=meta["name"]), body=obj
        )
        return result

    async def merge_patch(
        self,
        rt: ResourceType,
        name: str,
        patch: JSON,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> JSON:
        result: JSON = await self.request(
            "PATCH",
            rt.path(namespace=namespace, name=name, subresource=subresource),
            body=patch,
            content_type=MERGE_PATCH,
        )
        return result

    async def json_patch(
        self,
        rt: ResourceType,
        name: str,
        operations: builtins.list[JSON],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> JSON:
        result: JSON = await self.request(
            "PATCH",
            rt.path(namespace=namespace, name=name, subresource=subresource),
            body=operations,
            content_type=JSON_PATCH,
        )
        return result

    async def apply(
        self,
        rt: ResourceType,
        obj: JSON,
        *,
        field_manager: str,
        force: bool = False,
        dry_run: bool = False,
    ) -> JSON:
        """Server-side apply; `obj` is the complete intent of `field_manager`."""
        meta = obj["metadata"]
        query = [("fieldManager", field_manager)]
        if force:
            query.append(("force", "true"))
        if dry_run:
            query.append(("dryRun", "All"))
        result: JSON = await self.request(
            "PATCH",
            rt.path(namespace=meta.get("namespace"), name=meta["name"]),
            query=query,
            body=obj,
            content_type=APPLY_PATCH,
        )
        return result

    async def delete(
        self,
        rt: ResourceType,
        name: str,
        *,
        namespace: str | None = None,
        propagation: Literal["Background", "Foreground", "Orphan"] = "Background",
        precondition_uid: str | None = None,
        precondition_resource_version: str | None = None,
    ) -> JSON | None:
        """Delete; with preconditions, only that object (uid) as it was then
        (resourceVersion): otherwise the server answers 409 Conflict."""
        body: JSON = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": propagation,
        }
        preconditions = {}
        if precondition_uid:
            preconditions["uid"] = precondition_uid
        if precondition_resource_version:
            preconditions["resourceVersion"] = precondition_resource_version
        if preconditions:
            body["preconditions"] = preconditions
        result: JSON | None = await self.request(
            "DELETE", rt.path(namespace=namespace, name=name), body=body
        )
        return result
