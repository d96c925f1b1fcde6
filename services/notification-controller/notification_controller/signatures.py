"""Inbound webhook authentication: is this request really from the Receiver's sender?

Each Receiver type has its own way of proving the caller knows the token
(an HMAC of the body, the token in a header, or nothing but the secret URL).
`verify` applies that check to the raw request and answers a `Verdict` the
HTTP handler turns into a status code. It is pure: the handler reads the body
(within its size limit), looks up the token, and passes the clock in.

Rules that hold for every type:

- Secrets and signatures are compared in constant time (`hmac.compare_digest`).
- A missing signature is a rejection, not a pass.
- A Verdict's `reason` is safe to log: it never contains the token, a computed
  signature, or the signature the caller sent.

Replay protection for `generic-hmac`, beyond Flux. A sender may add
`X-Signature-Timestamp: <unix seconds>`; the request is then in *timestamped
mode*: the signed string is `<timestamp> + "." + <body>`, the signature is
read from `X-Signature-Timestamped` (or, when that header is absent, from
`X-Signature`), and the timestamp must lie within the replay window of `now`
(either side, to allow for clock skew; the controller's `--replay-window`,
5m by default). A request without a timestamp is checked the Flux way
(`X-Signature` over the body alone, which a captured request passes
forever) unless the timestamp is required (`require_timestamp`, with the
reason it names): the webhook server requires it where a replay could do
more than ask for an idempotent reconcile, see `timestamp_required`.
Sluice's own generic-hmac Provider sends only the timestamped form, so its
requests cannot be replayed by stripping the timestamp either way.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from http import HTTPStatus

SIGNATURE_HEADER = "X-Signature"
"""generic-hmac: `<sha1|sha256|sha512>=<hex hmac(token, body)>`, as Flux."""

TIMESTAMP_HEADER = "X-Signature-Timestamp"
"""generic-hmac replay protection: the signing time in unix seconds."""

TIMESTAMPED_SIGNATURE_HEADER = "X-Signature-Timestamped"
"""generic-hmac replay protection: `<algo>=<hex hmac(token, timestamp + "." + body)>`."""

DEFAULT_REPLAY_WINDOW = timedelta(minutes=5)
"""How far a timestamp may be from now when the Receiver sets no window."""

_ALGORITHMS = frozenset({"sha1", "sha256", "sha512"})

_MAX_LOGGED_EVENT = 64


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the handler should do with a webhook request."""

    ok: bool
    """The request is authentic (and well formed where the type requires it)."""

    status: int
    """The HTTP status to answer when rejected; 200 when ok."""

    reason: str
    """Why, safe to log; never the token or a signature."""

    event: str | None = None
    """The sender's event type for `spec.events` filtering; None for types
    that have no event type ("" when the type has one but it was not sent)."""

    ping: bool = False
    """A liveness ping (GitHub's `ping`): answer 200 and do nothing."""

    @classmethod
    def accepted(cls, reason: str, *, event: str | None = None, ping: bool = False) -> Verdict:
        return cls(ok=True, status=HTTPStatus.OK, reason=reason, event=event, ping=ping)

    @classmethod
    def rejected(cls, reason: str, *, status: int = HTTPStatus.BAD_REQUEST) -> Verdict:
        return cls(ok=False, status=status, reason=reason)


def sign(token: str, payload: bytes, *, algorithm: str = "sha256") -> str:
    """`<algorithm>=<hex hmac(token, payload)>`, the value of a signature header."""
    if algorithm not in _ALGORITHMS:
        raise ValueError(f"unsupported signature algorithm {algorithm!r}")
    digest = hmac.new(token.encode(), payload, algorithm).hexdigest()
    return f"{algorithm}={digest}"


def timestamped_payload(timestamp: str, body: bytes) -> bytes:
    """The string a timestamped generic-hmac signature covers."""
    return timestamp.encode() + b"." + body


def event_allowed(events: list[str] | None, event: str | None) -> bool:
    """Whether `spec.events` lets this event type through (case-insensitive).

    No filter allows everything; a type without event types (event None)
    is never filtered, as in Flux; an event type that was not sent ("")
    passes only an empty filter.
    """
    if not events or event is None:
        return True
    wanted = event.casefold()
    return any(candidate.casefold() == wanted for candidate in events)


