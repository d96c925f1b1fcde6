"""Checking the signatures of Git commits and tags against a GitRepository's trusted keys.

Flux verifies OpenPGP signatures of the HEAD commit, the tag, or both
(`spec.verify.mode`), with the armored public keys of `spec.verify.secretRef`.
Sluice does the same, and also accepts SSH signatures (`git config
gpg.format ssh`) where the Secret lists SSH public keys.

The checks are GnuPG's and OpenSSH's own: `gpgv` (which only verifies,
against a keyring file made here from the armored keys, in a private home)
and `ssh-keygen -Y verify` (against an allowed-signers file of the keys).
Neither reads the controller's own keyrings or configuration.
"""

from __future__ import annotations

import base64
import binascii
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PGP_SIGNATURE = b"-----BEGIN PGP SIGNATURE-----"
SSH_SIGNATURE = b"-----BEGIN SSH SIGNATURE-----"
_PGP_KEY_BLOCK = re.compile(
    r"-----BEGIN PGP PUBLIC KEY BLOCK-----\r?\n(.*?)-----END PGP PUBLIC KEY BLOCK-----", re.S
)
_SSH_KEY = re.compile(
    r"^((?:ssh-(?:ed25519|rsa|dss)|ecdsa-sha2-nistp(?:256|384|521)|sk-(?:ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com)"
    r"\s+[A-Za-z0-9+/=]+)",
    re.M,
)
_SSH_NAMESPACE = "git"
"""The namespace git signs commits and tags in (`ssh-keygen -Y sign -n git`)."""
_TIMEOUT = 30


class VerificationError(Exception):
    """The signature is missing, bad, or made by none of the trusted keys."""


@dataclass(frozen=True, slots=True)
class TrustedKeys:
    pgp: tuple[bytes, ...] = ()
    """OpenPGP public keys, binary (de-armored) transferable keys."""
    ssh: tuple[str, ...] = ()
    """SSH public keys, `<type> <base64>`."""

    def __bool__(self) -> bool:
        return bool(self.pgp or self.ssh)


def trusted_keys(entries: Mapping[str, str]) -> TrustedKeys:
    """The keys in a Secret's values: armored OpenPGP public key blocks and SSH public keys.

    Like Flux, any entry may hold keys (Flux's convention is `<name>.asc`);
    an entry may hold several. Raises VerificationError for a PGP block that
    is not valid armor, naming the entry.
    """
    pgp: list[bytes] = []
    ssh: list[str] = []
    for name in sorted(entries):
        value = entries[name]
        for block in _PGP_KEY_BLOCK.findall(value):
            try:
                pgp.append(dearmor(block))
            except ValueError as error:
                raise VerificationError(f"key '{name}': {error}") from None
        ssh.extend(" ".join(m.split()) for m in _SSH_KEY.findall(value))
    return TrustedKeys(pgp=tuple(pgp), ssh=tuple(ssh))


def dearmor(body: str) -> bytes:
    """The binary packets of an ASCII-armored block's body (headers and checksum dropped)."""
    # Armor headers (`Version: ...`) hold a colon, which base64 never does; the
    # checksum line starts with `=`, which a base64 line never does.
    data = "".join(
        line.strip()
        for line in body.splitlines()
        if line.strip() and ":" not in line and not line.startswith("=")
    )
    try:
        decoded = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not a valid ASCII-armored OpenPGP key") from None
    if not decoded:
        raise ValueError("empty OpenPGP key block")
    return decoded


def split_signed_tag(raw: bytes) -> tuple[bytes, bytes | None]:
    """An annotated tag object's signed payload and its signature (None when unsigned).

    git appends the signature to the tag message; the payload is everything before it.
    """
    for marker in (PGP_SIGNATURE, SSH_SIGNATURE):
        at = raw.find(marker)
        if at != -1 and (at == 0 or raw[at - 1 : at] == b"\n"):
            return raw[:at], raw[at:]
    return raw, None


