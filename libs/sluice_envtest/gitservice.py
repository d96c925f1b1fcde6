"""GitHub's, GitLab's and Gitea's REST APIs on loopback, backed by real Git repositories.

No public Git service is reachable from the test machines, so `GitServiceApi`
implements, from each service's public REST documentation, the subset that
clients of pull requests, branches and tags call:

- GitHub (Enterprise spelling, `/api/v3`): `GET /repos/{owner}/{repo}/pulls`
  (`state`), `/branches`, `/tags`; `page`/`per_page` (30 by default, 100 at
  most) and a `Link` header; `Authorization: Bearer|token <token>`, 401
  "Bad credentials"; rate limits as 403 or 429 with `X-RateLimit-*` or
  `Retry-After`.
- GitLab (`/api/v4`): `GET /projects/{url-encoded path}/merge_requests`
  (`state`, `labels`), `/repository/branches`, `/repository/tags`;
  `page`/`per_page` (20, 100) with `Link` and `X-Next-Page`/`X-Page`/`X-Total`;
  `PRIVATE-TOKEN` or `Authorization: Bearer`.
- Gitea (`/api/v1`): `GET /repos/{owner}/{repo}/pulls` (`state`), `/branches`,
  `/tags`; `page`/`limit` (at most 50) with `Link` and `X-Total-Count`;
  `Authorization: token|Bearer <token>`.

Branches, tags and a request's head commit are read from the bare repository
at each request, so a push (through `WorkRepo` or the test git server) is
what moves a request's `sha`. Pull requests themselves are the test's own
(`open_request`, `close_request`, `set_labels`); one number space per
repository, shared by the three spellings.

The server records every request (`requests()`: path, query, the
credential presented, the answer's status) so tests assert on what a client
sent and how many pages it followed, and answers the next requests as told
(`answer_next`, `rate_limit`) to stage rate limits and broken answers.
It runs on its own event loop in a thread, as the git test server does.
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import ssl
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlencode

from aiohttp import web

from sluice_envtest.certificates import make_serving_pki
from sluice_envtest.controlplane import free_port
from sluice_envtest.gitrepos import WorkRepo, run_git
from sluice_envtest.lifecycle import Startable
from sluice_envtest.processes import ServerError


@dataclass
class PullRequest:
    """A pull (merge) request of the test's own, on a branch of a served repository."""

    number: int
    branch: str
    title: str
    author: str
    labels: list[str]
    base: str = "main"
    state: str = "open"
    """open, closed or merged."""
    last_sha: str = ""


@dataclass(frozen=True)
class ApiRequest:
    """One request as the server saw it."""

    method: str
    flavor: str
    """github, gitlab or gitea."""
    repo: str
    resource: str
    """pulls, branches or tags."""
    query: Mapping[str, str]
    authorization: str
    """The `Authorization` header, or `PRIVATE-TOKEN: <value>`, as presented."""
    status: int


