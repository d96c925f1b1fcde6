"""Keys that sign test commits, tags and files: OpenPGP (gpg) and SSH (ssh-keygen).

Each key lives in a private temporary home that the context removes (after
stopping the gpg-agent it started), so tests never touch the machine's own
keyrings.
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
from typing import Literal


@dataclass(frozen=True)
class SigningKey:
    format: Literal["openpgp", "ssh"]
    signing_key: str
    """What git's `user.signingkey` takes: a fingerprint, or the SSH private key's path."""
    public: str
    """The armored OpenPGP public key, or the SSH public key line."""
    private: str
    """The armored OpenPGP private key, or the SSH private key."""
    home: Path
    """The GnuPG home holding the key (OpenPGP), or the directory of the key files."""

    def git_config(self) -> list[str]:
        """`-c` options for git to sign with this key."""
        return ["-c", f"gpg.format={self.format}", "-c", f"user.signingkey={self.signing_key}"]

    def env(self) -> dict[str, str]:
        return {"GNUPGHOME": str(self.home)} if self.format == "openpgp" else {}


def gpg_available() -> bool:
    return all(shutil.which(t) for t in ("gpg", "gpgconf", "gpgv"))


@contextlib.contextmanager
def pgp_key(uid: str = "Sluice Test <test@sluice.invalid>") -> Iterator[SigningKey]:
    """A new OpenPGP key (ed25519 signing, cv25519 encryption, no passphrase)."""
    with tempfile.TemporaryDirectory(prefix="gpg-") as tmp:
        home = Path(tmp)
        home.chmod(0o700)
        env = {**os.environ, "GNUPGHOME": str(home)}
        gpg = ["gpg", "--batch", "--passphrase", ""]

        def run(*args: str) -> str:
            return subprocess.run(
                [*gpg, *args], env=env, check=True, capture_output=True, text=True
            ).stdout

        try:
            run("--quick-gen-key", uid, "future-default", "default", "never")
            listed = run("--list-secret-keys", "--with-colons")
            match = re.search(r"^fpr:+([0-9A-F]{40}):", listed, re.M)
            assert match is not None
            fingerprint = match.group(1)
            yield SigningKey(
                format="openpgp",
                signing_key=fingerprint,
                public=run("--armor", "--export", fingerprint),
                private=run("--armor", "--export-secret-keys", fingerprint),
                home=home,
            )
        finally:
            subprocess.run(["gpgconf", "--kill", "all"], env=env, check=False, capture_output=True)


@contextlib.contextmanager
def ssh_key() -> Iterator[SigningKey]:
    """A new ed25519 SSH key, for `gpg.format ssh` signatures."""
    with tempfile.TemporaryDirectory(prefix="sshsig-") as tmp:
        home = Path(tmp)
        path = home / "id_ed25519"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sluice-test", "-f", str(path)],
            check=True,
            capture_output=True,
        )
        yield SigningKey(
            format="ssh",
            signing_key=str(path),
            public=path.with_suffix(".pub").read_text().strip(),
            private=path.read_text(),
            home=home,
        )