def verify(signature: bytes, payload: bytes, keys: TrustedKeys) -> str:
    """Check `signature` over `payload`; the signing key's fingerprint. Raises VerificationError."""
    if signature.lstrip().startswith(SSH_SIGNATURE):
        if not keys.ssh:
            raise VerificationError("it is an SSH signature and the secret has no SSH keys")
        return _verify_ssh(signature, payload, keys.ssh)
    if signature.lstrip().startswith(PGP_SIGNATURE):
        if not keys.pgp:
            raise VerificationError("it is an OpenPGP signature and the secret has no PGP keys")
        return _verify_pgp(signature, payload, keys.pgp)
    raise VerificationError("the signature is neither OpenPGP nor SSH")


def _verify_pgp(signature: bytes, payload: bytes, keys: tuple[bytes, ...]) -> str:
    gpgv = shutil.which("gpgv")
    if gpgv is None:
        raise VerificationError("gpgv (GnuPG) is not installed")
    with tempfile.TemporaryDirectory(prefix="verify-") as tmp:
        home = Path(tmp)
        (home / "trusted.gpg").write_bytes(b"".join(keys))
        (home / "signature.asc").write_bytes(signature)
        (home / "payload").write_bytes(payload)
        done = subprocess.run(
            [gpgv, "--homedir", str(home), "--keyring", str(home / "trusted.gpg"),
             "--status-fd", "1", str(home / "signature.asc"), str(home / "payload")],
            capture_output=True, timeout=_TIMEOUT, check=False, env={"LANG": "C"},
        )  # fmt: skip
    status = done.stdout.decode(errors="replace")
    valid = re.search(r"^\[GNUPG:\] VALIDSIG ([0-9A-F]+)", status, re.M)
    if done.returncode == 0 and valid is not None:
        return valid.group(1)
    if re.search(r"^\[GNUPG:\] BADSIG", status, re.M):
        raise VerificationError("the OpenPGP signature is bad (the content was changed)")
    missing = re.search(r"^\[GNUPG:\] (?:NO_PUBKEY|ERRSIG) ([0-9A-F]+)", status, re.M)
    if missing is not None:
        raise VerificationError(
            f"the signing key {missing.group(1)} is not one of the trusted OpenPGP keys"
        )
    detail = " ".join(done.stderr.decode(errors="replace").split())[:300]
    raise VerificationError(f"the OpenPGP signature could not be verified: {detail}")


def _verify_ssh(signature: bytes, payload: bytes, keys: tuple[str, ...]) -> str:
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        raise VerificationError("ssh-keygen (OpenSSH) is not installed")
    with tempfile.TemporaryDirectory(prefix="verify-") as tmp:
        home = Path(tmp)
        allowed = home / "allowed_signers"
        allowed.write_text("".join(f"trusted {key}\n" for key in keys))
        (home / "signature").write_bytes(signature)

        def keygen_y(*args: str) -> tuple[int, str]:
            done = subprocess.run(
                [keygen, "-Y", *args, "-n", _SSH_NAMESPACE, "-s", str(home / "signature")],
                input=payload, capture_output=True, timeout=_TIMEOUT, check=False,
                env={"LANG": "C", "HOME": str(home)},
            )  # fmt: skip
            return done.returncode, (done.stdout + done.stderr).decode(errors="replace")

        # First whether the signature holds at all (by whichever key made it),
        # then whether that key is trusted: the two failures need different fixes.
        code, output = keygen_y("check-novalidate")
        signer = re.search(r"with \S+ key (SHA256:\S+)", output)
        if code != 0 or signer is None:
            raise VerificationError("the SSH signature is bad (the content was changed)")
        code, output = keygen_y("verify", "-f", str(allowed), "-I", "trusted")
    if code == 0:
        return signer.group(1)
    raise VerificationError(f"the signing key {signer.group(1)} is not one of the trusted SSH keys")
