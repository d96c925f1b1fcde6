"""sshd serves git to the git CLI and to libgit2, and checks keys as a real host does."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

from sluice_envtest.gitserver import WorkRepo, git_environ, run_git
from sluice_envtest.processes import ServerError
from sluice_envtest.sshserver import (
    KeyKind,
    SshGitServer,
    generate_key,
    known_hosts_line,
    ssh_client,
)


def ssh_env(server: SshGitServer, **overrides: str) -> dict[str, str]:
    env = git_environ()
    env["GIT_SSH_COMMAND"] = server.git_ssh_command()
    env.update(overrides)
    return env


def seeded(server: SshGitServer, name: str) -> WorkRepo:
    repo = server.create_repo(name)
    repo.commit("first", files={"README.md": f"# {name}\n"})
    repo.tag("v0.1.0")
    repo.push()
    return repo


class KnownHostsCheck(pygit2.RemoteCallbacks):
    """What a careful client does: accept the host key only if libgit2 found it valid."""

    def __init__(self, server: SshGitServer) -> None:
        super().__init__(
            credentials=pygit2.KeypairFromMemory("git", server.identity_pub, server.identity, "")
        )
        self.seen: list[bool] = []

    def certificate_check(self, certificate: None, valid: bool, host: bytes) -> bool:
        self.seen.append(valid)
        return valid


@pytest.fixture
def libgit2_home(tmp_path: Path) -> Iterator[Path]:
    """Where libgit2 looks for .ssh/known_hosts; process-wide, so restored afterwards."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    before = pygit2.settings.homedir
    pygit2.settings.homedir = str(home)
    yield home
    pygit2.settings.homedir = before or os.path.expanduser("~")


@pytest.mark.parametrize("version", ["0", "2"])
def test_git_clones_over_ssh_checking_the_host_key(
    git_ssh: SshGitServer, tmp_path: Path, version: str
) -> None:
    name = f"team/clone-v{version}"
    repo = seeded(git_ssh, name)
    assert git_ssh.url(name) == f"ssh://git@127.0.0.1:{git_ssh.port}/{name}.git"
    run_git(
        "-c", f"protocol.version={version}", "clone", "-q", git_ssh.url(name), str(tmp_path),
        env=ssh_env(git_ssh),
    )  # fmt: skip
    assert run_git("rev-parse", "HEAD", cwd=tmp_path).strip() == repo.head
    commands = git_ssh.commands(name)
    assert [c.service for c in commands] == ["git-upload-pack"]
    assert commands[0].git_protocol == ("version=2" if version == "2" else "")


def test_known_hosts_lines_name_the_port(git_ssh: SshGitServer) -> None:
    (line,) = git_ssh.known_hosts.splitlines()
    host, kind, key = line.split()
    assert host == f"[127.0.0.1]:{git_ssh.port}"
    assert kind == "ssh-ed25519"
    assert key.startswith("AAAA")
    assert git_ssh.identity.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert git_ssh.identity_pub.startswith("ssh-ed25519 AAAA")


