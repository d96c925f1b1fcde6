"""Git over HTTP(S) on loopback, and repositories for it, for the source-controller's tests.

`GitHttpServer` puts the machine's `git http-backend` (the CGI program every
real git host wraps) behind a small aiohttp server, so clients see the real
smart protocol, v0 to v2, including gzip request bodies and chunked,
streamed responses. It can demand basic auth or a bearer token and serve
TLS with a certificate from a fresh test CA. It counts what clients asked
for, per repository, which is how a test proves that a fetch that found
nothing new downloaded no objects.

The server runs on its own event loop in a thread, so synchronous clients
(the git CLI, pygit2) and the test's own event loop can both use it.

The repositories it serves are made with `gitrepos` (`WorkRepo`,
`generate_history`), and what it counts is recorded as `gitrequests`
(`GitRequest`, `GitStats`); both are importable from here too.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import re
import secrets
import shutil
import ssl
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import IO
from urllib.parse import quote

from aiohttp import web

from sluice_envtest.certificates import make_serving_pki
from sluice_envtest.controlplane import free_port
from sluice_envtest.gitbackend import cgi_headers, feed_body
from sluice_envtest.gitrepos import (
    AUTHOR_EMAIL,
    AUTHOR_NAME,
    EPOCH,
    WorkRepo,
    create_bare_repo,
    generate_history,
    git_environ,
    run_git,
)
from sluice_envtest.gitrequests import GIT_SERVICES, GitRequest, GitStats
from sluice_envtest.lifecycle import Startable
from sluice_envtest.processes import ServerError, log_tail

__all__ = [
    "AUTHOR_EMAIL",
    "AUTHOR_NAME",
    "EPOCH",
    "GitHttpServer",
    "GitRequest",
    "GitStats",
    "WorkRepo",
    "create_bare_repo",
    "generate_history",
    "git_environ",
    "run_git",
]


# git refuses repositories owned by another user ("dubious ownership").
_SERVER_CONFIG = {"safe.directory": "*"}

# What GitHub allows, and what fetching one commit by id needs.
_UPLOAD_PACK_CONFIG = {
    "uploadpack.allowReachableSHA1InWant": "true",
    "uploadpack.allowTipSHA1InWant": "true",
    "uploadpack.allowFilter": "true",
}
_ROUTE = re.compile(
    r"^/(?P<repo>.+?)/(?P<rest>info/refs|git-upload-pack|git-receive-pack|HEAD|objects/.+|info/.+)$"
)


class GitHttpServer(Startable):
    """`git http-backend` on http(s)://127.0.0.1:PORT, serving bare repositories under `root`.

    Use as a context manager or call `start()` and `stop()`. `url(name)` is
    the clone URL of `root/<name>.git`; `create_repo(name)` makes one.
    With `username` and `password`, or `token`, every request needs those
    credentials (either kind will do when both are set).
    """

    def __init__(
        self,
        *,
        root: Path | None = None,
        workdir: Path | None = None,
        username: str | None = None,
        password: str | None = None,
        token: str | None = None,
        tls: bool = False,
        realm: str = "sluice-test-git",
        git_config: Mapping[str, str] | None = None,
        port: int | None = None,
    ) -> None:
        if (username is None) != (password is None):
            raise ValueError("username and password go together")
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="sluice-git-http-"))
        self.root = root or self.workdir / "repos"
        self.username = username
        self.password = password
        self.token = token
        self.realm = realm
        self.port = port or free_port()
        self.tls = tls
        self.base_url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.log_file = self.workdir / "git-http.log"
        self.ca_pem: bytes | None = None
        self.ca_file: Path | None = None
        self._config = {**_SERVER_CONFIG, **_UPLOAD_PACK_CONFIG, **(git_config or {})}
        self._git = shutil.which("git") or "git"
        self._requests: list[GitRequest] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._log = logging.getLogger(f"{__name__}.{self.port}")
        self._backend_log: IO[bytes] | None = None

    def url(self, name: str, *, credentials: bool = False) -> str:
        """The clone URL of `root/<name>.git`; with `credentials`, basic auth embedded."""
        if credentials and self.username is not None:
            scheme, rest = self.base_url.split("://", 1)
            user, password = quote(self.username, safe=""), quote(self.password or "", safe="")
            return f"{scheme}://{user}:{password}@{rest}/{name}.git"
        return f"{self.base_url}/{name}.git"

    def create_repo(self, name: str, *, branch: str = "main") -> WorkRepo:
        """A new bare repository `root/<name>.git` and a working clone of it."""
        return WorkRepo.create(
            self.root / f"{name}.git", work=self.workdir / "work" / name, branch=branch
        )

    def requests(self, repo: str | None = None) -> list[GitRequest]:
        with self._lock:
            return [r for r in self._requests if repo is None or r.repo == repo]

    def stats(self, repo: str | None = None) -> GitStats:
        return GitStats.of(self.requests(repo))

    def start(self, *, timeout: float = 10.0) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._setup_logging()
        context = self._tls_context() if self.tls else None
        self._thread = threading.Thread(
            target=self._serve, args=(context,), name=f"git-http-{self.port}", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(timeout) or self._failure is not None:
            failure = ServerError(
                f"git http server on {self.base_url} did not start: {self._failure}\n"
                f"{log_tail(self.log_file)}"
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
        for handler in list(self._log.handlers):
            self._log.removeHandler(handler)
            handler.close()
        if self._backend_log is not None:
            self._backend_log.close()
            self._backend_log = None
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _setup_logging(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        # http-backend's complaints go to the same file as our access log.
        self._backend_log = open(self.log_file, "ab")  # noqa: SIM115 - closed in stop()
        handler = logging.FileHandler(self.log_file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        self._log.addHandler(handler)
        self._log.setLevel(logging.INFO)

    def _tls_context(self) -> ssl.SSLContext:
        pki = make_serving_pki()
        files = pki.write(self._subdir("tls"))
        self.ca_pem = pki.ca.cert
        self.ca_file = files["ca.crt"]
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(files["tls.crt"], files["tls.key"])
        return context

    def _subdir(self, name: str) -> Path:
        path = self.workdir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _serve(self, context: ssl.SSLContext | None) -> None:
        try:
            asyncio.run(self._main(context))
        except BaseException as error:  # reported by start(), or logged after it
            self._failure = error
            self._log.exception("git http server failed")
        finally:
            self._ready.set()

    async def _main(self, context: ssl.SSLContext | None) -> None:
        app = web.Application(client_max_size=0)
        app.router.add_route("*", "/{path:.*}", self._handle)
        # Bodies reach http-backend as sent, gzip included, as with any web
        # server in front of it; it inflates them itself.
        runner = web.AppRunner(
            app, access_log=self._log, auto_decompress=False, handle_signals=False
        )
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", self.port, ssl_context=context).start()
            self._loop = asyncio.get_running_loop()
            self._stopping = asyncio.Event()
            self._log.info("serving %s on %s", self.root, self.base_url)
            self._ready.set()
            await self._stopping.wait()
        finally:
            await runner.cleanup()

    def _authorize(self, header: str) -> str | None:
        """Who the Authorization header proves the client is; None when it proves nothing."""
        if self.username is None and self.token is None:
            return ""
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "basic" and self.username is not None:
            try:
                given = base64.b64decode(value.strip(), validate=True).decode()
            except ValueError:
                return None
            expected = f"{self.username}:{self.password}"
            if secrets.compare_digest(given.encode(), expected.encode()):
                return self.username
        if (
            scheme.lower() == "bearer"
            and self.token is not None
            and secrets.compare_digest(value.strip().encode(), self.token.encode())
        ):
            return "bearer"
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        route = _ROUTE.match(request.path)
        if route is None:
            return web.Response(status=404, text="not a git repository path\n")
        repo = route["repo"].removesuffix(".git")
        rest = route["rest"]
        service = request.query.get("service", "") if rest == "info/refs" else rest
        if service not in GIT_SERVICES:
            service = ""
        seen = GitRequest(
            method=request.method,
            repo=repo,
            service=service,
            advertisement=rest == "info/refs",
            status=0,
            git_protocol=request.headers.get("Git-Protocol", ""),
            command="",
            request_encoding=request.headers.get("Content-Encoding", ""),
            request_chunked="chunked" in request.headers.get("Transfer-Encoding", ""),
            response_bytes=0,
            user="",
        )
        header = request.headers.get("Authorization", "")
        seen = replace(seen, offered=_offered(header))
        user = self._authorize(header)
        if user is None:
            self._record(replace(seen, status=401))
            return web.Response(
                status=401,
                headers={"WWW-Authenticate": f'Basic realm="{self.realm}"'},
                text="authentication required\n",
            )
        return await self._run_backend(request, replace(seen, user=user))

    def _record(self, entry: GitRequest) -> None:
        with self._lock:
            self._requests.append(entry)

    def _cgi_environ(self, request: web.Request, user: str) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.workdir),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            # Pushes without a length (chunked) are read into memory up to this.
            "GIT_HTTP_MAX_REQUEST_BUFFER": "1g",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": f"HTTP/{request.version.major}.{request.version.minor}",
            "REQUEST_METHOD": request.method,
            "PATH_INFO": request.path,
            "QUERY_STRING": request.query_string,
            "REMOTE_ADDR": request.remote or "127.0.0.1",
            "CONTENT_TYPE": request.headers.get("Content-Type", ""),
        }
        config = dict(self._config)
        # http-backend serves receive-pack to authenticated users only,
        # unless told otherwise; a test server takes pushes from anyone.
        config.setdefault("http.receivepack", "true")
        env["GIT_CONFIG_COUNT"] = str(len(config))
        for index, (key, value) in enumerate(config.items()):
            env[f"GIT_CONFIG_KEY_{index}"] = key
            env[f"GIT_CONFIG_VALUE_{index}"] = value
        if user and user != "bearer":
            env["REMOTE_USER"] = user
        if request.content_length is not None:
            env["CONTENT_LENGTH"] = str(request.content_length)
        encoding = request.headers.get("Content-Encoding")
        if encoding:
            env["HTTP_CONTENT_ENCODING"] = encoding
        protocol = request.headers.get("Git-Protocol")
        if protocol:
            env["GIT_PROTOCOL"] = env["HTTP_GIT_PROTOCOL"] = protocol
        return env

    async def _run_backend(self, request: web.Request, seen: GitRequest) -> web.StreamResponse:
        process = await asyncio.create_subprocess_exec(
            self._git,
            "http-backend",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._backend_log,
            env=self._cgi_environ(request, seen.user),
            cwd=self.root,
        )
        assert process.stdin is not None and process.stdout is not None
        feeding = asyncio.create_task(feed_body(request, process.stdin))
        sent = 0
        try:
            status, reason, headers = await cgi_headers(process.stdout)
            # Always chunked, even where http-backend knows the length, so
            # that the client cannot finish before we have counted.
            headers.pop("Content-Length", None)
            response = web.StreamResponse(status=status, reason=reason, headers=headers)
            await response.prepare(request)
            # Stream: a pack can be far bigger than we want to hold in memory.
            # One chunk is held back, and the request recorded before it goes
            # out: a client that has its answer (libgit2 stops reading at the
            # last pkt-line) may have a test look at the counters at once.
            held = await process.stdout.read(64 * 1024)
            while held:
                chunk = await process.stdout.read(64 * 1024)
                if not chunk:
                    break
                await response.write(held)
                sent += len(held)
                held = chunk
            command = await feeding
            sent += len(held)
            self._record(replace(seen, status=status, response_bytes=sent, command=command))
            try:
                await response.write(held)
                await response.write_eof()
            except ConnectionResetError:
                pass  # libgit2 may hang up as soon as it has read the last pkt-line
        except BaseException:
            # The client went away, or we are shutting down.
            if process.returncode is None:
                process.kill()
            raise
        finally:
            feeding.cancel()
            await process.wait()
        return response


def _offered(header: str) -> str:
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return "bearer"
    if scheme.lower() == "basic":
        try:
            return "basic:" + base64.b64decode(value.strip()).decode().partition(":")[0]
        except ValueError:
            return "basic:?"
    return ""
