"""Who may post events to the hub: the controllers, and no one else.

An event makes the hub act with a Provider's credentials (a commit status
with another namespace's GitHub token, a message in its Slack), so an
anonymous POST must not be able to forge one. Every POST carries
`Authorization: Bearer <token>`, accepted when it is either

- the shared token in `--events-token-file` (`sluice dev` and other process
  setups, where controllers run with an admin kubeconfig and have no service
  account), compared in constant time; or
- a service-account token that a TokenReview against the API server
  authenticates as one of `--events-service-accounts` (by default the
  controllers' own accounts in the hub's namespace). A positive answer is
  cached for `ttl` seconds, keyed by the token's hash, so a busy controller
  costs one review a minute; negative answers are not cached.

Refusals are 401 (no, malformed or unknown token) or 403 (a real account
that may not post events), with a message naming the problem but never the
token; 503 when the API server cannot be asked, so producers retry.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus

import structlog

from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import KubeError
from sluice_runtime.tokens import TokenFile, TokenFileError

log = structlog.get_logger(__name__)

DEFAULT_PRODUCERS = (
    "source-controller",
    "kustomize-controller",
    "helm-controller",
    "gating-controller",
)
"""The service accounts of the controllers that post events (charts/sluice/templates/rbac.yaml)."""

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"  # noqa: S105 - an API path
_SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
_CACHE_SIZE = 1024


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    message: str


def service_account_users(names: Iterable[str], *, namespace: str) -> frozenset[str]:
    """`name` (in `namespace`) or `namespace:name` → the account's user name."""
    users = set()
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name.startswith(_SERVICE_ACCOUNT_PREFIX):
            users.add(name)
            continue
        account_ns, _, account = name.rpartition(":")
        users.add(f"{_SERVICE_ACCOUNT_PREFIX}{account_ns or namespace}:{account}")
    return frozenset(users)


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class EventAuthenticator:
    def __init__(
        self,
        *,
        client: KubeClient,
        service_accounts: frozenset[str],
        shared: TokenFile | None = None,
        ttl: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.service_accounts = service_accounts
        self.shared = shared
        self.ttl = ttl
        self.clock = clock
        # sha256(token) -> (user, when the answer expires), oldest first.
        self._reviewed: OrderedDict[bytes, tuple[str, float]] = OrderedDict()
        self.reviews = 0
        """TokenReviews sent, observable by tests."""

    async def check(self, authorization: str | None) -> Refusal | None:
        """None when the caller may post events, else why not."""
        token = bearer(authorization)
        if token is None:
            return Refusal(HTTPStatus.UNAUTHORIZED, "missing bearer token")
        if self._is_shared(token):
            return None
        user = await self._review(token)
        if isinstance(user, Refusal):
            return user
        if user not in self.service_accounts:
            return Refusal(HTTPStatus.FORBIDDEN, f"{user} may not post events")
        return None

    def _is_shared(self, token: str) -> bool:
        if self.shared is None:
            return False
        try:
            expected = self.shared.read()
        except TokenFileError as error:
            log.warning("shared events token unavailable", error=str(error))
            return False
        return hmac.compare_digest(token.encode(), expected.encode())

    async def _review(self, token: str) -> str | Refusal:
        key = hashlib.sha256(token.encode()).digest()
        now = self.clock()
        cached = self._reviewed.get(key)
        if cached is not None and cached[1] > now:
            return cached[0]
        self._reviewed.pop(key, None)
        review = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        self.reviews += 1
        try:
            answer = await self.client.request("POST", TOKEN_REVIEWS, body=review)
        except KubeError as error:
            log.warning("token review failed", error=str(error))
            return Refusal(HTTPStatus.SERVICE_UNAVAILABLE, "cannot verify the token now")
        status = (answer or {}).get("status") or {}
        user = str((status.get("user") or {}).get("username") or "")
        if not status.get("authenticated") or not user:
            return Refusal(HTTPStatus.UNAUTHORIZED, "token not authenticated")
        self._reviewed[key] = (user, now + self.ttl)
        while len(self._reviewed) > _CACHE_SIZE:
            self._reviewed.popitem(last=False)
        return user
