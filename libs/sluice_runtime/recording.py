"""Events: Kubernetes Events for `kubectl describe`, and the same event for alerts.

Every transition a controller reports becomes a core/v1 Event on the object
(repeats of the same event bump its count instead of piling up objects) and,
when `--events-addr` is set, the Flux event JSON POSTed to the
notification-controller, which turns it into alerts. Both are sent by
background senders (`DEFAULT_SENDERS` at once, each owning the objects
whose uid hashes to it), so a slow notification endpoint never slows a
reconcile and Events keep up with status under load; events of severity
`trace` are recorded but never POSTed, as in Flux.

The hub accepts events only from the controllers: each POST carries
`Authorization: Bearer <token>`, the token read (again when it rotates) from
`--events-token-file`, or else from the pod's service-account token (see
`tokens`). A controller with neither still POSTs, and the hub refuses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import aiohttp
import structlog

from sluice_api.meta import format_time
from sluice_runtime import resolving
from sluice_runtime.kube.attributing import attributed
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import KubeError, NotFound
from sluice_runtime.kube.resources import EVENT
from sluice_runtime.tokens import TokenFile, TokenFileError

log = structlog.get_logger(__name__)

EventType = Literal["Normal", "Warning"]
Severity = Literal["info", "error", "trace"]

_MAX_PENDING = 2000
_POST_ATTEMPTS = 3
DEFAULT_SENDERS = 8
"""Events in flight at once. One sender per process let Events lag Ready by tens of
seconds under load (1.4-1.6 of 2 Events per app were written when the last of 1,000
Kustomizations went Ready); each sender owns the objects whose uid hashes to it, so
one object's Events keep their order and a repeat is counted on the Event its first
occurrence created (Flux's aggregation)."""


@dataclass(frozen=True, slots=True)
class InvolvedObject:
    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> InvolvedObject:
        meta = obj.get("metadata") or {}
        return cls(
            api_version=str(obj.get("apiVersion", "")),
            kind=str(obj.get("kind", "")),
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace") or "default"),
            uid=str(meta.get("uid", "")),
        )

    @property
    def group(self) -> str:
        return self.api_version.split("/")[0] if "/" in self.api_version else ""

    def as_json(self) -> JSON:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
        }


@dataclass(frozen=True, slots=True)
class Event:
    involved: InvolvedObject
    type: EventType
    severity: Severity
    reason: str
    message: str
    metadata: Mapping[str, str]
    time: datetime

    def prefixed_metadata(self) -> dict[str, str]:
        """Metadata keys under the involved object's API group, as Flux writes them
        (`revision` → `source.toolkit.fluxcd.io/revision`)."""
        prefix = self.involved.group
        return {
            (key if "/" in key or not prefix else f"{prefix}/{key}"): value
            for key, value in self.metadata.items()
        }

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What makes two events the same one (a repeat bumps the first's count)."""
        return (self.involved.uid, self.type, self.reason, self.message)

    def kubernetes_json(self, *, controller: str, instance: str) -> JSON:
        """The core/v1 Event written for this event's first occurrence."""
        involved = self.involved
        stamp = format_time(self.time, fraction="none")
        digest = hashlib.sha256("\x00".join(self.key).encode()).hexdigest()[:10]
        name = f"{involved.name}.{int(self.time.timestamp() * 1e6):x}{digest}"[:253]
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": name,
                "namespace": involved.namespace,
                "annotations": self.prefixed_metadata(),
            },
            "involvedObject": involved.as_json(),
            "reason": self.reason,
            "message": self.message[:1024],
            "type": self.type,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": controller},
            "reportingComponent": controller,
            "reportingInstance": instance,
        }

    def flux_json(self, *, controller: str, instance: str) -> JSON:
        """The event as Flux controllers POST it to the notification-controller."""
        metadata = self.prefixed_metadata()
        body: JSON = {
            "involvedObject": self.involved.as_json(),
            "severity": self.severity,
            "timestamp": format_time(self.time, fraction="none"),
            "message": self.message,
            "reason": self.reason,
            "reportingController": controller,
            "reportingInstance": instance,
        }
        if metadata:
            body["metadata"] = metadata
        return body


