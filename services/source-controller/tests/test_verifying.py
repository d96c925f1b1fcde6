"""Signature checks of commits and tags, with keys and signatures made by gpg and ssh-keygen."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice_envtest.signing import SigningKey, gpg_available, pgp_key, ssh_key
from source_controller import verifying
from source_controller.verifying import TrustedKeys, VerificationError

pytestmark = pytest.mark.skipif(not gpg_available(), reason="GnuPG is not installed")

PAYLOAD = b"tree 4b825dc642cb6eb9a060e54bf8d69288fbbb4904\nauthor a <a@b> 0 +0000\n\nmsg\n"


def sign(key: SigningKey, payload: bytes) -> bytes:
    """A detached signature of `payload` as git makes it for this key's format."""
    if key.format == "ssh":
        done = subprocess.run(
            ["ssh-keygen", "-Y", "sign", "-n", "git", "-f", key.signing_key],
            input=payload, capture_output=True, check=True,
        )  # fmt: skip
        return done.stdout
    done = subprocess.run(
        ["gpg", "--batch", "--armor", "--detach-sign", "-u", key.signing_key],
        input=payload, capture_output=True, check=True, env={"GNUPGHOME": str(key.home)},
    )  # fmt: skip
    return done.stdout


@pytest.fixture(scope="module")
def keys() -> Iterator[dict[str, SigningKey]]:
    with pgp_key() as pgp, pgp_key() as other_pgp, ssh_key() as ssh, ssh_key() as other_ssh:
        yield {"pgp": pgp, "other-pgp": other_pgp, "ssh": ssh, "other-ssh": other_ssh}


def trusted(*keys: SigningKey) -> TrustedKeys:
    return verifying.trusted_keys({f"k{i}.asc": k.public for i, k in enumerate(keys)})


@pytest.mark.parametrize(
    ("signer", "trust", "payload", "expect"),
    [
        pytest.param("pgp", ("pgp",), PAYLOAD, None, id="pgp-good"),
        pytest.param("pgp", ("other-pgp", "pgp"), PAYLOAD, None, id="pgp-one-of-many"),
        pytest.param("pgp", ("pgp",), PAYLOAD + b"x", "is bad", id="pgp-tampered"),
        pytest.param("pgp", ("other-pgp",), PAYLOAD, "not one of the trusted", id="pgp-untrusted"),
        pytest.param("pgp", ("ssh",), PAYLOAD, "has no PGP keys", id="pgp-only-ssh-keys"),
        pytest.param("ssh", ("ssh",), PAYLOAD, None, id="ssh-good"),
        pytest.param("ssh", ("ssh",), PAYLOAD + b"x", "is bad", id="ssh-tampered"),
        pytest.param("ssh", ("other-ssh",), PAYLOAD, "not one of the trusted", id="ssh-untrusted"),
        pytest.param("ssh", ("pgp",), PAYLOAD, "has no SSH keys", id="ssh-only-pgp-keys"),
    ],
)
def test_verify(
    keys: dict[str, SigningKey],
    signer: str,
    trust: tuple[str, ...],
    payload: bytes,
    expect: str | None,
) -> None:
    signature = sign(keys[signer], PAYLOAD)
    trusted_keys = trusted(*(keys[t] for t in trust))
    if expect is None:
        fingerprint = verifying.verify(signature, payload, trusted_keys)
        if signer == "pgp":
            assert keys[signer].signing_key.endswith(fingerprint[-16:])
        else:
            assert fingerprint.startswith("SHA256:")
        return
    with pytest.raises(VerificationError, match=expect):
        verifying.verify(signature, payload, trusted_keys)


@pytest.mark.parametrize(
    ("entries", "pgp", "ssh"),
    [
        pytest.param({"a.txt": "nothing here"}, 0, 0, id="none"),
        pytest.param(
            {"keys": "ssh-ed25519 AAAAC3Nza one\n# c\necdsa-sha2-nistp256 AAAAE2V two\n"},
            0,
            2,
            id="ssh-lines",
        ),
    ],
)
def test_trusted_keys_are_read_from_any_entry(entries: dict[str, str], pgp: int, ssh: int) -> None:
    found = verifying.trusted_keys(entries)
    assert (len(found.pgp), len(found.ssh)) == (pgp, ssh)


def test_a_broken_armored_key_is_named() -> None:
    broken = (
        "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!notbase64\n-----END PGP PUBLIC KEY BLOCK-----"
    )
    with pytest.raises(VerificationError, match=r"key 'team\.asc'"):
        verifying.trusted_keys({"team.asc": broken})


@pytest.mark.parametrize(
    ("raw", "payload", "signature"),
    [
        pytest.param(b"object x\n\nmsg\n", b"object x\n\nmsg\n", None, id="unsigned"),
        pytest.param(
            b"object x\n\nmsg\n-----BEGIN PGP SIGNATURE-----\nabc\n",
            b"object x\n\nmsg\n",
            b"-----BEGIN PGP SIGNATURE-----\nabc\n",
            id="pgp",
        ),
        pytest.param(
            b"object x\n\nmsg\n-----BEGIN SSH SIGNATURE-----\nabc\n",
            b"object x\n\nmsg\n",
            b"-----BEGIN SSH SIGNATURE-----\nabc\n",
            id="ssh",
        ),
    ],
)
def test_split_signed_tag(raw: bytes, payload: bytes, signature: bytes | None) -> None:
    assert verifying.split_signed_tag(raw) == (payload, signature)


def test_real_git_signatures_verify(tmp_path: Path, keys: dict[str, SigningKey]) -> None:
    """What `git commit -S` and `git tag -s` write is what the checks read."""
    import pygit2

    from sluice_envtest.gitserver import WorkRepo

    repo = WorkRepo.create(tmp_path / "bare.git", work=tmp_path / "work")
    for name in ("pgp", "ssh"):
        commit = repo.commit(name, files={"f": name}, sign=keys[name])
        repo.tag(f"t-{name}", sign=keys[name])
        git = pygit2.Repository(str(tmp_path / "work"))
        obj = git.get(commit)
        assert isinstance(obj, pygit2.Commit)
        signature, payload = obj.gpg_signature
        verifying.verify(signature, payload, trusted(keys[name]))
        tag = git.get(git.references[f"refs/tags/t-{name}"].target)
        tag_payload, tag_signature = verifying.split_signed_tag(bytes(git.odb.read(tag.id)[1]))
        assert tag_signature is not None
        verifying.verify(tag_signature, tag_payload, trusted(keys[name]))
