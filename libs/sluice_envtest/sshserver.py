"""Git over SSH on loopback: Debian's OpenSSH sshd serving bare repositories.

sshd comes from bookworm's `openssh-server` package, fetched into the cache
(debian.py); the machine's system is not changed. Run as root, sshd insists
on privilege separation: a `sshd` user and a /run/sshd directory to chroot
into. Run as any other user it skips both, but then can only log in the user
it runs as, and looks that user up by name. So when the tests run as root,
sshd runs as `nobody`, and nss_wrapper (Debian's `libnss-wrapper`, the cwrap
project's LD_PRELOAD library made for testing servers like this one) gives
it a passwd file in which that uid is called `git` and has a shell and a
home. Not running as root, sshd runs as the current user, named `git` the
same way.

Every session runs a small script instead of the client's command: it
serves git-upload-pack and git-receive-pack only, for paths relative to the
repository root (`ssh://git@127.0.0.1:PORT/<name>.git` is `root/<name>.git`),
and logs each command so a test can see what clients asked for.

Keys are made with `cryptography` (no ssh-keygen needed): a host key whose
`known_hosts` line a test's Secret can hold, and a client key whose private
half is the Secret's `identity`.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import socket
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from sluice_envtest.controlplane import free_port
from sluice_envtest.debian import Log, Unpacked, fetch_packages
from sluice_envtest.gitserver import WorkRepo
from sluice_envtest.processes import ChildServer, ServerError, spawn

KeyKind = Literal["ed25519", "rsa", "ecdsa"]

SSHD_PACKAGES = ("openssh-server", "libnss-wrapper")
LOGIN_USER = "git"


@dataclass(frozen=True)
class SshKey:
    kind: KeyKind
    private_key: str
    """PEM text: OpenSSH's own format, or traditional PEM for rsa/ecdsa when asked."""
    public_key: str
    """An authorized_keys line: `ssh-ed25519 AAAA... comment`."""


def generate_key(
    kind: KeyKind = "ed25519",
    *,
    pem: bool = False,
    passphrase: str | None = None,
    comment: str = "sluice-test",
) -> SshKey:
    """A fresh key pair.

    `pem` writes rsa and ecdsa keys in the traditional `BEGIN RSA/EC PRIVATE
    KEY` form (ed25519 has none; it gets PKCS#8). A passphrase on an
    OpenSSH-format key needs the `bcrypt` package (cryptography's bcrypt KDF);
    on a PEM key it does not.
    """
    key: ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    if kind == "ed25519":
        key = ed25519.Ed25519PrivateKey.generate()
    elif kind == "rsa":
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    else:
        key = ec.generate_private_key(ec.SECP256R1())
    if not pem:
        form = serialization.PrivateFormat.OpenSSH
    elif kind == "ed25519":
        form = serialization.PrivateFormat.PKCS8
    else:
        form = serialization.PrivateFormat.TraditionalOpenSSL
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase.encode())
        if passphrase
        else serialization.NoEncryption()
    )
    private = key.private_bytes(serialization.Encoding.PEM, form, encryption).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return SshKey(kind, private, f"{public.decode()} {comment}")


def ssh_client(*, prefer_system: bool = True, log: Log | None = None) -> Path:
    """An `ssh` program for the git CLI: the machine's, or Debian's openssh-client."""
    system = shutil.which("ssh")
    if system and prefer_system:
        return Path(system)
    unpacked = fetch_packages(["openssh-client"], binaries=["usr/bin/ssh"], log=log)
    ssh = unpacked.path("usr/bin/ssh")
    if unpacked.library_dir is None:
        return ssh
    wrapper = unpacked.root.parent / "ssh-with-libraries"
    if not wrapper.exists():
        partial = wrapper.with_suffix(".tmp")
        partial.write_text(
            "#!/bin/sh\n"
            f"LD_LIBRARY_PATH={shlex.quote(str(unpacked.library_dir))}"
            "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "
            f'exec {shlex.quote(str(ssh))} "$@"\n'
        )
        partial.chmod(0o755)
        os.replace(partial, wrapper)
    return wrapper


@dataclass(frozen=True)
class SshCommand:
    """One git command a client ran over SSH."""

    service: str
    repo: str
    """The repository as in `url(name)`: the path without its leading / and `.git`."""
    git_protocol: str