def verify(
    receiver_type: str,
    *,
    token: str,
    headers: Mapping[str, str],
    body: bytes,
    now: datetime,
    replay_window: timedelta | None = None,
    require_timestamp: str | None = None,
) -> Verdict:
    """Authenticate one webhook request for a Receiver of `receiver_type`.

    `replay_window` bounds a signed timestamp's age (DEFAULT_REPLAY_WINDOW
    when None); `require_timestamp`, when set, is why a generic-hmac request
    must carry one, named in the rejection of a request that does not.
    """
    check = _CHECKS.get(receiver_type)
    if check is None:
        return Verdict.rejected(f"receiver type {receiver_type!r} is not supported")
    if receiver_type in _USES_TOKEN and not token:
        return Verdict.rejected("the receiver's token is empty")
    request = _Request(
        _lowercased(headers),
        body,
        token,
        now,
        replay_window or DEFAULT_REPLAY_WINDOW,
        require_timestamp,
    )
    return check(request)


REPLAY_PROTECTION_ANNOTATION = "notification.toolkit.fluxcd.io/replay-protection"
"""Set to `required` on a Receiver: its generic-hmac requests must carry a signed timestamp."""


def timestamp_required(
    *, acts_on_gates: bool, annotations: Mapping[str, str] | None, controller_requires: bool
) -> str | None:
    """Why a generic-hmac Receiver's requests must carry a signed timestamp, or None.

    A replayed body-only request can only ask again for a reconcile that the
    first one asked for, which is idempotent: Flux accepts it, and so does
    Sluice by default. Opening or closing a Gate is not: a captured "open"
    replayed after the Gate was closed would reopen it.
    """
    if controller_requires:
        return "required by the controller (--require-signed-timestamp)"
    if (annotations or {}).get(REPLAY_PROTECTION_ANNOTATION) == "required":
        return f"required by the Receiver ({REPLAY_PROTECTION_ANNOTATION})"
    if acts_on_gates:
        return "required for a Receiver that opens or closes Gates"
    return None


# Types -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Request:
    headers: dict[str, str]
    body: bytes
    token: str
    now: datetime
    replay_window: timedelta
    require_timestamp: str | None

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


def _generic(_: _Request) -> Verdict:
    return Verdict.accepted("generic receiver, no authentication")


def _generic_hmac(request: _Request) -> Verdict:
    timestamp = request.header(TIMESTAMP_HEADER)
    if timestamp is None and request.require_timestamp is None:
        failure = _check_hmac(request.header(SIGNATURE_HEADER), SIGNATURE_HEADER, request)
        return Verdict.rejected(failure) if failure else Verdict.accepted("signature valid")

    if timestamp is None:
        return Verdict.rejected(
            f"missing {TIMESTAMP_HEADER} header (replay protection {request.require_timestamp})"
        )
    try:
        signed_at = int(timestamp.strip())
    except ValueError:
        return Verdict.rejected(f"malformed {TIMESTAMP_HEADER} header")
    window = request.replay_window
    age = request.now.timestamp() - signed_at
    if abs(age) > window.total_seconds():
        return Verdict.rejected(f"{TIMESTAMP_HEADER} outside the replay window of {window}")

    name = TIMESTAMPED_SIGNATURE_HEADER
    value = request.header(name)
    if value is None:
        name, value = SIGNATURE_HEADER, request.header(SIGNATURE_HEADER)
    payload = timestamped_payload(timestamp.strip(), request.body)
    failure = _check_hmac(value, name, request, payload=payload)
    return Verdict.rejected(failure) if failure else Verdict.accepted("timestamped signature valid")


def _github(request: _Request) -> Verdict:
    failure = _check_hub_signature(request)
    if failure:
        return Verdict.rejected(failure)
    event = request.header("X-GitHub-Event") or ""
    if event.casefold() == "ping":
        return Verdict.accepted("GitHub ping", event=event, ping=True)
    return Verdict.accepted(f"GitHub event {_loggable(event)}", event=event)


def _bitbucket(request: _Request) -> Verdict:
    failure = _check_hub_signature(request)
    if failure:
        return Verdict.rejected(failure)
    event = request.header("X-Event-Key") or ""
    return Verdict.accepted(f"Bitbucket event {_loggable(event)}", event=event)


def _gitlab(request: _Request) -> Verdict:
    failure = _check_token_header(request, "X-Gitlab-Token")
    if failure:
        return Verdict.rejected(failure)
    event = request.header("X-Gitlab-Event") or ""
    return Verdict.accepted(f"GitLab event {_loggable(event)}", event=event)


