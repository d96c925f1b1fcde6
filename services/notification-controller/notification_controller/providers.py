"""Outbound delivery: one event to one Provider, in that Provider's format.

`deliver` builds the request for the Provider's type and sends it, retrying
with exponential backoff on 5xx, 429, connection errors and timeouts, never
on other 4xx, and raises `DeliveryError` when it gives up. The controller
turns that into a warning event on the Alert.

The caller resolves the Provider's secret: `address` and `token` from
`spec.secretRef` take precedence over `spec.address`, and `headers` is the
secret's `headers` map; `deliver` takes them as given and never reads
`spec.address` itself. `timeout` bounds each attempt. Error messages never
carry the token nor the address's credentials, path or query (webhook URLs
are secrets for Slack, Teams and Discord): they name the type, the host and
the status.

Payloads, as Flux sends them:

- `generic`: the event JSON, with `gotk-component` and the secret's headers.
- `generic-hmac`: the same, signed with a timestamp so receivers can reject
  replays (see `signatures`): `X-Signature-Timestamp: <unix seconds>` and
  `X-Signature-Timestamped: sha256=<hex hmac(token, timestamp + "." + body)>`.
  Unlike Flux, no body-only `X-Signature` is sent: it would let anyone
  holding one captured request replay it forever with the timestamp headers
  removed. A Flux receiver, which checks only `X-Signature`, therefore
  refuses these requests; use `generic` with a secret header towards it.
- `slack`: an incoming-webhook message, one attachment coloured by severity
  (`good`/`danger`) with the metadata as fields; `Authorization: Bearer` when
  a token is set (chat.postMessage).
- `discord`: the Slack message to the webhook's Slack-compatible `/slack` URL.
- `msteams`: an Adaptive Card for Workflows webhooks; the legacy MessageCard
  for Office 365 connector URLs (`*.webhook.office.com`).
- `github`, `gitlab`: a commit status on the commit the event is about.
  State `success` for info and `failure` (GitLab `failed`) for error;
  `Progressing` events are skipped, as in Flux. Context (GitLab `name`)
  `<kind>/<name>/<first segment of the Provider's UID>`, lowercased; the
  description is the reason split into words ("reconciliation succeeded").
  The commit is the hash in the `originRevision` or else `revision`
  metadata (`main@sha1:<sha>`, `sha256:<sha>`, legacy `main/<sha>`); an
  event without either is skipped without error. The API is found from the
  repository address: `https://github.com/<owner>/<repo>` posts to
  `https://api.github.com`, any other host is GitHub Enterprise
  (`<scheme>://<host>/api/v3`) — which is also how tests point at a
  GitHub-shaped server on loopback; GitLab is `<scheme>://<host>/api/v4`.

Events carrying `commit_status: update` metadata go to the commit-status
types only, as in Flux.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from notification_controller.commitstatuses import COMMIT_STATUS_TYPES, github, gitlab
from notification_controller.connecting import Transport
from notification_controller.outbound import (
    DeliveryError,
    OutboundRequest,
    Target,
    http_url,
    involved_of,
    json_body,
    metadata_of,
)
from notification_controller.signatures import (
    TIMESTAMP_HEADER,
    TIMESTAMPED_SIGNATURE_HEADER,
    sign,
    timestamped_payload,
)
from sluice_api.notification import Provider
from sluice_runtime import evaluating

__all__ = ["SUPPORTED_TYPES", "DeliveryError", "OutboundRequest", "build_request", "deliver"]

COMPONENT_HEADER = "gotk-component"
"""Names the controller that reported the event, as Flux's forwarder does."""

_MAX_RETRY_AFTER = 30.0
_RETRIABLE_STATUSES = frozenset({429})


