"""The REST APIs of Git services, as the Git-service input providers call them.

Flux Operator's `GitHub*`, `GitLab*` and `Gitea*` provider types list a
repository's open pull (merge) requests, its branches or its tags over the
service's public REST API. This module holds the wire formats, pure: the
first page's address, the authentication header, the next page's address,
the fields read from each item, and what a rate-limit answer asks of us;
`pages` is the only I/O, one GET per page.

- GitHub: `https://github.com/<owner>/<repo>` is served by
  `https://api.github.com`, any other host (GitHub Enterprise) by
  `<scheme>://<host>/api/v3`. `GET /repos/{owner}/{repo}/pulls?state=open`,
  `/branches`, `/tags`, `per_page=100`; the next page is the `Link` header's
  `rel="next"`. `Authorization: Bearer <token>`.
- GitLab: `<scheme>://<host>/api/v4/projects/{url-encoded path}`; the project
  path may have subgroups. `/merge_requests?state=opened&labels=a,b`,
  `/repository/branches`, `/repository/tags`, `per_page=100`; the next page
  is `Link` `rel="next"`, else `X-Next-Page`. `PRIVATE-TOKEN: <token>`.
- Gitea (and Forgejo): `<scheme>://<host>/api/v1/repos/{owner}/{repo}/pulls?state=open`,
  `/branches`, `/tags`, `limit=50` (Gitea's default maximum page size); the
  next page is `Link` `rel="next"`. `Authorization: token <token>`.

A rate-limit answer (429, or 403 with no requests remaining) names when to
come back: `Retry-After` (seconds or an HTTP date), else GitHub's
`X-RateLimit-Reset` or GitLab's `RateLimit-Reset` (epoch seconds). The
provider is not asked again before then, capped at MAX_RATE_LIMIT_WAIT.

Never followed: a next-page address on another origin than the API's (it
would receive the token). Never logged or put in a message: the token, the
answer's body. Bounded: each page's body (MAX_PAGE_BYTES), the pages of one
listing (MAX_PAGES), and the whole listing's time (the caller's timeout).
"""

from __future__ import annotations

import email.utils
import json
import re
import ssl
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import aiohttp

MAX_PAGE_BYTES = 10 << 20
"""The most one page of an answer may hold; a service is not trusted to stop."""
MAX_PAGES = 100
"""The most pages one listing follows (10,000 items at 100 a page)."""
MAX_RATE_LIMIT_WAIT = 3600.0
"""The longest a rate limit holds the provider back; a reset further away is
not believed (GitHub's and GitLab's windows are an hour at most)."""
DEFAULT_RATE_LIMIT_WAIT = 60.0
"""How long to wait when a rate-limit answer names no time."""


class Service(StrEnum):
    GITHUB = "GitHub"
    GITLAB = "GitLab"
    GITEA = "Gitea"


class Listing(StrEnum):
    REQUESTS = "requests"
    BRANCHES = "branches"
    TAGS = "tags"


TYPES: dict[str, tuple[Service, Listing]] = {
    "GitHubPullRequest": (Service.GITHUB, Listing.REQUESTS),
    "GitHubBranch": (Service.GITHUB, Listing.BRANCHES),
    "GitHubTag": (Service.GITHUB, Listing.TAGS),
    "GitLabMergeRequest": (Service.GITLAB, Listing.REQUESTS),
    "GitLabBranch": (Service.GITLAB, Listing.BRANCHES),
    "GitLabTag": (Service.GITLAB, Listing.TAGS),
    "GiteaPullRequest": (Service.GITEA, Listing.REQUESTS),
    "GiteaBranch": (Service.GITEA, Listing.BRANCHES),
    "GiteaTag": (Service.GITEA, Listing.TAGS),
}
"""The provider types built here, by what they list where."""


class ServiceError(Exception):
    """The service could not be asked, or its answer cannot be used; the message says
    why and never holds the token or the answer's body."""


class RateLimited(ServiceError):
    """The service asks us to come back in `wait` seconds."""

    def __init__(self, message: str, *, wait: float) -> None:
        super().__init__(message)
        self.wait = wait