def test_git_refuses_a_host_key_it_does_not_know(git_ssh: SshGitServer, tmp_path: Path) -> None:
    seeded(git_ssh, "strict")
    other = tmp_path / "known_hosts"
    other.write_text(known_hosts_line(git_ssh.port, generate_key().public_key))  # another key
    command = git_ssh.git_ssh_command().replace(str(git_ssh.known_hosts_file), str(other))
    done = subprocess.run(
        ["git", "clone", "-q", git_ssh.url("strict"), str(tmp_path / "clone")],
        env=ssh_env(git_ssh, GIT_SSH_COMMAND=command),
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert "HOST IDENTIFICATION HAS CHANGED" in done.stderr


def test_an_unknown_client_key_is_refused(git_ssh: SshGitServer, tmp_path: Path) -> None:
    seeded(git_ssh, "locked")
    stranger = tmp_path / "stranger"
    stranger.write_text(generate_key().private_key)
    stranger.chmod(0o600)
    done = subprocess.run(
        ["git", "clone", "-q", git_ssh.url("locked"), str(tmp_path / "clone")],
        env=ssh_env(git_ssh, GIT_SSH_COMMAND=git_ssh.git_ssh_command(identity_file=stranger)),
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert "Permission denied (publickey)" in done.stderr


def test_only_git_commands_are_served(git_ssh: SshGitServer) -> None:
    done = subprocess.run(
        [*git_ssh.git_ssh_command().split(), "-p", str(git_ssh.port), "git@127.0.0.1", "id"],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert "git-upload-pack and git-receive-pack only" in done.stderr


def test_pushes_over_ssh_land_in_repositories_the_test_created(
    git_ssh: SshGitServer, tmp_path: Path
) -> None:
    repo = seeded(git_ssh, "pushed")
    env = ssh_env(git_ssh)
    run_git("clone", "-q", git_ssh.url("pushed"), str(tmp_path), env=env)
    (tmp_path / "new.txt").write_text("over ssh\n")
    run_git("add", "new.txt", cwd=tmp_path, env=env)
    run_git("commit", "-q", "-m", "over ssh", cwd=tmp_path, env=env)
    run_git("push", "-q", "origin", "main", cwd=tmp_path, env=env)
    pushed = run_git("rev-parse", "HEAD", cwd=tmp_path, env=env).strip()
    assert run_git("rev-parse", "main", cwd=repo.bare).strip() == pushed
    # ... and the test's own pushes still work on top of the login user's.
    repo.git("pull", "-q", "origin", "main")
    repo.commit("after", files={"after.txt": "x\n"})
    repo.push()


@pytest.mark.parametrize(
    ("kind", "pem"),
    [
        pytest.param("ed25519", False, id="ed25519-openssh"),
        pytest.param("rsa", False, id="rsa-openssh"),
        pytest.param("rsa", True, id="rsa-pem"),
        pytest.param("ecdsa", True, id="ecdsa-pem"),
    ],
)
def test_libgit2_clones_with_in_memory_keys(
    git_ssh: SshGitServer, libgit2_home: Path, tmp_path: Path, kind: KeyKind, pem: bool
) -> None:
    name = f"libgit2-{kind}-{'pem' if pem else 'openssh'}"
    repo = seeded(git_ssh, name)
    key = generate_key(kind, pem=pem)
    git_ssh.authorize(key.public_key)
    (libgit2_home / ".ssh" / "known_hosts").write_text(git_ssh.known_hosts)

    callbacks = KnownHostsCheck(git_ssh)
    callbacks.credentials = pygit2.KeypairFromMemory("git", key.public_key, key.private_key, "")
    cloned = pygit2.clone_repository(
        git_ssh.url(name), str(tmp_path / "clone"), callbacks=callbacks
    )
    assert str(cloned.head.target) == repo.head
    assert callbacks.seen == [True]


def test_libgit2_clones_with_key_files(
    git_ssh: SshGitServer, libgit2_home: Path, tmp_path: Path
) -> None:
    seeded(git_ssh, "libgit2-files")
    public = tmp_path / "id.pub"
    public.write_text(git_ssh.identity_pub)
    (libgit2_home / ".ssh" / "known_hosts").write_text(git_ssh.known_hosts)
    callbacks = KnownHostsCheck(git_ssh)
    callbacks.credentials = pygit2.Keypair("git", str(public), str(git_ssh.identity_file), "")
    cloned = pygit2.clone_repository(
        git_ssh.url("libgit2-files"), str(tmp_path / "clone"), callbacks=callbacks
    )
    assert not cloned.is_empty


def test_how_libgit2_treats_host_keys(
    git_ssh: SshGitServer, libgit2_home: Path, tmp_path: Path
) -> None:
    """What pygit2 1.21 / libgit2 1.9 do with SSH host keys, for the source-controller.

    libgit2 checks the host key against `<home>/.ssh/known_hosts`, home being
    $HOME when pygit2 was imported or `pygit2.settings.homedir`, and hands
    the verdict to certificate_check as `valid` (the certificate argument is
    always None: a callback cannot see the key itself). pygit2's default
    certificate_check passes through, and pygit2 turns a pass-through for
    SSH into "accept": without a callback any host key is accepted.
    """
    seeded(git_ssh, "hostkeys")
    known_hosts = libgit2_home / ".ssh" / "known_hosts"
    credentials = pygit2.KeypairFromMemory("git", git_ssh.identity_pub, git_ssh.identity, "")
    url = git_ssh.url("hostkeys")

    # No known_hosts: the careful callback is told the key is not valid...
    careful = KnownHostsCheck(git_ssh)
    with pytest.raises(pygit2.GitError, match="invalid or unknown remote ssh hostkey") as refused:
        pygit2.clone_repository(url, str(tmp_path / "a"), callbacks=careful)
    assert type(refused.value).__name__ == "CertificateError"
    assert careful.seen == [False]
    # ... while pygit2's own default accepts it.
    trusting = pygit2.RemoteCallbacks(credentials=credentials)
    assert not pygit2.clone_repository(url, str(tmp_path / "b"), callbacks=trusting).is_empty

    # Another key for [127.0.0.1]:PORT: not valid either, and again the default does not care.
    known_hosts.write_text(known_hosts_line(git_ssh.port, generate_key().public_key))
    careful = KnownHostsCheck(git_ssh)
    with pytest.raises(pygit2.GitError, match="invalid or unknown remote ssh hostkey"):
        pygit2.clone_repository(url, str(tmp_path / "c"), callbacks=careful)
    assert careful.seen == [False]
    assert not pygit2.clone_repository(url, str(tmp_path / "d"), callbacks=trusting).is_empty

    # The server's own line: valid.
    known_hosts.write_text(git_ssh.known_hosts)
    careful = KnownHostsCheck(git_ssh)
    assert not pygit2.clone_repository(url, str(tmp_path / "e"), callbacks=careful).is_empty
    assert careful.seen == [True]

    # A line without the port matches too (libssh2 falls back to the bare host).
    known_hosts.write_text(git_ssh.known_hosts.replace(f"[127.0.0.1]:{git_ssh.port}", "127.0.0.1"))
    careful = KnownHostsCheck(git_ssh)
    assert not pygit2.clone_repository(url, str(tmp_path / "f"), callbacks=careful).is_empty
    assert careful.seen == [True]


def test_libgit2_reads_home_once(git_ssh: SshGitServer, tmp_path: Path) -> None:
    """$HOME set after pygit2 is imported is not where libgit2 looks."""
    seeded(git_ssh, "late-home")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "known_hosts").write_text(git_ssh.known_hosts)
    script = (
        "import os, sys, pygit2\n"
        "os.environ['HOME'] = sys.argv[2]\n"
        "class Check(pygit2.RemoteCallbacks):\n"
        "    def certificate_check(self, certificate, valid, host):\n"
        "        print('valid' if valid else 'invalid'); return valid\n"
        "key = pygit2.KeypairFromMemory('git', sys.argv[3], sys.argv[4], '')\n"
        "try:\n"
        "    pygit2.clone_repository(sys.argv[1], sys.argv[5], callbacks=Check(credentials=key))\n"
        "except pygit2.GitError as error:\n"
        "    print(error)\n"
    )
    args = [git_ssh.url("late-home"), str(home), git_ssh.identity_pub, git_ssh.identity]
    late = subprocess.run(
        [sys.executable, "-c", script, *args, str(tmp_path / "late")],
        env={**os.environ, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert late.stdout.split("\n")[:2] == ["invalid", "invalid or unknown remote ssh hostkey"]
    early = subprocess.run(
        [sys.executable, "-c", script, *args, str(tmp_path / "early")],
        env={**os.environ, "HOME": str(home)},
        capture_output=True,
        text=True,
    )
    assert early.stdout.strip() == "valid", early.stderr


@pytest.fixture
def reachable_dir() -> Iterator[Path]:
    """A work directory under /tmp: pytest's own are closed to sshd's login user."""
    path = Path(tempfile.mkdtemp(prefix="sluice-test-ssh-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_sshd_dies_with_the_session(reachable_dir: Path) -> None:
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from sluice_envtest.sshserver import SshGitServer\n"
        "server = SshGitServer(workdir=Path(sys.argv[1]))\n"
        "server.start()\n"
        "print(server.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    session = subprocess.Popen(
        [sys.executable, "-c", script, str(reachable_dir)], stdout=subprocess.PIPE, text=True
    )
    assert session.stdout is not None
    try:
        pid = int(session.stdout.readline())
        os.kill(pid, 0)  # running
    finally:
        session.kill()
        session.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    pytest.fail("sshd outlived the session that started it")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root's sshd runs as another user")
def test_an_unreachable_work_directory_is_explained(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="cannot enter /tmp/pytest-of-root"):
        SshGitServer(workdir=tmp_path / "ssh").start()


def test_debians_ssh_client_works_where_the_system_has_none(
    git_ssh: SshGitServer, tmp_path: Path
) -> None:
    ssh = ssh_client(prefer_system=False)
    from sluice_envtest.debian import cache_root

    assert str(ssh).startswith(str(cache_root())), ssh
    version = subprocess.run([str(ssh), "-V"], capture_output=True, text=True)
    assert version.returncode == 0, version.stderr
    assert "OpenSSH_9.2" in version.stderr
    seeded(git_ssh, "debian-ssh")
    system = str(ssh_client())
    command = git_ssh.git_ssh_command().replace(system, str(ssh), 1)
    run_git(
        "clone", "-q", git_ssh.url("debian-ssh"), str(tmp_path / "clone"),
        env=ssh_env(git_ssh, GIT_SSH_COMMAND=command),
    )  # fmt: skip
