"""The webhook receiver: `POST /hook/<digest>` from CI, registries and chat-ops.

Each request is routed by its path through the Receiver cache, checked
(size before reading, then signature, then event type, then the
receiver's rate limit), and only then acted on: a Receiver's resources (those
its CEL filters allow for this body, `filtering.py`) get
`reconcile.fluxcd.io/requestedAt` (reconcile now), or, for Gates, an open or
close request. Answers follow the contract: 404 unknown path, 503 suspended
or not ready, 400 bad signature or payload, 413 too large (64 KiB for a
Receiver with filters), 429 over the
rate limit (with `Retry-After`), 500 when annotating failed, 200 otherwise.
Every rejection is logged with its reason; no log line carries a token, a
signature, or the path of a known Receiver (for `generic`, the path is the
only secret).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pydantic
import structlog
from aiohttp import web

from notification_controller.filtering import (
    MAX_FILTERED_BODY,
    FilterFailed,
    Filters,
    InvalidFilter,
    compile_filters,
    request_of,
)
from notification_controller.limiting import WebhookLimiter
from notification_controller.receivers import Directory
from notification_controller.signatures import event_allowed, timestamp_required, verify
from sluice_api import ALL_KINDS
from sluice_api.gating import (
    CLOSE_REQUESTED_AT_ANNOTATION,
    CLOSE_REQUESTED_BY_ANNOTATION,
    OPEN_REQUESTED_AT_ANNOTATION,
    OPEN_REQUESTED_BY_ANNOTATION,
)
from sluice_api.meta import RECONCILE_REQUESTED_AT_ANNOTATION, format_time
from sluice_api.notification import Receiver, ReceiverResource
from sluice_runtime import evaluating, lanes
from sluice_runtime.conditions import is_ready
from sluice_runtime.informing.watching import Store
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.discovery import RestMapper
from sluice_runtime.kube.errors import KubeError
from sluice_runtime.redacting import redact_urls

log = structlog.get_logger(__name__)

MAX_BODY = 3 * 1024 * 1024

DEFAULT_API_VERSIONS = {
    # Sluice's own kinds, at the version its API serves.
    **{kind.KIND: kind.api_version_str() for kind in ALL_KINDS},
    # Flux kinds Sluice has no model of, at Flux's served versions.
    "ImageRepository": "image.toolkit.fluxcd.io/v1beta2",
    "ImagePolicy": "image.toolkit.fluxcd.io/v1beta2",
    "ImageUpdateAutomation": "image.toolkit.fluxcd.io/v1beta2",
    "ArtifactGenerator": "source.extensions.fluxcd.io/v1beta1",
    # The Flux Operator's kinds (Flux 2.7 Receivers and Alerts may name them).
    "FluxInstance": "fluxcd.controlplane.io/v1",
    "ResourceSet": "fluxcd.controlplane.io/v1",
    "ResourceSetInputProvider": "fluxcd.controlplane.io/v1",
}


class ActionFailed(Exception):
    pass


class ActionRefused(Exception):
    """An action this Receiver may never take; named in the 500 like a failure."""


class WebhookObserver(Protocol):
    """A hook on every action a webhook triggers (tests, the load benchmark)."""

    def webhook_acted(self) -> None: ...


class WebhookServer:
    def __init__(
        self,
        *,
        client: KubeClient,
        mapper: RestMapper,
        receivers: Store,
        directory: Directory,
        limiter: WebhookLimiter,
        replay_window: timedelta | None = None,
        require_timestamps: bool = False,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        observer: WebhookObserver | None = None,
    ) -> None:
        self.client = client
        self.mapper = mapper
        self.receivers = receivers
        self.directory = directory
        self.limiter = limiter
        self.replay_window = replay_window
        self.require_timestamps = require_timestamps
        self.clock = clock
        self._trailing: set[asyncio.Task[None]] = set()
        self._observer = observer

    def app(self) -> web.Application:
        application = web.Application(client_max_size=MAX_BODY)
        application.router.add_post("/hook/{digest}", self.handle)
        application.on_cleanup.append(self._cancel_trailing)
        return application

    async def _cancel_trailing(self, _: web.Application) -> None:
        for task in list(self._trailing):
            task.cancel()

    async def handle(self, request: web.Request) -> web.Response:
        key = self.directory.key_for(request.path)
        raw = self.receivers.get(key) if key else None
        if key is None or raw is None:
            return self._reject(404, "no receiver for this path", request)
        log_ = log.bind(receiver=key)
        try:
            receiver = Receiver.from_obj(raw)
        except pydantic.ValidationError:
            return self._reject(503, "receiver is not valid", request, log_)
        if receiver.spec.suspend:
            return self._reject(503, "receiver is suspended", request, log_)
        token = self.directory.tokens.get(key)
        if not is_ready(raw) or token is None:
            return self._reject(503, "receiver is not ready", request, log_)
        if request.content_length is not None and request.content_length > MAX_BODY:
            # Answered before reading: a huge body costs us nothing.
            return self._reject(413, f"body larger than {MAX_BODY} bytes", request, log_)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._reject(413, f"body larger than {MAX_BODY} bytes", request, log_)
        now = self.clock()
        verdict = verify(
            receiver.spec.type,
            token=token,
            headers=request.headers,
            body=body,
            now=now,
            replay_window=self.replay_window,
            require_timestamp=timestamp_required(
                acts_on_gates=any(r.kind == "Gate" and r.action for r in receiver.spec.resources),
                annotations=receiver.metadata.annotations,
                controller_requires=self.require_timestamps,
            ),
        )
        if not verdict.ok:
            return self._reject(verdict.status, verdict.reason, request, log_)
        if verdict.ping:
            return web.Response(text="pong")
        if not event_allowed(receiver.spec.events, verdict.event):
            return self._reject(400, f"event {verdict.event!r} is not accepted", request, log_)
        filters, req = None, None
        if receiver.spec.resource_filter or any(r.filter for r in receiver.spec.resources):
            if len(body) > MAX_FILTERED_BODY:
                # The filters' values are made of the body: a filtered Receiver
                # takes what push events need, not the 3 MiB a plain one may.
                return self._reject(
                    413,
                    f"body larger than {MAX_FILTERED_BODY} bytes, the limit of a Receiver "
                    "with CEL filters",
                    request,
                    log_,
                )
            try:
                filters, req = compile_filters(receiver), request_of(body)
            except (InvalidFilter, FilterFailed) as error:
                return self._reject(400, str(error), request, log_)
        # A filtered Receiver acts according to the body: only identical ones fold.
        folding = (key, hashlib.sha256(body).hexdigest()) if filters else None
        decision = self.limiter.admit(key, now, debounce_key=folding)
        if not decision.accept:
            retry = str(int(decision.retry_after or 1))
            log_.info("webhook rate limited", retry_after=retry)
            return web.Response(
                status=429, text="too many requests", headers={"Retry-After": retry}
            )
        if decision.act_now:
            try:
                # A verified push is requested work: its patch goes first in this
                # loop and over the requested lane's connections (sluice_runtime.lanes).
                with lanes.serving(True):
                    await self.act(receiver, now, filters=filters, req=req)
            except ActionFailed as error:
                log_.warning("webhook action failed", error=str(error))
                return web.Response(status=500, text=str(error))
        elif decision.act_later_at is not None:
            self._schedule(receiver, decision.act_later_at, filters=filters, req=req)
        log_.info("webhook accepted", webhook_event=verdict.event, acted=decision.act_now)
        return web.Response(text="ok")

    def _reject(
        self, status: int, reason: str, request: web.Request, logger: Any = None
    ) -> web.Response:
        if logger is None:
            # No receiver has this path, so it is no one's secret.
            log.info("webhook rejected", status=status, reason=reason, path=request.path[:80])
        else:
            # The receiver is named instead: its path is its URL's secret (the
            # only one for `generic`), so it is never logged.
            logger.info("webhook rejected", status=status, reason=reason)
        return web.Response(status=status, text=reason)

    async def settle(self) -> None:
        """Wait for the trailing actions scheduled so far (tests, shutdown)."""
        await asyncio.gather(*self._trailing, return_exceptions=True)

    def _schedule(
        self, receiver: Receiver, when: datetime, *, filters: Filters | None, req: Any
    ) -> None:
        async def later() -> None:
            await asyncio.sleep(max(0.0, (when - self.clock()).total_seconds()))
            try:
                with lanes.serving(True):
                    await self.act(receiver, self.clock(), filters=filters, req=req)
            except ActionFailed as error:
                # Its requests were answered 200 already: the log is all that is left.
                log.warning(
                    "webhook action failed", receiver=receiver.key, trailing=True, error=str(error)
                )

        task = asyncio.get_running_loop().create_task(
            later(), name=f"webhook-trailing-{receiver.key}"
        )
        self._trailing.add(task)
        task.add_done_callback(self._trailing.discard)

    async def act(
        self, receiver: Receiver, now: datetime, *, filters: Filters | None = None, req: Any = None
    ) -> None:
        """Annotate every resource of the receiver (those its filters allow for the
        request body `req`); raise ActionFailed naming what failed."""
        if self._observer is not None:
            self._observer.webhook_acted()
        namespace = receiver.namespace
        failures = []
        # One budget for every evaluation this request makes: a wildcard over
        # many objects does not multiply what a body may cost.
        budget = evaluating.Budget()
        for index, resource in enumerate(receiver.spec.resources):
            allows = None
            if filters:
                allows = functools.partial(filters.allows, index, req=req, budget=budget)
            try:
                await self._act_on(receiver, resource, namespace, now, allows=allows)
            except (ActionRefused, FilterFailed) as error:
                failures.append(str(error))
            except KubeError as error:
                where = f"{resource.kind}/{resource.namespace or namespace}/{resource.name}"
                failures.append(f"{where}: {redact_urls(str(error))}")
        if failures:
            raise ActionFailed("; ".join(failures))

    async def _act_on(
        self,
        receiver: Receiver,
        resource: ReceiverResource,
        namespace: str,
        now: datetime,
        *,
        allows: Callable[[Mapping[str, Any]], Awaitable[bool]] | None,
    ) -> None:
        api_version = resource.api_version or DEFAULT_API_VERSIONS.get(resource.kind, "")
        rt = await self.mapper.resource_for(api_version, resource.kind)
        target_ns = resource.namespace or namespace
        if resource.kind == "Gate" and resource.action:
            if target_ns != namespace:
                # The reconcile stalls such a Receiver; this holds even when the
                # cache still has it Ready from before its spec changed.
                raise ActionRefused(
                    f"Gate/{target_ns}/{resource.name}: a Receiver can open or close "
                    "Gates in its own namespace only"
                )
            requested, by = (
                (OPEN_REQUESTED_AT_ANNOTATION, OPEN_REQUESTED_BY_ANNOTATION)
                if resource.action == "open"
                else (CLOSE_REQUESTED_AT_ANNOTATION, CLOSE_REQUESTED_BY_ANNOTATION)
            )
            annotations = {
                requested: format_time(now, fraction="none"),
                by: f"receiver:{receiver.key}",
            }
        else:
            annotations = {RECONCILE_REQUESTED_AT_ANNOTATION: format_time(now, fraction="micro")}
        patch = {"metadata": {"annotations": annotations}}
        if resource.name != "*":
            # A filter reads the object, so it is fetched first; without one, a patch is all.
            if allows is None or await allows(await self.client.get(rt, resource.name, target_ns)):
                await self.client.merge_patch(rt, resource.name, patch, namespace=target_ns)
            return
        selector = ",".join(f"{k}={v}" for k, v in sorted((resource.match_labels or {}).items()))
        listed = await self.client.list(rt, namespace=target_ns, label_selector=selector or None)
        for obj in listed.items:
            if allows is None or await allows(obj):
                name = obj["metadata"]["name"]
                await self.client.merge_patch(rt, name, patch, namespace=target_ns)