@dataclass(frozen=True)
class Repository:
    """Where a repository's API lives: `api` is the repository's own API address."""

    service: Service
    api: str
    name: str
    """`owner/repo`, or GitLab's project path."""

    @property
    def origin(self) -> str:
        parts = urlsplit(self.api)
        return f"{parts.scheme}://{parts.netloc}"

    @classmethod
    def parse(cls, service: Service, url: str) -> Repository:
        """The repository at `url` (its web address, as the provider spec holds it)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"spec.url '{url}' is not an http(s) address of a {service} repository"
            )
        if parts.username or parts.password:
            raise ValueError("spec.url must not hold credentials; use spec.secretRef")
        path = parts.path.strip("/").removesuffix(".git")
        segments = [s for s in path.split("/") if s]
        host = f"{parts.scheme}://{parts.netloc}"
        if service is Service.GITLAB:
            if len(segments) < 2:
                raise ValueError(f"spec.url '{url}' names no GitLab project (group/project)")
            project = quote("/".join(segments), safe="")
            return cls(service, f"{host}/api/v4/projects/{project}", "/".join(segments))
        if len(segments) != 2:
            raise ValueError(f"spec.url '{url}' names no {service} repository (owner/repo)")
        owner, repo = (quote(s, safe="") for s in segments)
        if service is Service.GITHUB:
            base = "https://api.github.com" if parts.netloc == "github.com" else f"{host}/api/v3"
        else:
            base = f"{host}/api/v1"
        return cls(service, f"{base}/repos/{owner}/{repo}", "/".join(segments))


def first_page(repo: Repository, listing: Listing, *, labels: list[str] | None = None) -> str:
    """The address of the listing's first page."""
    query: dict[str, str] = {}
    if repo.service is Service.GITLAB:
        path = {
            Listing.REQUESTS: "merge_requests",
            Listing.BRANCHES: "repository/branches",
            Listing.TAGS: "repository/tags",
        }[listing]
        if listing is Listing.REQUESTS:
            query["state"] = "opened"
            if labels:
                # The service narrows the list; the labels are checked again here.
                query["labels"] = ",".join(labels)
        query["per_page"] = "100"
    else:
        path = {Listing.REQUESTS: "pulls", Listing.BRANCHES: "branches", Listing.TAGS: "tags"}[
            listing
        ]
        if listing is Listing.REQUESTS:
            query["state"] = "open"
        if repo.service is Service.GITHUB:
            query["per_page"] = "100"
        else:
            query["limit"] = "50"
    return f"{repo.api}/{path}?{urlencode(query)}"


def auth_headers(service: Service, token: str | None) -> dict[str, str]:
    """The request headers, with the token as the service wants it."""
    headers = {"Accept": "application/json", "User-Agent": "sluice-resourceset-controller"}
    if service is Service.GITHUB:
        headers["Accept"] = "application/vnd.github+json"
        headers["X-GitHub-Api-Version"] = "2022-11-28"
    if token:
        if service is Service.GITHUB:
            headers["Authorization"] = f"Bearer {token}"
        elif service is Service.GITLAB:
            headers["PRIVATE-TOKEN"] = token
        else:
            headers["Authorization"] = f"token {token}"
    return headers


_LINK = re.compile(r"<(?P<url>[^>]*)>\s*((?:;\s*[^;,]*)*)")
_REL_NEXT = re.compile(r';\s*rel\s*=\s*"?(?:[^";,]*\s)?next(?:\s[^";,]*)?"?', re.IGNORECASE)


def next_page(repo: Repository, current: str, headers: Mapping[str, str]) -> str | None:
    """The next page's address, from `Link: <...>; rel="next"` or GitLab's `X-Next-Page`;
    None on the last page. An address on another origin is refused: it would get the token."""
    nxt: str | None = None
    for match in _LINK.finditer(headers.get("Link", "")):
        if _REL_NEXT.search(match.group(0)):
            nxt = match["url"].strip()
            break
    if nxt is None and repo.service is Service.GITLAB:
        page = headers.get("X-Next-Page", "").strip()
        if page:
            if not page.isdigit():
                raise ServiceError(f"the {repo.service} API named a next page that is not a number")
            parts = urlsplit(current)
            query = dict(parse_qsl(parts.query))
            query["page"] = page
            nxt = urlunsplit(parts._replace(query=urlencode(query)))
    if nxt is None:
        return None
    parts = urlsplit(nxt)
    if not parts.scheme:
        nxt = repo.origin + ("" if nxt.startswith("/") else "/") + nxt
    elif f"{parts.scheme}://{parts.netloc}" != repo.origin:
        raise ServiceError(
            f"the {repo.service} API named a next page on another host "
            f"({parts.scheme}://{parts.hostname}); not followed"
        )
    return nxt


def rate_limit_wait(status: int, headers: Mapping[str, str], *, now: datetime) -> float | None:
    """Seconds the service asks us to wait before asking again; None when the answer is
    not a rate limit."""
    remaining = headers.get("X-RateLimit-Remaining", headers.get("RateLimit-Remaining", ""))
    retry_after = headers.get("Retry-After", "").strip()
    limited = status == 429 or (status == 403 and (remaining.strip() == "0" or bool(retry_after)))
    if not limited:
        return None
    wait: float | None = None
    if retry_after:
        if retry_after.isdigit():
            wait = float(retry_after)
        else:
            try:
                when = email.utils.parsedate_to_datetime(retry_after)
                wait = (when - now).total_seconds()
            except (TypeError, ValueError):
                wait = None
    if wait is None:
        reset = headers.get("X-RateLimit-Reset", headers.get("RateLimit-Reset", "")).strip()
        if reset.isdigit():
            wait = int(reset) - now.timestamp()
    if wait is None:
        wait = DEFAULT_RATE_LIMIT_WAIT
    return min(max(wait, 1.0), MAX_RATE_LIMIT_WAIT)


