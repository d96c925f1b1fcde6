"""The Git half of the source-controller, run in a short-lived child process.

libgit2 keeps its trust settings per process: the home directory whose
`.ssh/known_hosts` verifies SSH host keys, the extra CA certificates, the
network timeouts. A GitRepository's secret decides all three, so each Git
operation runs in a fresh `python -m source_controller.gitworker` that sets
them for that one repository and exits. It also means a hung server or a
crash inside libgit2 costs one killed child, never the controller.

Protocol: one JSON request on stdin (credentials travel here, never in argv
or the environment), one JSON answer on stdout.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Messages libgit2 and servers use when credentials are missing or wrong.
_AUTH_PATTERNS = re.compile(
    r"authentication|unauthorized|401|403|credentials|permission denied|"
    r"publickey|auth(?:orization)? (?:required|failed)|too many redirects or authentication",
    re.IGNORECASE,
)
_HOSTKEY_PATTERNS = re.compile(r"hostkey|host key|known_hosts|certificate", re.IGNORECASE)


@dataclass(frozen=True)
class CheckoutResult:
    commit: str
    message: str
    received_bytes: int
    received_objects: int


class WorkerError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def _configure(request: dict[str, Any], home: Path) -> None:
    import pygit2

    auth = request.get("auth") or {}
    # Host keys are checked against <home>/.ssh/known_hosts: exactly the
    # secret's known_hosts, and nothing when the secret has none.
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(mode=0o700)
    (ssh_dir / "known_hosts").write_text(auth.get("known_hosts") or "")
    pygit2.option(pygit2.enums.Option.SET_HOMEDIR, str(home))
    ca = auth.get("ca")
    if ca:
        # The repository's CA is added to the system trust store, as Flux does.
        ca_file = home / "ca.crt"
        ca_file.write_text(ca)
        system = "/etc/ssl/certs/ca-certificates.crt"
        if os.path.exists(system):
            ca_file.write_text(Path(system).read_text() + "\n" + ca)
        pygit2.settings.set_ssl_cert_locations(str(ca_file), None)
    timeout_ms = int(float(request.get("timeout", 60)) * 1000)
    pygit2.option(pygit2.enums.Option.SET_SERVER_CONNECT_TIMEOUT, timeout_ms)
    pygit2.option(pygit2.enums.Option.SET_SERVER_TIMEOUT, timeout_ms)


def _callbacks(request: dict[str, Any]) -> Any:
    import pygit2

    auth = request.get("auth") or {}

    class Callbacks(pygit2.RemoteCallbacks):
        def __init__(self) -> None:
            super().__init__()
            self.attempts = 0

        def credentials(self, url: str, username_from_url: str | None, allowed_types: Any) -> Any:
            # libgit2 asks again after a rejection; answering twice with the
            # same secret would only loop, so the second ask means "refused".
            self.attempts += 1
            if self.attempts > 1:
                raise WorkerError("auth", "the server refused the credentials")
            kinds = pygit2.enums.CredentialType
            if allowed_types & kinds.SSH_KEY and auth.get("identity"):
                return pygit2.KeypairFromMemory(
                    username_from_url or auth.get("username") or "git",
                    auth.get("identity_pub"),
                    auth["identity"],
                    auth.get("password") or "",
                )
            if allowed_types & kinds.USERPASS_PLAINTEXT and auth.get("username"):
                return pygit2.UserPass(auth["username"], auth.get("password") or "")
            raise WorkerError("auth", "the server requires authentication and no credentials fit")

        def certificate_check(self, certificate: Any, valid: bool, host: bytes) -> bool:
            if not valid:
                raise WorkerError(
                    "auth",
                    f"host {host.decode(errors='replace')} is not trusted "
                    "(TLS certificate or SSH host key not verified)",
                )
            return True

        def custom_headers(self) -> list[str] | None:
            token = auth.get("bearer_token")
            return [f"Authorization: Bearer {token}"] if token else None

    return Callbacks()


def ls_remote(request: dict[str, Any], scratch: Path) -> dict[str, str]:
    """Every ref the remote advertises, tags peeled to the commit they name."""
    import pygit2

    return list_refs(pygit2.init_repository(str(scratch / "probe.git"), bare=True), request)


def list_refs(repo: Any, request: dict[str, Any]) -> dict[str, str]:
    """`ls_remote` through an anonymous remote of `repo` (nothing is stored in it)."""
    remote = repo.remotes.create_anonymous(request["url"])
    refs: dict[str, str] = {}
    peeled: dict[str, str] = {}
    for head in remote.list_heads(callbacks=_callbacks(request)):
        name = str(head.name)
        if name.endswith("^{}"):
            peeled[name[:-3]] = str(head.oid)
        else:
            refs[name] = str(head.oid)
    refs.update(peeled)
    return refs


def checkout(request: dict[str, Any], scratch: Path) -> CheckoutResult:
    """Fetch one commit (shallowly where the ref allows) and write its tree to `dest`."""
    import pygit2

    dest = Path(request["dest"])
    repo = pygit2.init_repository(str(dest))
    remote = repo.remotes.create_anonymous(request["url"])
    refspec: str | None = request.get("refspec")
    commit_sha: str = request["commit"]
    depth = int(request.get("depth", 1))
    # Without a ref to follow (a pinned commit), the commit may be anywhere.
    refspecs = (
        [refspec]
        if refspec
        else ["+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"]
    )
    progress = remote.fetch(refspecs, callbacks=_callbacks(request), depth=depth)
    try:
        commit = repo.get(commit_sha)
    except ValueError:
        commit = None
    if commit is None or not isinstance(commit, pygit2.Commit):
        raise WorkerError("git", f"commit {commit_sha} not found in {request['url']}")
    repo.checkout_tree(commit.tree, strategy=pygit2.enums.CheckoutStrategy.FORCE)
    repo.set_head(commit.id)
    if request.get("recurse_submodules"):
        _update_submodules(repo, request)
    return CheckoutResult(
        commit=str(commit.id),
        message=commit.message.strip().splitlines()[0] if commit.message.strip() else "",
        received_bytes=progress.received_bytes,
        received_objects=progress.received_objects,
    )


def _update_submodules(repo: Any, request: dict[str, Any]) -> None:
    """Check out every submodule (recursively) at the commit the parent records."""
    submodules = repo.submodules
    submodules.init()
    submodules.update(callbacks=_callbacks(request), init=True)
    for submodule in submodules:
        nested = submodule.open()
        if list(nested.submodules):
            _update_submodules(nested, request)


def classify(error: BaseException) -> WorkerError:
    if isinstance(error, WorkerError):
        return error
    text = str(error) or type(error).__name__
    if _AUTH_PATTERNS.search(text) or _HOSTKEY_PATTERNS.search(text):
        return WorkerError("auth", text)
    return WorkerError("git", text)


def main() -> None:
    # Loaded before the request arrives: the parent keeps warm workers idle
    # here, so a request pays for none of the start-up.
    import pygit2  # noqa: F401

    text = sys.stdin.read()
    if not text:
        return  # released unused (shutdown)
    request = json.loads(text)
    with tempfile.TemporaryDirectory(prefix="sluice-git-") as tmp:
        scratch = Path(tmp)
        home = scratch / "home"
        home.mkdir()
        try:
            _configure(request, home)
            if request["op"] == "ls_remote":
                answer: dict[str, Any] = {"ok": True, "refs": ls_remote(request, scratch)}
            elif request["op"] == "checkout":
                answer = {"ok": True, **asdict(checkout(request, scratch))}
            else:
                raise WorkerError("internal", f"unknown operation {request['op']!r}")
        except Exception as error:
            classified = classify(error)
            answer = {"ok": False, "kind": classified.kind, "message": classified.message}
            if classified.kind == "internal" or not str(error):
                answer["trace"] = traceback.format_exc(limit=5)
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    main()
