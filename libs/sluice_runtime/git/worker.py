"""Git operations (checkouts, ref listings), each in a short-lived child process.

libgit2 keeps its trust settings per process: the home directory whose
`.ssh/known_hosts` verifies SSH host keys, the extra CA certificates, the
network timeouts. A GitRepository's (or a provider's) secret decides all three, so each Git
operation runs in a fresh `python -m sluice_runtime.git.worker` that sets
them for that one repository and exits. It also means a hung server or a
crash inside libgit2 costs one killed child, never the controller.

Protocol: one JSON request on stdin (credentials travel here, never in argv
or the environment), one JSON answer on stdout.

Submodules are content the repository's authors control, so they are held
to the same rules as the GitRepository's own URL: only http(s) and ssh
remotes (relative URLs resolve against the parent's), never a path on this
machine; and the secret's credentials go only to the host they were given
for. A checkout is bounded by `max_size`: the packs fetched, and the sum of
the blob sizes of a tree before it is written.
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
from urllib.parse import urljoin, urlsplit

# Messages libgit2 and servers use when credentials are missing or wrong.
_AUTH_PATTERNS = re.compile(
    r"authentication|unauthorized|401|403|credentials|permission denied|"
    r"publickey|auth(?:orization)? (?:required|failed)|too many redirects or authentication",
    re.IGNORECASE,
)
_HOSTKEY_PATTERNS = re.compile(r"hostkey|host key|known_hosts|certificate", re.IGNORECASE)
# `[user@]host:path`, git's scp-like form of an ssh URL.
# Not `<transport>::<address>` (git's remote helpers, `ext::` runs commands).
_SCP_LIKE = re.compile(r"^(?:[^@/:\s]+@)?(?P<host>[A-Za-z0-9.-]+):(?!//|:)")
_DEFAULT_PORTS = {"http": 80, "https": 443, "ssh": 22}


@dataclass(frozen=True)
class CheckoutResult:
    commit: str
    message: str
    received_bytes: int
    received_objects: int
    signature: str | None = None
    """The commit's signature (gpgsig header), base64; None when unsigned."""
    signed_payload: str = ""
    """The bytes the commit's signature covers, base64."""
    tag_object: str | None = None
    """The raw annotated tag object of request["tag"], base64; None for a lightweight tag."""


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


@dataclass
class _Budget:
    """What is left of a checkout's limits, spent by the parent and each submodule."""

    max_size: int
    max_files: int
    bytes_left: int = 0
    files_left: int = 0

    def __post_init__(self) -> None:
        self.bytes_left, self.files_left = self.max_size, self.max_files

    @classmethod
    def of(cls, request: dict[str, Any]) -> _Budget | None:
        if request.get("max_size") is None:
            return None
        return cls(int(request["max_size"]), int(request.get("max_files") or 1 << 62))

    def too_big(self, what: str) -> WorkerError:
        return WorkerError(
            "git",
            f"{what} is larger than the limit of {self.max_size} bytes (--git-checkout-max-size)",
        )


def _callbacks(request: dict[str, Any], *, budget: _Budget | None = None) -> Any:
    """libgit2 callbacks: the request's credentials, strict trust and, with a
    `budget`, a bound on what the fetch receives."""
    import pygit2

    auth = request.get("auth") or {}

    class Callbacks(pygit2.RemoteCallbacks):
        def __init__(self) -> None:
            super().__init__()
            self.attempts = 0
            self.refusal: WorkerError | None = None
            """Why a callback stopped the transfer: libgit2 does not always pass
            the callback's exception on (a submodule update reports a missing
            directory instead)."""

        def refuse(self, kind: str, message: str) -> WorkerError:
            self.refusal = WorkerError(kind, message)
            return self.refusal

        def credentials(self, url: str, username_from_url: str | None, allowed_types: Any) -> Any:
            # libgit2 asks again after a rejection; answering twice with the
            # same secret would only loop, so the second ask means "refused".
            self.attempts += 1
            if self.attempts > 1:
                raise self.refuse("auth", "the server refused the credentials")
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
            raise self.refuse("auth", "the server requires authentication and no credentials fit")

        def certificate_check(self, certificate: Any, valid: bool, host: bytes) -> bool:
            if not valid:
                raise self.refuse(
                    "auth",
                    f"host {host.decode(errors='replace')} is not trusted "
                    "(TLS certificate or SSH host key not verified)",
                )
            return True

        def custom_headers(self) -> list[str] | None:
            token = auth.get("bearer_token")
            return [f"Authorization: Bearer {token}"] if token else None

        def transfer_progress(self, stats: Any) -> None:
            # Raising aborts the transfer: a pack bigger than the checkout
            # may be is never received whole.
            if budget is not None and stats.received_bytes > budget.bytes_left:
                refusal = budget.too_big("fetched pack")
                raise self.refuse(refusal.kind, refusal.message)

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
    budget = _Budget.of(request)
    progress = remote.fetch(refspecs, callbacks=_callbacks(request, budget=budget), depth=depth)
    try:
        commit = repo.get(commit_sha)
    except ValueError:
        commit = None
    if commit is None or not isinstance(commit, pygit2.Commit):
        raise WorkerError("git", f"commit {commit_sha} not found in {request['url']}")
    if budget is not None:
        _spend(repo, commit.tree, budget)
    repo.checkout_tree(commit.tree, strategy=pygit2.enums.CheckoutStrategy.FORCE)
    repo.set_head(commit.id)
    if request.get("recurse_submodules"):
        _update_submodules(repo, request, parent_url=request["url"], budget=budget)
    # Signatures are read here, like everything libgit2 parses from the
    # remote's objects, so that spec.verify never parses them in the controller.
    signature, payload = commit.gpg_signature
    return CheckoutResult(
        commit=str(commit.id),
        message=commit.message.strip().splitlines()[0] if commit.message.strip() else "",
        received_bytes=progress.received_bytes,
        received_objects=progress.received_objects,
        signature=_b64(signature) if signature else None,
        signed_payload=_b64(payload or b""),
        tag_object=_tag_object(repo, request.get("tag")),
    )


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