@dataclass(frozen=True)
class Item:
    """One pull request, branch or tag, in the service's own terms."""

    name: str
    """The request's number, or the branch's or tag's name."""
    sha: str
    branch: str = ""
    title: str = ""
    author: str = ""
    labels: tuple[str, ...] = field(default_factory=tuple)


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _text(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return ""
    if isinstance(value, int | str):
        return str(value)
    return ""


def parse_items(service: Service, listing: Listing, body: bytes) -> list[Item]:
    """The items of one page; an answer that is not a list of objects is refused."""
    try:
        answer = json.loads(body)
    except ValueError:
        raise ServiceError(f"the {service} API answered with something that is not JSON") from None
    if not isinstance(answer, list) or not all(isinstance(i, dict) for i in answer):
        raise ServiceError(f"the {service} API did not answer with a list of {listing}")
    items = [_item(service, listing, raw) for raw in answer]
    for item in items:
        if not item.name or not item.sha:
            raise ServiceError(f"the {service} API answered with {listing} lacking a name or sha")
    return items


def _item(service: Service, listing: Listing, raw: dict[str, Any]) -> Item:
    if listing is not Listing.REQUESTS:
        # A branch's or tag's commit: GitHub says `commit.sha`, GitLab `commit.id`, Gitea
        # `commit.id` for branches and `commit.sha` for tags.
        sha_key = "id" if service is Service.GITLAB else "sha"
        if service is Service.GITEA and listing is Listing.BRANCHES:
            sha_key = "id"
        return Item(name=_text(raw.get("name")), sha=_text(_get(raw, "commit", sha_key)))
    if service is Service.GITLAB:
        labels = raw.get("labels") or []
        return Item(
            name=_text(raw.get("iid")),
            sha=_text(raw.get("sha")),
            branch=_text(raw.get("source_branch")),
            title=_text(raw.get("title")),
            author=_text(_get(raw, "author", "username")),
            labels=tuple(_text(label) for label in labels if isinstance(label, str)),
        )
    labels = raw.get("labels") or []
    return Item(
        name=_text(raw.get("number")),
        sha=_text(_get(raw, "head", "sha")),
        branch=_text(_get(raw, "head", "ref")),
        title=_text(raw.get("title")),
        author=_text(_get(raw, "user", "login")),
        labels=tuple(_text(_get(label, "name")) for label in labels if isinstance(label, dict)),
    )


def _problem(repo: Repository, status: int, *, token: bool) -> str:
    who = f"the {repo.service} API"
    if status == 401:
        if not token:
            return f"{who} wants credentials (HTTP 401); set spec.secretRef"
        return f"{who} refused the credentials of spec.secretRef (HTTP 401)"
    if status == 403:
        return f"{who} denied access to '{repo.name}' (HTTP 403); check the token's scopes"
    if status == 404:
        return (
            f"{who} found no repository '{repo.name}' (HTTP 404); it does not exist "
            "or the token cannot see it"
        )
    return f"{who} answered HTTP {status} for '{repo.name}'"


async def pages(
    session: aiohttp.ClientSession,
    repo: Repository,
    listing: Listing,
    *,
    token: str | None,
    tls: ssl.SSLContext | bool,
    now: Callable[[], datetime],
    labels: list[str] | None = None,
) -> AsyncGenerator[list[Item], None]:
    """Each page of the listing, in the service's order, until the last page or until the
    caller stops asking. `now()` is the clock a rate limit's reset is read against."""
    url: str | None = first_page(repo, listing, labels=labels)
    headers = auth_headers(repo.service, token)
    seen: set[str] = set()
    while url is not None:
        if url in seen:
            raise ServiceError(f"the {repo.service} API named a page it already gave")
        if len(seen) >= MAX_PAGES:
            raise ServiceError(f"listing {listing} of '{repo.name}' exceeds {MAX_PAGES} pages")
        seen.add(url)
        try:
            async with session.get(
                url, headers=headers, ssl=tls, allow_redirects=False
            ) as response:
                wait = rate_limit_wait(response.status, response.headers, now=now())
                if wait is not None:
                    until = (now() + timedelta(seconds=wait)).strftime("%Y-%m-%dT%H:%M:%SZ")
                    raise RateLimited(
                        f"the {repo.service} API rate limit is exhausted "
                        f"(HTTP {response.status}); asking again at {until}",
                        wait=wait,
                    )
                if response.status != 200:
                    raise ServiceError(_problem(repo, response.status, token=bool(token)))
                body = await response.content.read(MAX_PAGE_BYTES + 1)
                answer_headers = response.headers
        except aiohttp.ClientError as error:
            hint = ""
            if isinstance(error, aiohttp.ClientSSLError):
                hint = " (a private CA goes in spec.certSecretRef's ca.crt)"
            raise ServiceError(
                f"cannot reach the {repo.service} API at {repo.origin}: "
                f"{type(error).__name__}{hint}"
            ) from None
        if len(body) > MAX_PAGE_BYTES:
            raise ServiceError(f"a page of the {repo.service} API exceeds {MAX_PAGE_BYTES} bytes")
        items = parse_items(repo.service, listing, body)
        url = next_page(repo, url, answer_headers)
        yield items
