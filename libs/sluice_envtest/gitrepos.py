"""Git repositories for the test servers to serve, made with the git CLI.

`WorkRepo` makes commits, branches and tags in a working clone and pushes
them to a bare repository the servers serve; `generate_history` writes
thousands of commits at once with fast-import. Commit times are fixed, so the
same script of changes always produces the same commit ids, and git runs
without the machine's or the user's configuration.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from sluice_envtest.signing import SigningKey

AUTHOR_NAME = "Sluice Test"
AUTHOR_EMAIL = "test@sluice.invalid"
# Commit times start here and advance a minute per commit, so that the same
# script of changes always produces the same commit ids.
EPOCH = 1_700_000_000


# git refuses repositories owned by another user ("dubious ownership"), and
# the ssh server's login user is not the one that created them.
_CLIENT_CONFIG = {
    "safe.directory": "*",
    "init.defaultBranch": "main",
    "commit.gpgSign": "false",
    "tag.gpgSign": "false",
    "advice.detachedHead": "false",
    # Submodules pointing at local paths are refused since git 2.38.1 otherwise.
    "protocol.file.allow": "always",
}


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
