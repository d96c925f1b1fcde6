"""notification-controller: receives webhooks and sends alerts.

Wiring only: the Receiver controller and its webhook server
(`--receiver-addr`), the Alert controller (it validates), and the event
hub (`--events-addr`, which here is the address this controller listens
on, as in Flux) with its Alert dispatcher.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Protocol

import aiohttp

from notification_controller import alerts, authenticating, provider_objects, receivers
from notification_controller import hub as hub_module
from notification_controller.hub import EventHub, HubObserver
from notification_controller.limiting import Dedup, WebhookLimiter
from notification_controller.webhooks import WebhookObserver, WebhookServer
from sluice_api import Alert, Gate, Provider, Receiver
from sluice_runtime import app, resolving
from sluice_runtime.endpoints import serving
from sluice_runtime.kube.discovery import RestMapper
from sluice_runtime.kube.resources import ResourceType
from sluice_runtime.tokens import TokenFile

SERVICE = "notification-controller"
KINDS = (Receiver, Alert, Provider, Gate)
"""Every kind this process reads; startup fails clearly if one is not served."""
FORWARD_EVENTS = False
"""This controller is where events go: it never POSTs its own to itself."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(events_addr=":9090")
    parser.add_argument("--receiver-addr", default=":9292", help="webhook receiver address")
    parser.add_argument(
        "--rate-limit-interval",
        type=app.duration,
        default=300.0,
        help="an identical event for one object is sent at most once per interval",
    )
    app.no_cross_namespace_refs(
        parser, help="Alerts see only events of their namespace; Receivers act only on it"
    )
    parser.add_argument(
        "--receiver-rate", type=float, default=5.0, help="webhooks per second per receiver"
    )
    parser.add_argument("--receiver-burst", type=int, default=20)
    parser.add_argument(
        "--receiver-debounce",
        type=app.duration,
        default=2.0,
        help="pushes within this window trigger one reconcile (plus one trailing)",
    )
    parser.add_argument(
        "--provider-timeout-max",
        type=app.duration,
        default=hub_module.MAX_PROVIDER_TIMEOUT,
        help="cap on a Provider's spec.timeout, per attempt",
    )
    parser.add_argument(
        "--provider-concurrency",
        type=int,
        default=2,
        help="deliveries in flight per Provider; a slow one cannot hold every worker",
    )
    parser.add_argument(
        "--provider-backlog",
        type=int,
        default=100,
        help="deliveries waiting per Provider before new ones are dropped",
    )
    parser.add_argument(
        "--event-queue-bytes",
        type=app.size,
        default=hub_module.DEFAULT_QUEUE_BYTES,
        help="bytes of events queued or awaiting delivery before new ones are refused (503)",
    )
    parser.add_argument(
        "--events-service-accounts",
        default=",".join(authenticating.DEFAULT_PRODUCERS),
        help=(
            "service accounts whose tokens may post events, comma-separated `name` (in "
            "$RUNTIME_NAMESPACE) or `namespace:name`; --events-token-file names a shared "
            "token also accepted"
        ),
    )
    parser.add_argument(
        "--replay-window",
        type=app.duration,
        default=300.0,
        help=(
            "how recent a generic-hmac request's signed X-Signature-Timestamp must be "
            "(0: the default, 5m)"
        ),
    )
    app.switch(
        parser,
        "--require-signed-timestamp",
        help=(
            "every generic-hmac request must carry a signed timestamp; by default Flux's "
            "body-only X-Signature is accepted except by Receivers that open or close Gates "
            "or are annotated notification.toolkit.fluxcd.io/replay-protection: required"
        ),
    )


class NotificationObserver(HubObserver, WebhookObserver, Protocol):
    """What the hub and the webhook server report, in one observer."""


@dataclass
class Wiring:
    """What `setup` starts besides the controllers, typed, for the tests and
    benchmarks that drive the servers directly; set once `setup` has run."""

    observer: NotificationObserver | None = None
    """Told of every webhook action and every event the hub handles."""
    webhooks: WebhookServer = field(init=False)
    hub: EventHub = field(init=False)
    receiver_port: int = field(init=False)
    events_port: int = field(init=False)

    async def setup(self, runtime: app.Runtime) -> None:
        """Wire Receivers, the webhook server and the event hub."""
        options = runtime.options
        directory = receivers.Directory()
        receiver_rt = ResourceType.of_model(Receiver)
        receiver_informer = runtime.informers.get(receiver_rt, selected=True)
        receiver_informer.add_handler(directory.on_change)
        runtime.controller(
            receivers.reconciler(directory, no_cross_namespace_refs=options.no_cross_namespace_refs)
        )
        mapper = RestMapper(runtime.client)
        webhooks = WebhookServer(
            client=runtime.client,
            mapper=mapper,
            receivers=receiver_informer.store,
            directory=directory,
            limiter=WebhookLimiter(
                rate=options.receiver_rate,
                burst=options.receiver_burst,
                window=timedelta(seconds=options.receiver_debounce),
            ),
            replay_window=timedelta(seconds=options.replay_window)
            if options.replay_window
            else None,
            require_timestamps=options.require_signed_timestamp,
            observer=self.observer,
        )
        self.webhooks = webhooks
        receiving = await runtime.stack.enter_async_context(
            serving(webhooks.app(), options.receiver_addr)
        )
        self.receiver_port = int(receiving.addresses[0][1])

        runtime.controller(alerts.reconciler())
        runtime.controller(provider_objects.reconciler())

        session = aiohttp.ClientSession(connector=resolving.connector())  # provider hosts
        runtime.stack.push_async_callback(session.close)
        hub = EventHub(
            client=runtime.client,
            mapper=mapper,
            alerts=runtime.informers.get(ResourceType.of_model(Alert), selected=True).store,
            providers=runtime.informers.get(ResourceType.of_model(Provider), selected=True).store,
            recorder=runtime.recorder,
            session=session,
            dedup=Dedup(timedelta(seconds=options.rate_limit_interval)),
            authenticator=authenticating.EventAuthenticator(
                client=runtime.client,
                service_accounts=authenticating.service_account_users(
                    options.events_service_accounts.split(","), namespace=app.runtime_namespace()
                ),
                shared=TokenFile(Path(options.events_token_file))
                if options.events_token_file
                else None,
            ),
            no_cross_namespace_refs=options.no_cross_namespace_refs,
            queue_bytes=options.event_queue_bytes,
            provider_concurrency=options.provider_concurrency,
            provider_backlog=options.provider_backlog,
            max_provider_timeout=options.provider_timeout_max,
            observer=self.observer,
        )
        self.hub = hub
        await hub.start()
        runtime.stack.push_async_callback(hub.stop)
        listening = await runtime.stack.enter_async_context(serving(hub.app(), options.events_addr))
        self.events_port = int(listening.addresses[0][1])


async def setup(runtime: app.Runtime) -> None:
    await Wiring().setup(runtime)


main = app.entry_point(
    service=SERVICE,
    doc=__doc__,
    kinds=KINDS,
    setup=setup,
    concurrency=4,
    add_arguments=add_arguments,
    forward_events=FORWARD_EVENTS,
)
"""The console script (`[project.scripts]`)."""


if __name__ == "__main__":
    main()
