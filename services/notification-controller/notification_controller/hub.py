"""The event hub: controllers POST events here; matching Alerts forward them.

`POST /` takes the Flux event JSON from an authenticated controller (401 or
403 otherwise, before the body is read; see `authenticating`), answers 400
naming the field at fault or 202 at once, and queues the event; a
dispatcher then finds the Alerts it matches (from the cache), drops an
identical event already sent within `--rate-limit-interval`, resolves each
Provider's address and token (its Secret wins over its spec) and delivers,
retrying transient failures. A delivery that still fails becomes a Warning
event on the Alert; nothing in here can take the controller down.

Deliveries run per Provider (see `dispatching`): each Provider has its own
small concurrency and backlog, its `timeout` is capped at
`--provider-timeout-max` (Flux's default is 15s, and `timeout: 600m` is
valid), and everything queued counts against one byte budget; a full one
answers 503 and counts the drop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import aiohttp
import pydantic
import structlog
import yaml
from aiohttp import web

from notification_controller.alerting import enrich, matches
from notification_controller.authenticating import EventAuthenticator
from notification_controller.connecting import transport_for
from notification_controller.dispatching import ByteBudget, Dropped, ProviderLanes
from notification_controller.limiting import Dedup, event_key
from notification_controller.providers import DeliveryError, deliver
from sluice_api.meta import parse_duration
from sluice_api.notification import Alert, NotificationReason, Provider
from sluice_runtime import yamlloading
from sluice_runtime.informing.watching import Store
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.discovery import RestMapper
from sluice_runtime.kube.errors import KubeError
from sluice_runtime.kube.secrets import SecretError, secret_data
from sluice_runtime.recording import EventRecorder
from sluice_runtime.redacting import redact_urls

log = structlog.get_logger(__name__)

MAX_EVENT_BODY = 1024 * 1024
DEFAULT_PROVIDER_TIMEOUT = 15.0
"""A Provider's timeout when it sets none, as Flux."""
MAX_PROVIDER_TIMEOUT = 30.0
"""The most a Provider's timeout may be, unless `--provider-timeout-max` says otherwise."""
DEFAULT_QUEUE_BYTES = 64 * 1024 * 1024


