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

`WorkRepo` makes commits, branches and tags with the git CLI in a working
clone and pushes them to a bare repository the servers serve;
`generate_history` writes thousands of commits at once with fast-import.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import random
import re
import secrets
import shutil
import ssl
import subprocess
import tempfile
import threading
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import IO
from urllib.parse import quote

from aiohttp import web

from sluice_envtest.certificates import make_serving_pki
from sluice_envtest.controlplane import free_port
from sluice_envtest.lifecycle import Startable
from sluice_envtest.processes import ServerError, log_tail
from sluice_envtest.signing import SigningKey

AUTHOR_NAME = "Sluice Test"
AUTHOR_EMAIL = "test@sluice.invalid"
# Commit times start here and advance a minute per commit, so that the same
# script of changes always produces the same commit ids.
EPOCH = 1_700_000_000

# git refuses repositories owned by another user ("dubious ownership"), and
# the ssh server's login user is not the one that created them.
_SERVER_CONFIG = {"safe.directory": "*"}
_CLIENT_CONFIG = {
    "safe.directory": "*",
    "init.defaultBranch": "main",
    "commit.gpgSign": "false",
    "tag.gpgSign": "false",
    "advice.detachedHead": "false",
    # Submodules pointing at local paths are refused since git 2.38.1 otherwise.
    "protocol.file.allow": "always",
}
# What GitHub allows, and what fetching one commit by id needs.
_UPLOAD_PACK_CONFIG = {
    "uploadpack.allowReachableSHA1InWant": "true",
    "uploadpack.allowTipSHA1InWant": "true",
    "uploadpack.allowFilter": "true",
}
_ROUTE = re.compile(
    r"^/(?P<repo>.+?)/(?P<rest>info/refs|git-upload-pack|git-receive-pack|HEAD|objects/.+|info/.+)$"
)
_SERVICES = ("git-upload-pack", "git-receive-pack")


def git_environ(
    *,
    home: Path | None = None,
    config: Mapping[str, str] | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """An environment in which git ignores the machine's and the user's configuration.

    Settings go in through GIT_CONFIG_COUNT, which git treats like `-c`, and
    which child git processes (a local push's receive-pack) inherit.
    """
    env = dict(os.environ if base is None else base)
    for name in [n for n in env if n.startswith("GIT_CONFIG_")]:
        del env[name]
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_AUTHOR_NAME": AUTHOR_NAME,
            "GIT_AUTHOR_EMAIL": AUTHOR_EMAIL,
            "GIT_COMMITTER_NAME": AUTHOR_NAME,
            "GIT_COMMITTER_EMAIL": AUTHOR_EMAIL,
            "LC_ALL": "C",
        }
    )
    if home is not None:
        env["HOME"] = str(home)
    settings = {**_CLIENT_CONFIG, **(config or {})}
    env["GIT_CONFIG_COUNT"] = str(len(settings))
    for index, (key, value) in enumerate(settings.items()):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


def run_git(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
) -> str:
    """Run git; its stdout, or RuntimeError with its stderr."""
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env=dict(env) if env is not None else git_environ(),
        input=input,
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"git {' '.join(args)} failed (exit {done.returncode}):\n"
            f"{done.stderr.decode(errors='replace')}"
        )
    return done.stdout.decode(errors="replace")