def _harbor(request: _Request) -> Verdict:
    failure = _check_token_header(request, "Authorization")
    return Verdict.rejected(failure) if failure else Verdict.accepted("Harbor token valid")


def _nexus(request: _Request) -> Verdict:
    name = "X-Nexus-Webhook-Signature"
    value = request.header(name)
    if not value:
        return Verdict.rejected(f"missing {name} header")
    failure = _compare_hex(value.strip(), "sha1", request.token, request.body, name)
    if failure:
        return Verdict.rejected(failure)
    failure = _check_json_object(request.body, "Nexus")
    return Verdict.rejected(failure) if failure else Verdict.accepted("Nexus signature valid")


def _json_only(sender: str) -> Callable[[_Request], Verdict]:
    def check(request: _Request) -> Verdict:
        failure = _check_json_object(request.body, sender)
        return Verdict.rejected(failure) if failure else Verdict.accepted(f"{sender} payload")

    return check


_CHECKS: dict[str, Callable[[_Request], Verdict]] = {
    "generic": _generic,
    "generic-hmac": _generic_hmac,
    "github": _github,
    "gitlab": _gitlab,
    "bitbucket": _bitbucket,
    "harbor": _harbor,
    "nexus": _nexus,
    "dockerhub": _json_only("DockerHub"),
    "quay": _json_only("Quay"),
    "acr": _json_only("ACR"),
}

_USES_TOKEN = frozenset({"generic-hmac", "github", "gitlab", "bitbucket", "harbor", "nexus"})


# Checks ------------------------------------------------------------------------
# Each returns None when the check passes, or a loggable reason.


def _check_hmac(
    value: str | None, name: str, request: _Request, *, payload: bytes | None = None
) -> str | None:
    """`<algo>=<hex>` in header `name`, an HMAC of `payload` (the body by default)."""
    if not value:
        return f"missing {name} header"
    algorithm, sep, signature = value.strip().partition("=")
    if not sep or not signature:
        return f"malformed {name} header, want <algorithm>=<hex>"
    algorithm = algorithm.lower()
    if algorithm not in _ALGORITHMS:
        return f"unsupported signature algorithm in {name} header"
    body = request.body if payload is None else payload
    return _compare_hex(signature, algorithm, request.token, body, name)


def _check_hub_signature(request: _Request) -> str | None:
    """GitHub and Bitbucket Server: `X-Hub-Signature-256` (sha256), else `X-Hub-Signature`.

    When the -256 header is present it alone decides: a sender cannot
    downgrade to sha1 by sending a second, weaker header.
    """
    strong = request.header("X-Hub-Signature-256")
    if strong is not None:
        algorithm, sep, signature = strong.strip().partition("=")
        if not sep or not signature:
            return "malformed X-Hub-Signature-256 header, want sha256=<hex>"
        if algorithm.lower() != "sha256":
            return "X-Hub-Signature-256 header must use sha256"
        return _compare_hex(signature, "sha256", request.token, request.body, "X-Hub-Signature-256")
    legacy = request.header("X-Hub-Signature")
    if legacy is None:
        return "missing X-Hub-Signature-256 or X-Hub-Signature header"
    return _check_hmac(legacy, "X-Hub-Signature", request)


def _check_token_header(request: _Request, name: str) -> str | None:
    value = request.header(name)
    if value is None:
        return f"missing {name} header"
    if not hmac.compare_digest(value.encode(), request.token.encode()):
        return f"{name} header does not match the receiver token"
    return None


def _compare_hex(signature: str, algorithm: str, token: str, body: bytes, name: str) -> str | None:
    try:
        given = bytes.fromhex(signature)
    except ValueError:
        return f"malformed {name} header, the signature is not hex"
    expected = hmac.new(token.encode(), body, algorithm).digest()
    if not hmac.compare_digest(given, expected):
        return f"{name} signature does not match"
    return None


def _check_json_object(body: bytes, sender: str) -> str | None:
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return f"cannot decode the {sender} payload as JSON"
    if not isinstance(payload, dict):
        return f"the {sender} payload is not a JSON object"
    return None


def _lowercased(headers: Mapping[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def _loggable(text: str) -> str:
    """A sender-chosen string, shortened and stripped of control characters."""
    cleaned = "".join(ch if ch.isprintable() else "?" for ch in text[:_MAX_LOGGED_EVENT])
    return repr(cleaned)
