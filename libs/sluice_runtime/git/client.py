"""Async access to Git remotes, each operation in its own `worker` child.

See worker.py for why operations do not run in this process. Here they
become awaitable, bounded by the GitRepository's `timeout` (the child is
killed when it runs over), and their failures typed: authentication (the
secret is wrong or the host is not trusted) versus everything else.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sluice_runtime import lanes
from sluice_runtime.git import advertising
from sluice_runtime.kube.secrets import require
from sluice_runtime.redacting import redact_url

ErrorKind = Literal["auth", "git", "timeout", "internal"]


class GitError(Exception):
    """`message` never shows credentials written into a URL: libgit2's own
    messages may quote the URL, and this one ends up in status and events."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        message = redact_url(message)
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __str__(self) -> str:
        return self.message

    @classmethod
    def timed_out(cls, timeout: float) -> GitError:
        """Past its deadline: a worker's operation, a listing, or a wait for one joined."""
        return cls("timeout", f"git operation timed out after {timeout:g}s")


@dataclass(frozen=True)
class GitAuth:
    """Credentials and trust for one remote, from the GitRepository's secret."""

    username: str | None = None
    password: str | None = None
    bearer_token: str | None = None
    ca: str | None = None
    identity: str | None = None
    identity_pub: str | None = None
    known_hosts: str | None = None

    def as_request(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class Checkout:
    commit: str
    message: str
    received_bytes: int
    received_objects: int
    signature: bytes | None = None
    """The commit's signature; None when unsigned."""
    signed_payload: bytes = b""
    """What the commit's signature covers."""
    tag_object: bytes | None = None
    """The raw annotated tag object of the `tag` asked for; None when lightweight or unasked."""


class _WarmWorkers:
    """A few worker processes started ahead of need.

    Each worker still serves exactly one request (its libgit2 settings are
    that repository's), but the ~80 ms of interpreter start and pygit2
    import happen before the request arrives, off the reconcile's path.
    """

    def __init__(self, size: int = 2) -> None:
        self.size = size
        self._idle: list[asyncio.subprocess.Process] = []
        self._spawning: set[asyncio.Task[None]] = set()

    async def take(self) -> asyncio.subprocess.Process:
        while self._idle:
            proc = self._idle.pop()
            if proc.returncode is None:
                self._refill()
                return proc
        self._refill()
        return await _spawn()

    def _refill(self) -> None:
        while len(self._idle) + len(self._spawning) < self.size:
            task = asyncio.get_running_loop().create_task(self._add(), name="gitworker-spawn")
            self._spawning.add(task)
            task.add_done_callback(self._spawning.discard)

    async def _add(self) -> None:
        self._idle.append(await _spawn())

    async def close(self) -> None:
        for task in list(self._spawning):
            task.cancel()
        for proc in self._idle:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        self._idle.clear()


async def _spawn() -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sluice_runtime.git.worker",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


_workers: dict[asyncio.AbstractEventLoop, _WarmWorkers] = {}


async def close() -> None:
    """At shutdown: the running loop's warm workers and its listing connections."""
    await workers().close()
    await advertising.close()


def workers() -> _WarmWorkers:
    loop = asyncio.get_running_loop()
    if loop not in _workers:
        _workers[loop] = _WarmWorkers()
    return _workers[loop]


async def _run(request: dict[str, Any], *, timeout: float) -> dict[str, Any]:
    proc = await workers().take()
    try:
        # A little more than libgit2's own timeouts, so those report first.
        stdout, stderr = await asyncio.wait_for(
            proc.communicate(json.dumps(request).encode()), timeout + 5
        )
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise GitError.timed_out(timeout) from None
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        raise
    if proc.returncode != 0 or not stdout:
        tail = stderr.decode(errors="replace").strip().splitlines()[-3:]
        raise GitError("internal", f"git worker exited {proc.returncode}: {' '.join(tail)}")
    answer: dict[str, Any] = json.loads(stdout)
    if not answer.get("ok"):
        kind = answer.get("kind", "internal")
        raise GitError(kind if kind in ("auth", "git") else "internal", answer.get("message", ""))
    return answer


def auth_from_secret(data: Mapping[str, str], *, secret: str) -> GitAuth:
    """The credentials of a Git Secret as Flux reads them (`username`/`password`,
    `bearerToken`, `ca.crt`, `identity` with `known_hosts`); raises SecretError
    naming what is missing."""
    if "identity" in data:
        require(dict(data), "known_hosts", secret=secret)
    if "username" in data or "password" in data:
        require(dict(data), "username", "password", secret=secret)
    return GitAuth(
        username=data.get("username"),
        password=data.get("password"),
        bearer_token=data.get("bearerToken"),
        ca=data.get("ca.crt") or data.get("caFile"),
        identity=data.get("identity"),
        identity_pub=data.get("identity.pub"),
        known_hosts=data.get("known_hosts"),
    )


_IN_FLIGHT: dict[tuple[asyncio.AbstractEventLoop, str, GitAuth], asyncio.Task[dict[str, str]]] = {}


async def ls_remote(url: str, auth: GitAuth, *, timeout: float) -> dict[str, str]:
    """The remote's refs, `refs/...` → commit SHA (annotated tags peeled).

    An ls-remote of the same URL with the same credentials already on its
    way is joined rather than sent again: a fleet of GitRepositories on one
    monorepo (Flux's own benchmark) reconciled together asks the server
    once per round trip instead of once per object (issue 19). Its answer is
    one this caller could have had by asking a moment earlier, with its own
    credentials. A requested reconcile (a webhook announcing a push) never
    joins: an ls-remote sent before the push would not show it.
    """
    if lanes.is_requested():
        return await _ls_remote(url, auth, timeout=timeout)
    key = (asyncio.get_running_loop(), url, auth)
    task = _IN_FLIGHT.get(key)
    if task is None:
        task = asyncio.create_task(_ls_remote(url, auth, timeout=timeout), name=f"ls-remote {url}")
        _IN_FLIGHT[key] = task
        task.add_done_callback(functools.partial(_landed, key))
    try:
        # Shielded: one caller cancelled (its reconcile ended) leaves the others theirs.
        return dict(await asyncio.wait_for(asyncio.shield(task), timeout + 5))
    except TimeoutError:
        raise GitError.timed_out(timeout) from None


def _landed(
    key: tuple[asyncio.AbstractEventLoop, str, GitAuth], task: asyncio.Task[dict[str, str]]
) -> None:
    if _IN_FLIGHT.get(key) is task:
        del _IN_FLIGHT[key]
    if not task.cancelled():
        task.exception()  # retrieved: every caller may have gone


async def _ls_remote(url: str, auth: GitAuth, *, timeout: float) -> dict[str, str]:
    """One ls-remote. This is the whole cost of a no-op fetch, so over HTTP(S)
    with the system's trust store it is one request from the event loop
    (`advertising`: no thread, no process, no libgit2 in this process);
    otherwise (SSH, a repository's CA) a worker process sets libgit2's trust
    for that one repository."""
    if advertising.served_here(url, ca=auth.ca):
        try:
            return await advertising.list_refs(
                url,
                username=auth.username,
                password=auth.password,
                bearer_token=auth.bearer_token,
                timeout=timeout,
            )
        except TimeoutError:
            raise GitError.timed_out(timeout) from None
        except advertising.AdvertisementError as error:
            raise GitError("auth" if error.kind == "auth" else "git", error.message) from None
    answer = await _run(
        {"op": "ls_remote", "url": url, "auth": auth.as_request(), "timeout": timeout},
        timeout=timeout,
    )
    return dict(answer["refs"])


async def checkout(
    url: str,
    auth: GitAuth,
    *,
    dest: Path,
    commit: str,
    refspec: str | None,
    depth: int,
    recurse_submodules: bool,
    timeout: float,
    max_size: int | None = None,
    max_files: int | None = None,
    tag: str | None = None,
) -> Checkout:
    answer = await _run(
        {
            "op": "checkout",
            "url": url,
            "auth": auth.as_request(),
            "timeout": timeout,
            "dest": str(dest),
            "commit": commit,
            "refspec": refspec,
            "depth": depth,
            "recurse_submodules": recurse_submodules,
            "max_size": max_size,
            "max_files": max_files,
            "tag": tag,
        },
        timeout=timeout,
    )
    return Checkout(
        commit=answer["commit"],
        message=answer["message"],
        received_bytes=int(answer["received_bytes"]),
        received_objects=int(answer["received_objects"]),
        signature=_unb64(answer.get("signature")),
        signed_payload=_unb64(answer.get("signed_payload")) or b"",
        tag_object=_unb64(answer.get("tag_object")),
    )


def _unb64(value: str | None) -> bytes | None:
    return base64.b64decode(value) if value else None