def create_bare_repo(path: Path, *, branch: str = "main") -> Path:
    """An empty bare repository whose HEAD names `branch`; writable by every user.

    World-writable because the ssh server's login user pushes into
    repositories the test's user created, and vice versa.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    run_git("init", "--quiet", "--bare", "--shared=0777", f"--initial-branch={branch}", str(path))
    return path


class WorkRepo:
    """A working clone whose pushes land in a bare repository that a server serves."""

    def __init__(self, path: Path, *, bare: Path) -> None:
        self.path = path
        self.bare = bare
        self.home = path.parent / f".{path.name}-home"
        self.home.mkdir(parents=True, exist_ok=True)
        self._tick = 0

    @classmethod
    def create(cls, bare: Path, *, work: Path, branch: str = "main") -> WorkRepo:
        """A new bare repository at `bare` (unless it exists) and a clone of it at `work`."""
        if not bare.exists():
            create_bare_repo(bare, branch=branch)
        work.parent.mkdir(parents=True, exist_ok=True)
        run_git("init", "--quiet", f"--initial-branch={branch}", str(work))
        repo = cls(work, bare=bare)
        repo.git("remote", "add", "origin", str(bare))
        if run_git("for-each-ref", "--count=1", "refs/heads", cwd=bare).strip():
            repo.git("fetch", "--quiet", "origin")
            repo.git("checkout", "--quiet", "-B", branch, f"origin/{branch}")
        return repo

    def git(
        self, *args: str, input: bytes | None = None, extra_env: Mapping[str, str] | None = None
    ) -> str:
        env = git_environ(home=self.home)
        env.update(extra_env or {})
        when = f"{EPOCH + 60 * self._tick} +0000"
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = when
        return run_git(*args, cwd=self.path, env=env, input=input)

    def write(self, files: Mapping[str, str | bytes]) -> None:
        for name, content in files.items():
            target = self.path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content)

    def remove(self, *names: str) -> None:
        for name in names:
            target = self.path / name
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink()

    def commit(
        self,
        message: str = "change",
        *,
        files: Mapping[str, str | bytes] | None = None,
        remove: Iterable[str] = (),
        sign: SigningKey | None = None,
    ) -> str:
        """Write `files`, delete `remove`, commit everything (signed with `sign`); the new
        commit's id."""
        self.write(files or {})
        self.remove(*remove)
        self._tick += 1
        self.git("add", "--all")
        if sign is None:
            self.git("commit", "--quiet", "--allow-empty", "--message", message)
        else:
            self.git(*sign.git_config(), "commit", "--quiet", "--allow-empty", "-S",
                     "--message", message, extra_env=sign.env())  # fmt: skip
        return self.head

    def checkout(self, ref: str, *, create: bool = False) -> None:
        """Switch to `ref`; with `create`, a new branch starting at the current commit."""
        self.git("checkout", "--quiet", *(["-b"] if create else []), ref)

    def tag(
        self,
        name: str,
        *,
        message: str | None = None,
        ref: str = "HEAD",
        sign: SigningKey | None = None,
    ) -> str:
        """A lightweight tag, or an annotated one with `message` (signed with `sign`); the
        tagged commit's id."""
        self._tick += 1
        if sign is not None:
            self.git(*sign.git_config(), "tag", "--sign", "--message", message or name, name,
                     ref, extra_env=sign.env())  # fmt: skip
        elif message is None:
            self.git("tag", name, ref)
        else:
            self.git("tag", "--annotate", "--message", message, name, ref)
        return self.rev_parse(f"{name}^{{commit}}")

    def push(self, *refspecs: str, force: bool = True) -> None:
        """Push `refspecs`; by default make the bare repository's branches and tags mirror ours."""
        args = ["push", "--quiet", *(["--force"] if force else [])]
        if refspecs:
            self.git(*args, "origin", *refspecs)
        else:
            self.git(*args, "--prune", "origin", "refs/heads/*:refs/heads/*")
            self.git(*args, "--prune", "origin", "refs/tags/*:refs/tags/*")

    def rev_parse(self, ref: str) -> str:
        return self.git("rev-parse", "--verify", ref).strip()

    @property
    def head(self) -> str:
        return self.rev_parse("HEAD")


def generate_history(
    bare: Path,
    *,
    commits: int,
    branch: str = "main",
    blob_size: int = 0,
    seed: int = 0,
) -> str:
    """Append `commits` commits to `branch` of `bare` with fast-import; the new tip's id.

    Every commit rewrites `counter.txt` and, with `blob_size`, `data.bin`
    with that many random bytes: the checkout stays small while the history
    grows by about `commits * blob_size` bytes, which git cannot compress.
    """
    rng = random.Random(seed)
    parent = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],
        cwd=bare,
        env=git_environ(),
        capture_output=True,
        text=True,
    ).stdout.strip()
    process = subprocess.Popen(
        ["git", "fast-import", "--quiet"],
        cwd=bare,
        env=git_environ(),
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None
    stream = process.stdin
    try:
        for index in range(commits):
            message = f"commit {index + 1} of {commits}\n".encode()
            stream.write(
                f"commit refs/heads/{branch}\n"
                f"committer {AUTHOR_NAME} <{AUTHOR_EMAIL}> {EPOCH + 60 * index} +0000\n"
                f"data {len(message)}\n".encode()
                + message
            )
            if index == 0 and parent:
                stream.write(f"from {parent}\n".encode())
            counter = f"{index + 1}\n".encode()
            stream.write(
                b"M 644 inline counter.txt\n" + f"data {len(counter)}\n".encode() + counter
            )
            if blob_size:
                stream.write(f"M 644 inline data.bin\ndata {blob_size}\n".encode())
                stream.write(rng.randbytes(blob_size))
            stream.write(b"\n")
    except BrokenPipeError:
        pass  # fast-import gave up; its stderr says why
    _, errors = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"git fast-import failed:\n{errors.decode(errors='replace')}")
    return run_git("rev-parse", f"refs/heads/{branch}", cwd=bare).strip()