async def deliver(
    session: aiohttp.ClientSession,
    provider: Provider,
    event: Mapping[str, Any],
    *,
    address: str,
    token: str | None,
    headers: Mapping[str, str],
    timeout: float,
    transport: Transport | None = None,
    retries: int = 3,
    backoff: float = 0.5,
    clock: Callable[[], float] = time.time,
    alert: Mapping[str, Any] | None = None,
) -> None:
    """Send `event` (already enriched for the Alert) to `provider`.

    Makes up to `1 + retries` attempts, waiting `backoff * 2**n` seconds
    between them (or the server's `Retry-After`, up to 30s, on 429).
    Returns quietly when the event is not for this provider type (a commit
    status without a commit, a Progressing event, a commit status update for
    a chat provider). `transport` carries the Provider's proxy and TLS
    settings (see `connecting`).
    """
    transport = transport or Transport()
    build = functools.partial(
        build_request,
        provider,
        event,
        address=address,
        token=token,
        headers=headers,
        now=clock(),
        alert=alert,
    )
    try:
        # A commitStatusExpr is the tenant's CEL: evaluated in the CEL threads.
        request = await evaluating.off_loop(build) if provider.spec.commit_status_expr else build()
    except evaluating.BudgetExceeded as error:
        raise DeliveryError(f"spec.commitStatusExpr: {error}") from None
    if request is None:
        return
    host = _host(request.url)
    where = f"{provider.spec.type} provider at {host}"
    last_error = f"{where}: no attempt made"
    for attempt in range(retries + 1):
        delay = backoff * 2**attempt
        try:
            async with session.request(
                request.method,
                request.url,
                data=request.body,
                headers={**request.headers, **transport.headers_for(request.url)},
                timeout=aiohttp.ClientTimeout(total=timeout),
                allow_redirects=False,
                proxy=transport.proxy,
                proxy_headers=transport.proxy_headers,
                ssl=transport.ssl if transport.ssl is not None else True,
            ) as answer:
                status = answer.status
                if status < 300:
                    return
                last_error = f"{where} answered {status}"
                if status < 500 and status not in _RETRIABLE_STATUSES:
                    raise DeliveryError(last_error, status=status)
                delay = max(delay, _retry_after(answer.headers.get("Retry-After")))
        except TimeoutError:
            last_error = f"{where} timed out after {timeout:g}s"
        except aiohttp.ClientError as error:
            last_error = f"{where} unreachable: {type(error).__name__}"
        if attempt < retries:
            await asyncio.sleep(delay)
    raise DeliveryError(f"{last_error} (after {retries + 1} attempts)")


def build_request(
    provider: Provider,
    event: Mapping[str, Any],
    *,
    address: str,
    token: str | None,
    headers: Mapping[str, str],
    now: float,
    alert: Mapping[str, Any] | None = None,
) -> OutboundRequest | None:
    """The request `deliver` sends, or None when the event is skipped."""
    kind = provider.spec.type
    if not address:
        raise DeliveryError(f"{kind} provider has no address")
    metadata = metadata_of(event)
    if kind not in COMMIT_STATUS_TYPES and metadata.get("commit_status") == "update":
        return None
    builder = _BUILDERS.get(kind)
    if builder is None:
        raise DeliveryError(f"provider type {kind!r} is not supported")
    return builder(Target(provider, event, address, token or "", dict(headers), now, alert))


# Builders ------------------------------------------------------------------------


def _generic(target: Target) -> OutboundRequest:
    body = json_body(target.event)
    headers = {
        "Content-Type": "application/json",
        COMPONENT_HEADER: str(target.event.get("reportingController", "")),
        **target.headers,
    }
    return OutboundRequest("POST", http_url(target.address), body, headers)


def _generic_hmac(target: Target) -> OutboundRequest:
    if not target.token:
        raise DeliveryError("generic-hmac provider needs a token")
    request = _generic(target)
    timestamp = str(int(target.now))
    # Only the timestamped form: a body-only X-Signature alongside it would
    # verify forever once someone strips the timestamp headers off a capture.
    request.headers[TIMESTAMP_HEADER] = timestamp
    request.headers[TIMESTAMPED_SIGNATURE_HEADER] = sign(
        target.token, timestamped_payload(timestamp, request.body)
    )
    return request