def _tag_object(repo: Any, tag: str | None) -> str | None:
    import pygit2

    if not tag:
        return None
    reference = repo.references.get(f"refs/tags/{tag}")
    target = repo.get(reference.target) if reference is not None else None
    if not isinstance(target, pygit2.Tag):
        return None
    _, raw = repo.odb.read(target.id)
    return _b64(bytes(raw))


def _spend(repo: Any, tree: Any, budget: _Budget) -> None:
    """Take what checking out `tree` writes from `budget`, refusing to overspend.

    Read from object headers, before anything is written: git compresses
    well, so a small pack can hold a tree far larger than the disk, or
    millions of empty files, each an entry the archive must hold.
    """
    pending = [tree]
    while pending:
        for entry in pending.pop():
            if entry.type_str == "tree":
                pending.append(entry)
            elif entry.type_str == "blob":
                budget.files_left -= 1
                if budget.files_left < 0:
                    raise WorkerError(
                        "git",
                        f"checkout has more than the limit of {budget.max_files} files "
                        "(--artifact-max-files)",
                    )
                budget.bytes_left -= repo.odb.read_header(entry.id)[1]
                if budget.bytes_left < 0:
                    raise budget.too_big("checkout")


def submodule_url(url: str, parent_url: str) -> str:
    """The absolute URL a submodule's `.gitmodules` URL names, or WorkerError.

    Relative URLs (`./x`, `../x`) resolve against the parent's URL, as git
    resolves them against its remote; libgit2 would otherwise resolve them
    against the checkout's directory, a path on this machine.
    """
    if url.startswith(("./", "../")):
        if _SCP_LIKE.match(parent_url) and "://" not in parent_url:
            host, _, path = parent_url.partition(":")
            return f"{host}:{urljoin('/' + path.rstrip('/') + '/', url).lstrip('/')}"
        return urljoin(parent_url.rstrip("/") + "/", url)
    if "://" in url:
        if urlsplit(url).scheme.lower() in ("http", "https", "ssh") and urlsplit(url).hostname:
            return url
    elif _SCP_LIKE.match(url):
        return url
    raise WorkerError(
        "git",
        f"submodule URL '{url}' is not allowed: only http://, https:// and ssh:// URLs "
        "(or URLs relative to the parent's) are checked out, never local paths or file://",
    )


def same_host(url: str, other: str) -> bool:
    """Whether two remote URLs name the same host and port (credentials are per host)."""
    return _origin(url) == _origin(other)


def _origin(url: str) -> tuple[str, int | None]:
    if "://" not in url:
        match = _SCP_LIKE.match(url)
        return ((match["host"] if match else "").lower(), 22)
    parts = urlsplit(url)
    return ((parts.hostname or "").lower(), parts.port or _DEFAULT_PORTS.get(parts.scheme.lower()))


def _update_submodules(
    repo: Any, request: dict[str, Any], *, parent_url: str, budget: _Budget | None
) -> None:
    """Check out every submodule (recursively) at the commit the parent records."""
    import pygit2

    submodules = repo.submodules
    for submodule in list(submodules):
        name = submodule.name
        try:
            url = submodule_url(submodule.url or "", parent_url)
        except WorkerError as error:
            raise WorkerError(error.kind, f"submodule '{submodule.path}': {error}") from None
        submodules.init(submodules=[submodule.path])
        # Our resolution, not libgit2's, is the one fetched from.
        repo.config[f"submodule.{name}.url"] = url
        own = dict(request)
        if not same_host(url, request["url"]):
            # Another host gets no credentials (trust settings stay: they
            # only ever narrow what is accepted).
            auth = dict(request.get("auth") or {})
            for key in ("username", "password", "bearer_token", "identity", "identity_pub"):
                auth.pop(key, None)
            own["auth"] = auth
        callbacks = _callbacks(own, budget=budget)
        try:
            submodules.update(submodules=[submodule.path], callbacks=callbacks, init=True)
            nested = submodules[submodule.path].open()
        except Exception as error:
            cause = callbacks.refusal or classify(error)
            raise WorkerError(
                cause.kind, f"submodule '{submodule.path}' ({url}): {cause.message}"
            ) from None
        if budget is not None:
            # Already written (libgit2 fetches and checks out in one call);
            # the fetch itself was bounded by the same budget.
            _spend(nested, nested.head.peel(pygit2.Commit).tree, budget)
        if list(nested.submodules):
            _update_submodules(nested, request, parent_url=url, budget=budget)


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