@dataclass(frozen=True)
class GitRequest:
    """One request the HTTP server answered."""

    method: str
    repo: str
    """The repository's name as in `url(name)`, without `.git`."""
    service: str
    """`git-upload-pack`, `git-receive-pack`, or "" for dumb-protocol files."""
    advertisement: bool
    """A GET of info/refs (the ref advertisement), not a POST to the service."""
    status: int
    git_protocol: str
    """The Git-Protocol header: "version=2" for v2, "" for v0."""
    command: str
    """The protocol v2 command of a POST (`ls-refs`, `fetch`); "" before v2."""
    request_encoding: str
    request_chunked: bool
    response_bytes: int
    """Bytes of the response body, as git http-backend wrote them."""
    user: str
    """Who authenticated: the basic-auth username, "bearer", or ""."""
    offered: str = ""
    """The credentials the client sent, accepted or not: `basic:<username>`
    (never the password), "bearer", or "" for none; shows where a client
    sends a secret it should not."""


@dataclass(frozen=True)
class GitStats:
    """What clients asked of git; subtract an earlier snapshot for what one step did."""

    upload_pack_advertisements: int = 0
    upload_pack_posts: int = 0
    receive_pack_advertisements: int = 0
    receive_pack_posts: int = 0
    upload_pack_bytes: int = 0
    """Response bytes of upload-pack POSTs that negotiate a pack (not v2's ls-refs)."""

    @classmethod
    def of(cls, requests: Iterable[GitRequest]) -> GitStats:
        counts = dict.fromkeys((f.name for f in fields(cls)), 0)
        for request in requests:
            if request.status == 401 or request.service not in _SERVICES:
                continue
            prefix = request.service.removeprefix("git-").replace("-", "_")
            kind = "advertisements" if request.advertisement else "posts"
            counts[f"{prefix}_{kind}"] += 1
            if (
                request.service == "git-upload-pack"
                and not request.advertisement
                and request.command != "ls-refs"
            ):
                counts["upload_pack_bytes"] += request.response_bytes
        return cls(**counts)

    def __sub__(self, other: GitStats) -> GitStats:
        return GitStats(
            **{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)}
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
        if service not in _SERVICES:
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
        feeding = asyncio.create_task(_feed(request, process.stdin))
        sent = 0
        try:
            status, reason, headers = await _cgi_headers(process.stdout)
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


async def _feed(request: web.Request, stdin: asyncio.StreamWriter) -> str:
    """Copy the request body to http-backend; the protocol v2 command it starts with."""
    command = ""
    first = True
    try:
        async for chunk in request.content.iter_chunked(64 * 1024):
            if first:
                command = _v2_command(chunk, request.headers.get("Content-Encoding", ""))
                first = False
            stdin.write(chunk)
            await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # http-backend stopped reading: it has said what it wanted to
    finally:
        stdin.close()
    return command


def _v2_command(chunk: bytes, encoding: str) -> str:
    if encoding in ("gzip", "x-gzip"):
        try:
            chunk = zlib.decompressobj(wbits=31).decompress(chunk, 64)
        except zlib.error:
            return ""
    # The first pkt-line of a v2 request: 4 hex digits of length, "command=<name>\n".
    found = re.match(rb"[0-9a-f]{4}command=([a-z-]+)", chunk)
    return found.group(1).decode() if found else ""


async def _cgi_headers(stdout: asyncio.StreamReader) -> tuple[int, str, dict[str, str]]:
    status, reason = 200, "OK"
    headers: dict[str, str] = {}
    while True:
        line = (await stdout.readline()).decode("latin-1").rstrip("\r\n")
        if not line:
            break
        name, _, value = line.partition(":")
        if name.lower() == "status":
            code, _, reason = value.strip().partition(" ")
            status = int(code)
        else:
            headers[name.strip()] = value.strip()
    if not headers and status == 200:
        return 502, "Bad Gateway", {}
    return status, reason or "OK", headers