class InvolvedObject(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")

    kind: str = pydantic.Field(min_length=1)
    name: str = pydantic.Field(min_length=1)
    namespace: str = pydantic.Field(min_length=1)
    apiVersion: str | None = None
    uid: str | None = None


class Event(pydantic.BaseModel):
    """The event JSON Flux controllers POST, validated field by field."""

    model_config = pydantic.ConfigDict(extra="allow")

    involvedObject: InvolvedObject
    severity: Literal["info", "error", "trace"]
    timestamp: str = pydantic.Field(min_length=1)
    message: str
    reason: str = pydantic.Field(min_length=1)
    metadata: dict[str, str] | None = None
    reportingController: str = pydantic.Field(min_length=1)
    reportingInstance: str | None = None


class HubObserver(Protocol):
    """Hooks on what the hub does with each event (tests, benchmarks); the hub
    itself keeps no counters."""

    def event_refused(self) -> None: ...
    def event_received(self) -> None: ...
    def event_delivered(self) -> None: ...


class _NoHubObserver:
    def event_refused(self) -> None:
        pass

    def event_received(self) -> None:
        pass

    def event_delivered(self) -> None:
        pass


class EventHub:
    def __init__(
        self,
        *,
        client: KubeClient,
        mapper: RestMapper,
        alerts: Store,
        providers: Store,
        recorder: EventRecorder,
        session: aiohttp.ClientSession,
        dedup: Dedup,
        authenticator: EventAuthenticator,
        no_cross_namespace_refs: bool = False,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        queue_size: int = 10000,
        queue_bytes: int = DEFAULT_QUEUE_BYTES,
        provider_concurrency: int = 2,
        provider_backlog: int = 100,
        max_provider_timeout: float = MAX_PROVIDER_TIMEOUT,
        observer: HubObserver | None = None,
    ) -> None:
        self.client = client
        self.mapper = mapper
        self.alerts = alerts
        self.providers = providers
        self.recorder = recorder
        self.session = session
        self.dedup = dedup
        self.authenticator = authenticator
        self.no_cross_namespace_refs = no_cross_namespace_refs
        self.clock = clock
        self.max_provider_timeout = max_provider_timeout
        self.budget = ByteBudget(queue_bytes)
        self.dropped = Dropped()
        self.lanes = ProviderLanes(
            concurrency=provider_concurrency,
            backlog=provider_backlog,
            budget=self.budget,
            dropped=self.dropped,
        )
        # Each event with the bytes it holds in the budget until dispatched.
        self._queue: asyncio.Queue[tuple[dict[str, Any], int]] = asyncio.Queue(maxsize=queue_size)
        self._workers: list[asyncio.Task[None]] = []
        self._observer: HubObserver = observer or _NoHubObserver()

    def app(self) -> web.Application:
        application = web.Application(client_max_size=MAX_EVENT_BODY)
        application.router.add_post("/", self.handle)
        return application

    async def start(self, workers: int = 4) -> None:
        for index in range(workers):
            self._workers.append(
                asyncio.get_running_loop().create_task(self._work(), name=f"event-dispatch-{index}")
            )

    async def stop(self) -> None:
        for task in self._workers:
            task.cancel()
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers.clear()
        await self.lanes.stop()

    async def handle(self, request: web.Request) -> web.Response:
        refusal = await self.authenticator.check(request.headers.get("Authorization"))
        if refusal is not None:
            self._observer.event_refused()
            log.info("event refused", status=refusal.status, reason=refusal.message)
            return web.Response(status=refusal.status, text=f"event refused: {refusal.message}")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return web.Response(status=413, text="event too large")
        try:
            raw = json.loads(body)
        except ValueError:
            return web.Response(status=400, text="invalid event: body is not JSON")
        try:
            event = Event.model_validate(raw)
        except pydantic.ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
                for e in error.errors()[:5]
            )
            return web.Response(status=400, text=f"invalid event: {problems}")
        self._observer.event_received()
        if event.severity == "trace":
            return web.Response(status=202)
        size = len(body)
        if self._queue.full() or not self.budget.take(size):
            reason = "event queue full"
            self.dropped[reason] += 1
            log.warning("event dropped", reason=reason, bytes=size, queued_bytes=self.budget.used)
            return web.Response(status=503, text=reason)
        self._queue.put_nowait((event.model_dump(exclude_none=True), size))
        return web.Response(status=202)

    async def _work(self) -> None:
        while True:
            event, size = await self._queue.get()
            # Its bytes pass to the deliveries it becomes, each of which takes its own.
            self.budget.give(size)
            try:
                await self.dispatch(event, size=size)
            except Exception:  # a dispatch bug must not stop the others
                log.exception("event dispatch failed")
            finally:
                self._queue.task_done()

    async def drain(self) -> None:
        """Wait until every event queued so far is dispatched and delivered (or dropped)."""
        await self._queue.join()
        await self.lanes.drain()

    async def dispatch(self, event: dict[str, Any], *, size: int = 0) -> None:
        """Match `event` against the Alerts and queue a delivery in each one's Provider lane."""
        involved = event["involvedObject"]
        labels: dict[str, str] | None = None
        fetched = False
        for raw in list(self.alerts.values()):
            if self.no_cross_namespace_refs and raw["metadata"].get("namespace") != involved.get(
                "namespace"
            ):
                continue
            try:
                alert = Alert.from_obj(raw)
            except pydantic.ValidationError:
                continue
            if _needs_labels(alert) and not fetched:
                labels, fetched = await self._labels(involved), True
            if not matches(alert, event, labels_of=_constant(labels)):
                continue
            provider = f"{alert.metadata.namespace or 'default'}/{alert.spec.provider_ref.name}"
            enriched = enrich(alert, event)
            self.lanes.submit(
                provider, functools.partial(self._send, alert, raw, enriched), size=size
            )

    async def _labels(self, involved: Mapping[str, Any]) -> dict[str, str] | None:
        try:
            rt = await self.mapper.resource_for(
                str(involved.get("apiVersion", "")), str(involved["kind"])
            )
            obj = await self.client.get(rt, str(involved["name"]), str(involved["namespace"]))
        except KubeError:
            return None
        return dict((obj.get("metadata") or {}).get("labels") or {})

    async def _send(self, alert: Alert, raw_alert: dict[str, Any], event: dict[str, Any]) -> None:
        namespace = alert.namespace
        key = (alert.key, event_key(event))
        provider_raw = self.providers.get(f"{namespace}/{alert.spec.provider_ref.name}")
        events = self.recorder.for_object(raw_alert)
        if provider_raw is None:
            events.warning(
                NotificationReason.NOTIFICATION_DISPATCH_FAILED,
                f"provider '{namespace}/{alert.spec.provider_ref.name}' not found",
            )
            return
        try:
            provider = Provider.from_obj(provider_raw)
        except pydantic.ValidationError as error:
            events.warning(
                NotificationReason.INVALID_CONFIG,
                f"provider is not valid: {error.error_count()} errors",
            )
            return
        if provider.spec.suspend:
            return
        if self.dedup.seen_recently(key, self.clock()):
            return
        try:
            address, token, headers = await self._credentials(provider)
            transport = await transport_for(self.client, provider)
        except SecretError as error:
            events.warning(NotificationReason.NOTIFICATION_DISPATCH_FAILED, redact_urls(str(error)))
            return
        timeout = provider_timeout(provider, maximum=self.max_provider_timeout)
        try:
            await deliver(
                self.session,
                provider,
                event,
                address=address,
                token=token,
                headers=headers,
                timeout=timeout,
                transport=transport,
                alert=raw_alert,
            )
        except DeliveryError as error:
            message = redact_urls(str(error))
            log.warning(
                "notification failed", alert=alert.key, provider=provider.key, error=message
            )
            events.warning(NotificationReason.NOTIFICATION_DISPATCH_FAILED, message)
            return
        self._observer.event_delivered()

    async def _credentials(self, provider: Provider) -> tuple[str, str | None, dict[str, str]]:
        address = provider.spec.address or ""
        token: str | None = None
        headers: dict[str, str] = {}
        ref = provider.spec.secret_ref
        if ref is not None:
            namespace = provider.namespace
            data = await secret_data(self.client, namespace, ref.name)
            address = data.get("address") or address
            token = data.get("token")
            if data.get("headers"):
                try:
                    parsed = yamlloading.load(data["headers"], limits=yamlloading.VALUES_LIMITS)
                except yaml.YAMLError:
                    raise SecretError(
                        f"secret '{namespace}/{ref.name}' key 'headers' is not YAML"
                    ) from None
                if not isinstance(parsed, dict):
                    raise SecretError(f"secret '{namespace}/{ref.name}' key 'headers' is not a map")
                headers = {str(k): str(v) for k, v in parsed.items()}
        if not address:
            raise SecretError(
                f"provider '{provider.key}' has no address (spec.address or secret 'address')"
            )
        return address, token, headers


def provider_timeout(provider: Provider, *, maximum: float) -> float:
    """The Provider's timeout per attempt (15s when unset), capped at `maximum`: a
    tenant's `timeout: 600m` must not hold a delivery slot for ten hours."""
    wanted = (
        parse_duration(provider.spec.timeout).total_seconds()
        if provider.spec.timeout
        else DEFAULT_PROVIDER_TIMEOUT
    )
    return min(wanted, maximum)


def _constant(
    labels: dict[str, str] | None,
) -> Callable[[Mapping[str, Any]], dict[str, str] | None]:
    def labels_of(_: Mapping[str, Any]) -> dict[str, str] | None:
        return labels

    return labels_of


def _needs_labels(alert: Alert) -> bool:
    return any(source.match_labels for source in alert.spec.event_sources)