class SshGitServer(ChildServer):
    name = "sshd"

    """sshd on 127.0.0.1:PORT serving the bare repositories under `root` to user `git`.

    Use as a context manager or call `start()` and `stop()`. After start:
    `known_hosts` (lines like `[127.0.0.1]:PORT ssh-ed25519 AAAA...`),
    `identity` and `identity_pub` (the authorized client key),
    `url(name)`, and `git_ssh_command()` for the git CLI.
    """

    def __init__(
        self,
        *,
        root: Path | None = None,
        workdir: Path | None = None,
        port: int | None = None,
        host_key_kinds: Sequence[KeyKind] = ("ed25519",),
        client_key: SshKey | None = None,
    ) -> None:
        super().__init__(workdir, prefix="sluice-git-ssh-", log_name="sshd.log")
        self.root = root or self.workdir / "repos"
        self.port = port or free_port()
        self.user = LOGIN_USER
        self.host_keys = {kind: generate_key(kind) for kind in host_key_kinds}
        self.known_hosts = "".join(
            known_hosts_line(self.port, k.public_key) for k in self.host_keys.values()
        )
        self.client_key = client_key or generate_key("ed25519")
        self.identity = self.client_key.private_key
        self.identity_pub = self.client_key.public_key
        self.known_hosts_file = self.workdir / "client" / "known_hosts"
        self.identity_file = self.workdir / "client" / "identity"
        self._commands_log = self.workdir / "commands.log"
        self._authorized_keys = self.workdir / "etc" / "authorized_keys"

    def url(self, name: str) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}/{name}.git"

    def create_repo(self, name: str, *, branch: str = "main") -> WorkRepo:
        """A new bare repository `root/<name>.git` and a working clone of it."""
        return WorkRepo.create(
            self.root / f"{name}.git", work=self.workdir / "work" / name, branch=branch
        )

    def authorize(self, public_key: str) -> None:
        """Let another client key log in too (sshd reads the file at every login)."""
        with open(self._authorized_keys, "a") as keys:
            keys.write(public_key.strip() + "\n")

    def git_ssh_command(self, *, identity_file: Path | None = None) -> str:
        """GIT_SSH_COMMAND for the git CLI: our client key, only our known_hosts, strictly."""
        ssh = ssh_client()
        return shlex.join(
            [
                str(ssh),
                "-F", "/dev/null",
                "-i", str(identity_file or self.identity_file),
                "-o", "IdentitiesOnly=yes",
                "-o", f"UserKnownHostsFile={self.known_hosts_file}",
                "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", "StrictHostKeyChecking=yes",
                "-o", "BatchMode=yes",
            ]
        )  # fmt: skip

    def commands(self, repo: str | None = None) -> list[SshCommand]:
        if not self._commands_log.exists():
            return []
        found = []
        for line in self._commands_log.read_text().splitlines():
            protocol, _, command = line.partition("\t")
            service, _, path = command.partition(" ")
            name = path.strip("'").lstrip("/").removesuffix(".git")
            if repo is None or name == repo:
                found.append(SshCommand(service, name, protocol))
        return found

    def start(self, *, timeout: float = 15.0) -> None:
        packages = fetch_packages(SSHD_PACKAGES, binaries=["usr/sbin/sshd"])
        uid, gid = _login_ids()
        self.workdir.mkdir(parents=True, exist_ok=True)
        # sshd runs as `uid` and must reach its files through this directory.
        self.workdir.chmod(0o755)
        self.root.mkdir(parents=True, exist_ok=True)
        for path in (self.workdir, self.root):
            _check_reachable(path, uid, gid)
        sshd, lib = self._stage_programs(packages)
        config = self._write_files(uid, gid)
        env = {
            "PATH": "/usr/bin:/bin",
            "LD_PRELOAD": str(lib / "libnss_wrapper.so"),
            "NSS_WRAPPER_PASSWD": str(self.workdir / "etc" / "passwd"),
            "NSS_WRAPPER_GROUP": str(self.workdir / "etc" / "group"),
            "LD_LIBRARY_PATH": str(lib),
        }
        argv = [str(sshd), "-D", "-f", str(config), "-E", str(self.log_file)]
        switch = os.geteuid() == 0
        process = spawn(
            argv,
            log=self.log_file,
            env=env,
            cwd=self.workdir,
            user=uid if switch else None,
            group=gid if switch else None,
        )
        self._launched(process, self._answers, timeout=timeout)

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                return sock.recv(64).startswith(b"SSH-2.0-")
        except OSError:
            return False

    def _stage_programs(self, packages: Unpacked) -> tuple[Path, Path]:
        """Copy sshd and its libraries here: the cache may be unreadable to the login user."""
        bin_dir, lib = self.workdir / "bin", self.workdir / "lib"
        bin_dir.mkdir(exist_ok=True)
        lib.mkdir(exist_ok=True)
        sshd = bin_dir / "sshd"
        shutil.copy2(packages.path("usr/sbin/sshd"), sshd)
        wrappers = list(packages.root.glob("usr/lib/*/libnss_wrapper.so"))
        if not wrappers:
            raise ServerError(f"libnss_wrapper.so not found in {packages.root}")
        shutil.copy2(wrappers[0], lib / "libnss_wrapper.so")
        if packages.library_dir is not None:
            for library in packages.library_dir.iterdir():
                shutil.copy2(library, lib / library.name)
        return sshd, lib

    def _write_files(self, uid: int, gid: int) -> Path:
        etc, home, client = self.workdir / "etc", self.workdir / "home", self.workdir / "client"
        for directory in (etc, home, client):
            directory.mkdir(exist_ok=True)
        host_key_files = []
        for kind, key in self.host_keys.items():
            path = etc / f"ssh_host_{kind}_key"
            path.write_text(key.private_key)
            path.chmod(0o600)
            host_key_files.append(path)
        self._authorized_keys.write_text(self.identity_pub + "\n")
        (etc / "passwd").write_text(f"{self.user}:x:{uid}:{gid}:sluice test git:{home}:/bin/sh\n")
        (etc / "group").write_text(f"{self.user}:x:{gid}:\n")
        self._commands_log.touch()
        serve = etc / "git-serve"
        serve.write_text(_serve_script(self.root, self._commands_log))
        serve.chmod(0o755)
        config = etc / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"ListenAddress 127.0.0.1:{self.port}",
                    *(f"HostKey {path}" for path in host_key_files),
                    "PidFile none",  # -D: the process we started is sshd
                    f"AuthorizedKeysFile {self._authorized_keys}",
                    # The files belong to whoever started us, not the login user.
                    "StrictModes no",
                    "UsePAM no",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    f"AllowUsers {self.user}",
                    "AcceptEnv GIT_PROTOCOL",
                    f"ForceCommand {serve}",
                    "DisableForwarding yes",
                    "PermitTTY no",
                    "PrintMotd no",
                    "UseDNS no",
                    "MaxStartups 100",
                    "MaxSessions 100",
                    "LogLevel VERBOSE",
                    "",
                ]
            )
        )
        self.log_file.touch()
        if os.geteuid() == 0:
            for path in (home, self._commands_log, self.log_file, *host_key_files):
                os.chown(path, uid, gid)
        self.known_hosts_file.write_text(self.known_hosts)
        self.identity_file.write_text(self.identity)
        self.identity_file.chmod(0o600)
        return config