@dataclass(frozen=True)
class Answer:
    """A canned answer for the next request."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass
class _Repo:
    bare: Path
    requests: dict[int, PullRequest] = field(default_factory=dict)


_STATES = {
    "open": {"open"},
    "opened": {"open"},
    "closed": {"closed", "merged"},
    "merged": {"merged"},
    "all": {"open", "closed", "merged"},
}
"""Which requests a `state` query asks for (GitHub/Gitea `open`, GitLab `opened`)."""
_PAGE_SIZES = {"github": (30, 100), "gitlab": (20, 100), "gitea": (30, 50)}


class GitServiceApi(Startable):
    """The three services' REST subsets on http(s)://127.0.0.1:PORT.

    `url(name)` is the repository's web address (what a provider's spec
    holds); `create_repo(name)` makes a served repository (`owner/repo`, or a
    GitLab `group/sub/project`), `add_repo(name, bare)` serves one that
    exists (a repository of the git test server, so a request's head commit
    can also be fetched). With `token`, every request must present it.
    """

    def __init__(self, *, token: str | None = None, tls: bool = False) -> None:
        self.token = token
        self.tls = tls
        self.port = free_port()
        self.base_url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.workdir = Path(tempfile.mkdtemp(prefix="sluice-git-service-"))
        self.ca_pem: bytes | None = None
        self._repos: dict[str, _Repo] = {}
        self._next_number = 0
        self._answers: list[tuple[str | None, Answer]] = []
        self._seen: list[ApiRequest] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None

    # -- what tests call -----------------------------------------------------------

    def url(self, name: str) -> str:
        return f"{self.base_url}/{name}"

    def create_repo(self, name: str, *, branch: str = "main") -> WorkRepo:
        bare = self.workdir / "repos" / f"{name}.git"
        repo = WorkRepo.create(bare, work=self.workdir / "work" / name, branch=branch)
        self.add_repo(name, bare)
        return repo

    def add_repo(self, name: str, bare: Path) -> None:
        with self._lock:
            self._repos[name] = _Repo(bare)

    def open_request(
        self,
        repo: str,
        *,
        branch: str,
        title: str,
        author: str = "developer",
        labels: Sequence[str] = (),
        base: str = "main",
    ) -> int:
        """A new open request from `branch`; its number (1, 2, ... across the server)."""
        with self._lock:
            self._next_number += 1
            number = self._next_number
            self._repos[repo].requests[number] = PullRequest(
                number, branch, title, author, list(labels), base
            )
        return number

    def close_request(self, repo: str, number: int, *, merged: bool = False) -> None:
        with self._lock:
            self._repos[repo].requests[number].state = "merged" if merged else "closed"

    def set_labels(self, repo: str, number: int, labels: Sequence[str]) -> None:
        with self._lock:
            self._repos[repo].requests[number].labels = list(labels)

    def answer_next(self, answer: Answer, *, times: int = 1, repo: str | None = None) -> None:
        """Answer the next `times` API requests (for `repo`, or any) with `answer` instead
        of serving them."""
        with self._lock:
            self._answers.extend([(repo, answer)] * times)

    def clear_answers(self, repo: str | None = None) -> None:
        """Forget the canned answers not given yet (for `repo`, or all)."""
        with self._lock:
            self._answers = [(r, a) for r, a in self._answers if repo is not None and r != repo]

    def rate_limit(
        self,
        *,
        status: int = 403,
        reset_in: float = 3600.0,
        retry_after: str | None = None,
        times: int = 1,
        repo: str | None = None,
    ) -> int:
        """Refuse the next requests as an exhausted rate limit: GitHub's headers with a
        reset `reset_in` seconds from now (and `Retry-After`, when given); the reset's
        epoch second."""
        reset = int(time.time() + reset_in)
        headers = {
            "X-RateLimit-Limit": "5000",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": str(reset),
            "RateLimit-Reset": str(reset),
        }
        if retry_after is not None:
            headers["Retry-After"] = retry_after
        body = json.dumps({"message": "API rate limit exceeded"}).encode()
        self.answer_next(Answer(status, headers, body), times=times, repo=repo)
        return reset

    def requests(self, repo: str | None = None) -> list[ApiRequest]:
        with self._lock:
            return [r for r in self._seen if repo is None or r.repo == repo]

    # -- lifecycle -------------------------------------------------------------------

    def start(self, *, timeout: float = 10.0) -> None:
        context = None
        if self.tls:
            pki = make_serving_pki()
            files = pki.write(self.workdir)
            self.ca_pem = pki.ca.cert
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(files["tls.crt"], files["tls.key"])
        self._thread = threading.Thread(
            target=self._serve, args=(context,), name=f"git-service-{self.port}", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(timeout) or self._failure is not None:
            failure = ServerError(
                f"git service API on {self.base_url} did not start: {self._failure}"
            )
            self.stop()
            raise failure

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._loop = self._stopping = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _serve(self, context: ssl.SSLContext | None) -> None:
        try:
            asyncio.run(self._main(context))
        except BaseException as error:  # reported by start()
            self._failure = error
        finally:
            self._ready.set()

    async def _main(self, context: ssl.SSLContext | None) -> None:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", self.port, ssl_context=context).start()
            self._loop = asyncio.get_running_loop()
            self._stopping = asyncio.Event()
            self._ready.set()
            await self._stopping.wait()
        finally:
            await runner.cleanup()

    # -- serving ---------------------------------------------------------------------

    def _route(self, raw_path: str) -> tuple[str, str, str] | None:
        """(flavor, repository, resource) of an API path; None when it is not one."""
        path = raw_path.split("?", 1)[0]
        for prefix, flavor in (("/api/v3/repos/", "github"), ("/api/v1/repos/", "gitea")):
            if path.startswith(prefix):
                parts = path.removeprefix(prefix).split("/")
                if len(parts) == 3:
                    return flavor, f"{unquote(parts[0])}/{unquote(parts[1])}", parts[2]
                return None
        if path.startswith("/api/v4/projects/"):
            project, _, rest = path.removeprefix("/api/v4/projects/").partition("/")
            resource = {
                "merge_requests": "pulls",
                "repository/branches": "branches",
                "repository/tags": "tags",
            }.get(rest)
            if resource is not None:
                return "gitlab", unquote(project), resource
        return None

    def _credential(self, flavor: str, request: web.Request) -> tuple[str, str | None]:
        """What the client presented, and the token in it."""
        private = request.headers.get("PRIVATE-TOKEN")
        if flavor == "gitlab" and private is not None:
            return f"PRIVATE-TOKEN: {private}", private
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        schemes = {
            "github": ("bearer", "token"),
            "gitlab": ("bearer",),
            "gitea": ("token", "bearer"),
        }
        if scheme.lower() in schemes[flavor]:
            return header, value.strip()
        return header, None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        route = self._route(request.raw_path)
        if route is None or request.method != "GET":
            return web.json_response({"message": "Not Found"}, status=404)
        flavor, name, resource = route
        shown, token = self._credential(flavor, request)
        query = dict(request.query)

        def seen(status: int) -> None:
            entry = ApiRequest(request.method, flavor, name, resource, query, shown, status)
            with self._lock:
                self._seen.append(entry)

        with self._lock:
            canned = None
            for index, (only, _) in enumerate(self._answers):
                if only is None or only == name:
                    canned = self._answers.pop(index)[1]
                    break
            repo = self._repos.get(name)
        if canned is not None:
            seen(canned.status)
            return web.Response(status=canned.status, headers=canned.headers, body=canned.body)
        if self.token is not None and token != self.token:
            seen(401)
            return web.json_response({"message": "Bad credentials"}, status=401)
        if repo is None:
            seen(404)
            return web.json_response({"message": "Not Found"}, status=404)
        items = await asyncio.to_thread(self._items, flavor, repo, resource, query)
        body, headers = self._page(flavor, request, items)
        seen(200)
        return web.json_response(body, headers=headers)

    def _refs(self, bare: Path) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
        """Branches (name → commit) and tags (name → (tag object, commit)) of `bare`."""
        out = run_git(
            "for-each-ref",
            "--format=%(refname)%00%(objectname)%00%(*objectname)",
            "refs/heads",
            "refs/tags",
            cwd=bare,
        )
        branches: dict[str, str] = {}
        tags: dict[str, tuple[str, str]] = {}
        for line in out.splitlines():
            ref, obj, peeled = line.split("\0")
            if ref.startswith("refs/heads/"):
                branches[ref.removeprefix("refs/heads/")] = obj
            elif ref.startswith("refs/tags/"):
                tags[ref.removeprefix("refs/tags/")] = (obj, peeled or obj)
        return branches, tags

    def _items(
        self, flavor: str, repo: _Repo, resource: str, query: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        branches, tags = self._refs(repo.bare)
        if resource == "branches":
            sha_key = "sha" if flavor == "github" else "id"
            return [{"name": b, "commit": {sha_key: sha}, "protected": False}
                    for b, sha in sorted(branches.items())]  # fmt: skip
        if resource == "tags":
            # Newest-looking first, as the services roughly list them.
            ordered = sorted(tags.items(), reverse=True)
            if flavor == "gitlab":
                return [
                    {"name": t, "target": obj, "commit": {"id": sha}} for t, (obj, sha) in ordered
                ]
            return [{"name": t, "id": obj, "commit": {"sha": sha}} for t, (obj, sha) in ordered]
        if resource != "pulls":
            return []
        with self._lock:
            requests = sorted(repo.requests.values(), key=lambda r: r.number, reverse=True)
            for pr in requests:
                if pr.state == "open" and pr.branch in branches:
                    pr.last_sha = branches[pr.branch]
            requests = [PullRequest(**vars(pr)) for pr in requests]
        state = query.get("state", "opened" if flavor == "gitlab" else "open")
        wanted = _STATES.get(state, set())
        requests = [r for r in requests if r.state in wanted]
        if flavor == "gitlab":
            want = [label for label in query.get("labels", "").split(",") if label]
            requests = [r for r in requests if all(label in r.labels for label in want)]
            return [
                {"id": 1000 + r.number, "iid": r.number, "title": r.title,
                 "state": "opened" if r.state == "open" else r.state,
                 "source_branch": r.branch, "target_branch": r.base, "sha": r.last_sha,
                 "author": {"username": r.author}, "labels": list(r.labels)}
                for r in requests
            ]  # fmt: skip
        return [
            {
                "number": r.number,
                "title": r.title,
                "state": "open" if r.state == "open" else "closed",
                "user": {"login": r.author},
                "labels": [{"name": label} for label in r.labels],
                "head": {"ref": r.branch, "sha": r.last_sha},
                "base": {"ref": r.base},
            }
            for r in requests
        ]

    def _page(
        self, flavor: str, request: web.Request, items: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], dict[str, str]]:
        default, most = _PAGE_SIZES[flavor]
        size_key = "limit" if flavor == "gitea" else "per_page"
        try:
            size = min(max(int(request.query.get(size_key, default)), 1), most)
            page = max(int(request.query.get("page", "1")), 1)
        except ValueError:
            size, page = default, 1
        last = max(math.ceil(len(items) / size), 1)
        chunk = items[(page - 1) * size : page * size]
        # The raw path: GitLab's project id keeps its encoded slashes.
        base = f"{self.base_url}{request.raw_path.split('?', 1)[0]}"

        def link(number: int) -> str:
            return f"{base}?{urlencode({**request.query, 'page': str(number)})}"

        links = []
        if page < last:
            links.append(f'<{link(page + 1)}>; rel="next"')
        links.append(f'<{link(last)}>; rel="last"')
        headers = {"Link": ", ".join(links)}
        if flavor == "gitlab":
            headers["X-Page"] = str(page)
            headers["X-Per-Page"] = str(size)
            headers["X-Total"] = str(len(items))
            headers["X-Next-Page"] = str(page + 1) if page < last else ""
        if flavor == "gitea":
            headers["X-Total-Count"] = str(len(items))
        return chunk, headers