class EventRecorder:
    """One per process; `for_object` gives the handle reconciles use."""

    def __init__(
        self,
        client: KubeClient,
        *,
        controller: str,
        events_addr: str | None = None,
        events_token: TokenFile | None = None,
        instance: str | None = None,
        senders: int = DEFAULT_SENDERS,
    ) -> None:
        self.client = client
        self.controller = controller
        self.instance = instance or socket.gethostname()
        self.events_addr = _normalize_addr(events_addr) if events_addr else None
        self.events_token = events_token
        if senders < 1:
            raise ValueError("an event recorder needs at least one sender")
        self._lanes: list[asyncio.Queue[Event]] = [
            asyncio.Queue(maxsize=max(_MAX_PENDING // senders, 1)) for _ in range(senders)
        ]
        self.in_flight = 0
        self.in_flight_peak = 0
        """Events being written right now, and the most there have been at once."""
        # (uid, type, reason, message) -> (event name, count), to aggregate repeats.
        self._seen: OrderedDict[tuple[str, str, str, str], tuple[str, int]] = OrderedDict()
        self._session: aiohttp.ClientSession | None = None
        self.posted = 0
        self.dropped = 0

    def for_object(self, obj: Mapping[str, Any]) -> ObjectRecorder:
        return ObjectRecorder(self, InvolvedObject.of(obj))

    def record(self, event: Event) -> None:
        lane = self._lanes[_lane_of(event.involved, len(self._lanes))]
        try:
            lane.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning("event dropped, queue full", reason=event.reason)

    async def flushed(self) -> None:
        """Returns once every event recorded so far has been written (or given up)."""
        for lane in self._lanes:
            await lane.join()

    @contextlib.asynccontextmanager
    async def running(self, *, drain_timeout: float = 5.0) -> AsyncIterator[EventRecorder]:
        self._session = aiohttp.ClientSession(
            connector=resolving.connector(lookup_timeout=15),
            timeout=aiohttp.ClientTimeout(total=15),
        )
        loop = asyncio.get_running_loop()
        senders = [
            loop.create_task(self._send_loop(lane), name=f"event-sender-{i}")
            for i, lane in enumerate(self._lanes)
        ]
        try:
            yield self
        finally:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.flushed(), drain_timeout)
            for sender in senders:
                sender.cancel()
            for sender in senders:
                with contextlib.suppress(asyncio.CancelledError):
                    await sender
            await self._session.close()

    async def _send_loop(self, lane: asyncio.Queue[Event]) -> None:
        while True:
            event = await lane.get()
            involved = event.involved
            key = f"{involved.namespace}/{involved.name}".lstrip("/")
            self.in_flight += 1
            self.in_flight_peak = max(self.in_flight_peak, self.in_flight)
            try:
                with attributed(key=key, phase="events"):
                    await self._write_kubernetes_event(event)
                if self.events_addr and event.severity != "trace":
                    await self._post(event)
            except Exception:  # never let one event stop the others
                log.exception("event delivery failed", reason=event.reason)
            finally:
                self.in_flight -= 1
                lane.task_done()

    async def _write_kubernetes_event(self, event: Event) -> None:
        involved = event.involved
        key = event.key
        seen = self._seen.get(key)
        if seen is not None:
            name, count = seen
            try:
                await self.client.merge_patch(
                    EVENT,
                    name,
                    {"count": count + 1, "lastTimestamp": format_time(event.time, fraction="none")},
                    namespace=involved.namespace,
                )
                self._seen[key] = (name, count + 1)
                self._seen.move_to_end(key)
                return
            except NotFound:
                pass  # expired (events live an hour); create a new one
            except KubeError as error:
                log.warning("event update failed", error=str(error))
                return
        body = event.kubernetes_json(controller=self.controller, instance=self.instance)
        name = body["metadata"]["name"]
        try:
            await self.client.create(EVENT, body, namespace=involved.namespace)
        except KubeError as error:
            log.warning("event create failed", error=str(error))
            return
        self._seen[key] = (name, 1)
        while len(self._seen) > 4096:
            self._seen.popitem(last=False)

    async def _post(self, event: Event) -> None:
        assert self._session is not None and self.events_addr is not None
        body = event.flux_json(controller=self.controller, instance=self.instance)
        headers: dict[str, str] = {}
        if self.events_token is not None:
            try:
                headers["Authorization"] = f"Bearer {self.events_token.read()}"
            except TokenFileError as error:
                log.warning("event not posted", error=str(error), reason=event.reason)
                return
        for attempt in range(_POST_ATTEMPTS):
            try:
                async with self._session.post(
                    self.events_addr, json=body, headers=headers
                ) as answer:
                    if answer.status < 500:
                        if answer.status >= 300:
                            log.warning("event rejected", status=answer.status, reason=event.reason)
                        else:
                            self.posted += 1
                        return
            except (aiohttp.ClientError, TimeoutError) as error:
                if attempt == _POST_ATTEMPTS - 1:
                    log.warning("event post failed", error=str(error) or type(error).__name__)
                    return
            await asyncio.sleep(0.5 * 2**attempt)


@dataclass
class ObjectRecorder:
    """Events about one object; reconciles call `normal`/`warning`."""

    recorder: EventRecorder | None
    involved: InvolvedObject
    sent: list[Event] = field(default_factory=list)
    holding: bool = False
    """Events wait in `held` until `release()`: a source's first reconcile runs
    before its finalizer is in place, and a NewArtifact event must not announce
    an artifact whose object was deleted meanwhile (`drop()`)."""
    held: list[Event] = field(default_factory=list)

    def release(self) -> None:
        self.holding = False
        if self.recorder is not None:
            for event in self.held:
                self.recorder.record(event)
        self.held.clear()

    def drop(self) -> None:
        self.holding = False
        self.held.clear()

    def event(
        self,
        type_: EventType,
        reason: str,
        message: str,
        *,
        metadata: Mapping[str, str] | None = None,
        severity: Severity | None = None,
    ) -> None:
        event = Event(
            involved=self.involved,
            type=type_,
            severity=severity or ("error" if type_ == "Warning" else "info"),
            reason=reason,
            message=message,
            metadata=dict(metadata or {}),
            time=datetime.now(UTC),
        )
        self.sent.append(event)
        if self.holding:
            self.held.append(event)
        elif self.recorder is not None:
            self.recorder.record(event)

    def normal(self, reason: str, message: str, **kw: Any) -> None:
        self.event("Normal", reason, message, **kw)

    def warning(self, reason: str, message: str, **kw: Any) -> None:
        self.event("Warning", reason, message, **kw)


def _lane_of(involved: InvolvedObject, lanes: int) -> int:
    """The sender that owns an object: the same for every Event of it."""
    identity = involved.uid or f"{involved.kind}/{involved.namespace}/{involved.name}"
    return int.from_bytes(hashlib.blake2b(identity.encode(), digest_size=4).digest()) % lanes


def _normalize_addr(addr: str) -> str:
    return addr if addr.startswith(("http://", "https://")) else f"http://{addr}"
