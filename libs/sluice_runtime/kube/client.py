"""One small async client for every resource, built on kubernetes-asyncio's transport.

kubernetes-asyncio loads the controller's own kubeconfig (certificates,
tokens, exec plugins, in-cluster service accounts) and owns the connection
pool; kubeconfigs that tenants supply never go through its loader (see
`from_credentials` and `kubeconfigs.py`); its generated
per-kind classes do not fit a runtime that handles any kind generically, so
requests are sent on its session with its credentials by `sending.py` (past
`ApiClient.call_api`, whose model serialization only cost CPU) and come back as
plain dicts. Errors become the typed exceptions in `errors.py`.

Around it: `connecting.py` builds the ApiClient (from a kubeconfig or from
credentials), `throttling.py` holds the rate limit, the APF probe and the 429
retry policy, `attributing.py` the request observers, and `writing.py` the
verbs that write (create, replace, patches, apply, delete).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp

from sluice_api.meta import JSON as JSON
from sluice_runtime import holding, lanes
from sluice_runtime.kube.attributing import RequestObserver, tell_observers
from sluice_runtime.kube.connecting import (
    credentials_api_client,
    kubeconfig_api_client,
    twin_api_client,
)
from sluice_runtime.kube.errors import (
    ApiError,
    ApiUnavailable,
    error_from_response,
    error_from_status_object,
)
from sluice_runtime.kube.kubeconfigs import Credentials
from sluice_runtime.kube.resources import ResourceType
from sluice_runtime.kube.sending import send
from sluice_runtime.kube.throttling import (
    MAX_RETRIES_ON_429,
    TokenBucket,
    has_priority_and_fairness,
    retry_after,
)
from sluice_runtime.kube.writing import WriteVerbs

DEFAULT_TIMEOUT = 30.0
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


@dataclass
class _Shared:
    api: Any  # kubernetes_asyncio.client.ApiClient (untyped)
    limiter: TokenBucket
    requests: int = 0
    observers: list[RequestObserver] = field(default_factory=list)
    requested_api: Any = None
    """The same server and credentials, on connections of their own, for requested
    reconciles (`lanes`): made by the first of them, so every connection of it is
    opened in a requested task and the event loop serves its I/O first."""

    def api_for_lane(self) -> Any:
        if not lanes.is_requested():
            return self.api
        if self.requested_api is None:
            self.requested_api = twin_api_client(self.api)
        return self.requested_api

    async def close(self) -> None:
        await self.api.close()
        if self.requested_api is not None:
            await self.requested_api.close()


@dataclass
class KubeClient(WriteVerbs):
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
        api = await kubeconfig_api_client(kubeconfig, context)
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
        api = await credentials_api_client(credentials)
        return await cls._started(api, qps=qps, burst=burst, verify=verify)

    @classmethod
    async def _started(cls, api: Any, *, qps: float, burst: int, verify: bool) -> KubeClient:
        """Wrap a kubernetes-asyncio ApiClient, checking the server answers when asked."""
        configuration = api.configuration
        api.user_agent = "sluice"
        client = cls(_Shared(api=api, limiter=TokenBucket(qps, burst)))
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
            if qps > 0 and await has_priority_and_fairness(client.request):
                # As Flux (fluxcd/pkg runtime/client): the server's own fairness
                # protects it, and a client-side limit would only slow every
                # reconcile down; --kube-api-qps/--kube-api-burst apply to
                # servers without it.
                client._shared.limiter = TokenBucket(0, burst)
        return client

    @property
    def throttled(self) -> bool:
        """Whether requests wait for a client-side rate limit (no APF on the server)."""
        return self._shared.limiter.qps > 0

    @property
    def lane_pools(self) -> int:
        """Connection pools in use: 1, and 2 once a requested reconcile has sent a request."""
        return 1 if self._shared.requested_api is None else 2

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
        await self._shared.close()

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
                if lanes.is_bulk():
                    # Requested work of this process in flight: let its requests
                    # reach a server that is not busy with ours (holding.py).
                    # Not the machinery's: a lease renewal must never wait.
                    await holding.HOLD.turn()
                await self._shared.limiter.take()
            self._shared.requests += 1
            started = time.monotonic()
            status = 0
            try:
                response = await send(
                    self._shared.api_for_lane(),
                    method,
                    path,
                    query=query,
                    headers=headers,
                    body=body,
                    timeout=timeout,
                )
                status = response.status
            except (TimeoutError, aiohttp.ClientError, ssl.SSLError, OSError) as error:
                raise ApiUnavailable(
                    f"cannot reach API server {self.host}: {error or type(error).__name__}"
                ) from None
            finally:
                if self._shared.observers:
                    seconds = time.monotonic() - started
                    tell_observers(
                        self._shared.observers, method, path, query, content_type, seconds, status
                    )
            # API Priority and Fairness sheds load with 429 and says when to come
            # back; as client-go, wait that long and send again, a few times.
            if status != 429 or attempt >= MAX_RETRIES_ON_429:
                return response
            delay = retry_after(response.headers.get("Retry-After"))
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
            raw = await response.read()
        except (TimeoutError, aiohttp.ClientError) as error:
            raise ApiUnavailable(f"API server {self.host} dropped the answer: {error}") from None
        finally:
            response.release()
        if response.status >= 400:
            raise error_from_response(response.status, raw.decode(errors="replace"))
        # The API server answers JSON in UTF-8: parsed from the bytes, with no text made
        # first (nor the charset lookup `text()` does per answer).
        return json.loads(raw) if raw else None

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