def _slack(target: Target) -> OutboundRequest:
    payload = _slack_payload(target, channel=target.provider.spec.channel)
    headers = {"Content-Type": "application/json"}
    if target.token:
        headers["Authorization"] = f"Bearer {target.token}"
    return OutboundRequest("POST", http_url(target.address), json_body(payload), headers)


def _discord(target: Target) -> OutboundRequest:
    parts = urlsplit(http_url(target.address))
    path = parts.path.rstrip("/")
    if not path.endswith("/slack"):
        path += "/slack"
    url = urlunsplit(parts._replace(path=path))
    payload = _slack_payload(target, channel=None)
    return OutboundRequest("POST", url, json_body(payload), {"Content-Type": "application/json"})


def _msteams(target: Target) -> OutboundRequest:
    url = http_url(target.address)
    event = target.event
    subject = _subject(event)
    facts = sorted(metadata_of(event).items())
    error = event.get("severity") == "error"
    payload: dict[str, Any]
    if (urlsplit(url).hostname or "").endswith("webhook.office.com"):
        payload = {
            "@type": "MessageCard",
            "@context": "http://schema.org/extensions",
            "themeColor": "FF0000" if error else "0076D7",
            "summary": subject,
            "sections": [
                {
                    "activityTitle": str(event.get("message", "")),
                    "activitySubtitle": subject,
                    "facts": [{"name": key, "value": value} for key, value in facts],
                }
            ],
        }
    else:
        card = {
            "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
            "type": "AdaptiveCard",
            "version": "1.4",
            "body": [
                {
                    "type": "TextBlock",
                    "text": subject,
                    "weight": "bolder",
                    "size": "medium",
                    "color": "attention" if error else "good",
                    "wrap": True,
                },
                {"type": "TextBlock", "text": str(event.get("message", "")), "wrap": True},
                {
                    "type": "FactSet",
                    "facts": [{"title": key, "value": value} for key, value in facts],
                },
            ],
        }
        payload = {
            "type": "message",
            "attachments": [
                {"contentType": "application/vnd.microsoft.card.adaptive", "content": card}
            ],
        }
    return OutboundRequest("POST", url, json_body(payload), {"Content-Type": "application/json"})


_BUILDERS: dict[str, Callable[[Target], OutboundRequest | None]] = {
    "generic": _generic,
    "generic-hmac": _generic_hmac,
    "slack": _slack,
    "discord": _discord,
    "msteams": _msteams,
    "github": github,
    "gitlab": gitlab,
}

SUPPORTED_TYPES = frozenset(_BUILDERS)
"""Provider types this hub delivers to; other types are refused on the Provider."""


# Helpers ------------------------------------------------------------------------


def _slack_payload(target: Target, *, channel: str | None) -> dict[str, Any]:
    event = target.event
    payload: dict[str, Any] = {
        "username": target.provider.spec.username or str(event.get("reportingController", "")),
        "attachments": [
            {
                "color": "danger" if event.get("severity") == "error" else "good",
                "author_name": _subject(event),
                "text": str(event.get("message", "")),
                "mrkdwn_in": ["text"],
                "fields": [
                    {"title": key, "value": value, "short": False}
                    for key, value in sorted(metadata_of(event).items())
                ],
            }
        ],
    }
    if channel:
        payload["channel"] = channel
    return payload


def _subject(event: Mapping[str, Any]) -> str:
    """`kustomization/apps.flux-system`, how Flux names the object in chat."""
    involved = involved_of(event)
    kind = str(involved.get("kind", "")).lower()
    return f"{kind}/{involved.get('name', '')}.{involved.get('namespace', '')}"


def _host(url: str) -> str:
    """`host[:port]` of `url`, never its userinfo (`user:token@` is a credential)."""
    netloc = urlsplit(url).netloc.rpartition("@")[2]
    return netloc or "?"


def _retry_after(value: str | None) -> float:
    if not value:
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        return 0.0
    return min(max(seconds, 0.0), _MAX_RETRY_AFTER)