def _login_ids() -> tuple[int, int]:
    """The uid and gid sshd runs as: ours, or nobody's when we are root."""
    if os.geteuid() != 0:
        return os.getuid(), os.getgid()
    try:
        nobody = pwd.getpwnam("nobody")
        return nobody.pw_uid, nobody.pw_gid
    except KeyError:
        return 65534, 65534


def _check_reachable(path: Path, uid: int, gid: int) -> None:
    for directory in (path, *path.parents):
        status = directory.stat()
        if status.st_uid == uid:
            bit = stat.S_IXUSR
        elif status.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not status.st_mode & bit:
            raise ServerError(
                f"sshd runs as uid {uid}, which cannot enter {directory} (mode "
                f"{stat.filemode(status.st_mode)}) on the way to {path}; "
                "use a directory it can reach, such as one made by tempfile.mkdtemp()"
            )


def known_hosts_line(port: int, public_key: str, host: str = "127.0.0.1") -> str:
    """`[host]:port type key`, the form ssh and libgit2 look up for a non-22 port."""
    kind, key = public_key.split()[:2]
    return f"[{host}]:{port} {kind} {key}\n"


def _serve_script(root: Path, log: Path) -> str:
    git = shutil.which("git") or "/usr/bin/git"
    # git quotes the path it sends: git-upload-pack '/org/repo.git'.
    return f"""#!/bin/sh
# sshd runs this for every session in place of the client's command.
root={shlex.quote(str(root))}
printf '%s\\t%s\\n' "${{GIT_PROTOCOL:-}}" "$SSH_ORIGINAL_COMMAND" >> {shlex.quote(str(log))}
case $SSH_ORIGINAL_COMMAND in
    "git-upload-pack "*|"git-receive-pack "*|"git-upload-archive "*) ;;
    *) echo "this server runs git-upload-pack and git-receive-pack only" >&2; exit 1 ;;
esac
service=${{SSH_ORIGINAL_COMMAND%% *}}
path=${{SSH_ORIGINAL_COMMAND#* }}
path=${{path#\\'}}
path=${{path%\\'}}
case $path in
    *\\'*|*..*) echo "unsupported repository path: $path" >&2; exit 1 ;;
esac
# The repositories belong to whoever created them, not to this login user.
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'
exec {shlex.quote(git)} "${{service#git-}}" "$root/${{path#/}}"
"""
