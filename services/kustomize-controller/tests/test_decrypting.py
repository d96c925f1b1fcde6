"""SOPS decryption with the real sops: which files, which keys, and every failure named."""

from __future__ import annotations

from pathlib import Path

import pytest

from kustomize_controller import decrypting
from kustomize_controller.decrypting import Decryptor, Keys, find_sops, keys_from_entries
from sluice_runtime import building

from .sopsfiles import age_key, encrypt, has_gpg, pgp_key, secret_manifest, tamper

CONFINE = building.default_sandbox() is building.Sandbox.LANDLOCK


@pytest.mark.parametrize(
    ("entries", "expect"),
    [
        pytest.param(
            {"identity.agekey": "# created: now\n# public key: age1x\nAGE-SECRET-KEY-1ABC\n"},
            Keys(age=("AGE-SECRET-KEY-1ABC",)),
            id="age-keygen-output",
        ),
        pytest.param(
            {"a.agekey": "AGE-SECRET-KEY-1A\nAGE-SECRET-KEY-1B", "b.asc": "-----BEGIN PGP"},
            Keys(age=("AGE-SECRET-KEY-1A", "AGE-SECRET-KEY-1B"), pgp=("-----BEGIN PGP",)),
            id="age-and-pgp",
        ),
        pytest.param(
            {"sops.vault-token": "t", "identity": "AGE-SECRET-KEY-1A"},
            Keys(unused=("sops.vault-token",)),
            id="other-entries-unused",
        ),
    ],
)
def test_keys_by_flux_naming(entries: dict[str, str], expect: Keys) -> None:
    assert keys_from_entries(entries) == expect


@pytest.mark.parametrize(
    ("name", "content", "expect"),
    [
        pytest.param("s.yaml", "a: 1\nsops:\n  mac: ENC[x]\n", True, id="yaml"),
        pytest.param("s.yaml", "a: 1\nsops: nope\nmac: 1\n", False, id="yaml-not-sops"),
        pytest.param("s.yaml", "a: [\nsops mac", False, id="yaml-broken"),
        pytest.param("s.json", '{"a": 1, "sops": {"mac": "x"}}', True, id="json"),
        pytest.param("a.env", "A=ENC[x]\nsops_mac=ENC[x]\n", True, id="dotenv"),
        pytest.param("a.env", "A=1\nB=sops_mac\n", False, id="dotenv-plain"),
        pytest.param("a.ini", "[x]\na=1\n[sops]\nmac=1\n", True, id="ini"),
        pytest.param("key.bin", '{"data": "ENC[x]", "sops": {"mac": "y"}}', True, id="binary"),
        pytest.param("key.bin", "plain bytes", False, id="binary-plain"),
    ],
)
def test_recognises_sops_files(name: str, content: str, expect: bool) -> None:
    assert decrypting.is_encrypted(Path(name), content.encode()) is expect


def test_sops_is_found() -> None:
    assert Path(find_sops()).is_file()


SECRET = secret_manifest("db", password="hunter2")
REGEX = "^(data|stringData)$"


async def test_age_decrypts_every_format_in_place(tmp_path: Path) -> None:
    key = age_key()
    files = {
        "secret.yaml": (SECRET, encrypt(SECRET, age=(key.recipient,), encrypted_regex=REGEX)),
        "app.env": ("USER=admin\nPASS=s3cret\n", ""),
        "conf.json": ('{"token": "abc"}', ""),
        "plain.yaml": ("apiVersion: v1\nkind: ConfigMap\n", None),
    }
    for name, (plain, enc) in files.items():
        if enc == "":
            enc = encrypt(plain, suffix=Path(name).suffix, age=(key.recipient,))
        (tmp_path / name).write_text(plain if enc is None else enc)
    decryptor = Decryptor(keys=Keys(age=(key.identity,)), sops=find_sops(), confine=CONFINE)
    done = await decryptor.decrypt_files(tmp_path, sorted(tmp_path.iterdir()))
    assert sorted(done) == ["app.env", "conf.json", "secret.yaml"]
    assert building.load_yaml((tmp_path / "secret.yaml").read_text())["stringData"] == {
        "password": "hunter2"
    }
    assert (tmp_path / "app.env").read_text() == "USER=admin\nPASS=s3cret\n"
    assert "abc" in (tmp_path / "conf.json").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(files), "no stray files"


@pytest.mark.skipif(not has_gpg(), reason="gpg is not installed")
async def test_openpgp_decrypts_with_a_private_keyring(tmp_path: Path) -> None:
    with pgp_key() as key:
        (tmp_path / "secret.yaml").write_text(encrypt(SECRET, pgp=key, encrypted_regex=REGEX))
        decryptor = Decryptor(keys=Keys(pgp=(key.private,)), sops=find_sops(),
                              confine=CONFINE)  # fmt: skip
        await decryptor.decrypt_files(tmp_path, [tmp_path / "secret.yaml"])
    assert "hunter2" in (tmp_path / "secret.yaml").read_text()


def _wrong(_: str) -> Keys:
    return Keys(age=(age_key().identity,))


@pytest.mark.parametrize(
    ("keys", "change", "expect"),
    [
        pytest.param(_wrong, None, "Failed to get the data key", id="wrong-key"),
        pytest.param(lambda _: Keys(), None, "Failed to get the data key", id="no-key"),
        pytest.param(
            lambda _: Keys(unused=("sops.aws-kms",)),
            None,
            "the secret's 'sops.aws-kms': Vault and cloud KMS credentials are not supported",
            id="kms-credentials-named",
        ),
        pytest.param(
            lambda identity: Keys(age=(identity,)),
            ("name: db", "name: other"),
            "MAC mismatch",
            id="tampered",
        ),
    ],
)
async def test_failures_name_the_file_and_reason(
    tmp_path: Path, keys: object, change: tuple[str, str] | None, expect: str
) -> None:
    key = age_key()
    encrypted = encrypt(SECRET, age=(key.recipient,), encrypted_regex=REGEX)
    if change is not None:
        encrypted = tamper(encrypted, *change)
    (tmp_path / "apps").mkdir()
    path = tmp_path / "apps" / "secret.yaml"
    path.write_text(encrypted)
    decryptor = Decryptor(keys=keys(key.identity), sops=find_sops(), confine=CONFINE)  # type: ignore[operator]
    with pytest.raises(decrypting.DecryptionError) as raised:
        await decryptor.decrypt_files(tmp_path, [path])
    message = str(raised.value)
    assert message.startswith("failed to decrypt 'apps/secret.yaml': "), message
    assert expect in message
    assert str(tmp_path) not in message
    assert "hunter2" not in message
    assert path.read_text() == encrypted, "a file that fails stays as it was"


@pytest.mark.parametrize(
    "confine",
    [
        pytest.param(
            True,
            id="confined",
            marks=pytest.mark.skipif(not CONFINE, reason="no Landlock ABI 4 on this kernel"),
        ),
        pytest.param(False, id="unconfined-refused"),
    ],
)
async def test_sops_cannot_reach_a_key_service(tmp_path: Path, confine: bool) -> None:
    """A file naming a Vault key on loopback: sops fails without connecting (unconfined,
    sops would connect: that file is refused before sops runs)."""
    import socket

    key = age_key()
    encrypted = encrypt(SECRET, age=(key.recipient,), encrypted_regex=REGEX)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        port = server.getsockname()[1]
        vault = (
            "    hc_vault:\n"
            f"        - vault_address: http://127.0.0.1:{port}\n"
            "          engine_path: sops\n          key_name: k\n"
            '          created_at: "2024-01-01T00:00:00Z"\n          enc: vault:v1:abc\n'
        )
        (tmp_path / "s.yaml").write_text(encrypted.replace("sops:\n", "sops:\n" + vault, 1))
        decryptor = Decryptor(keys=Keys(), sops=find_sops(), confine=confine)
        with pytest.raises(decrypting.DecryptionError) as raised:
            await decryptor.decrypt_files(tmp_path, [tmp_path / "s.yaml"])
        if not confine:
            assert "names a Vault or Key Vault address" in str(raised.value)
        with pytest.raises(BlockingIOError):
            server.accept()


@pytest.mark.parametrize(
    ("files", "expect"),
    [
        pytest.param(
            {"kustomization.yaml": "resources:\n- secret.yaml\n- base\n", "secret.yaml": "",
             "base/kustomization.yaml": "resources:\n- cm.yaml\n", "base/cm.yaml": "",
             "other.yaml": ""},
            ["base/cm.yaml", "secret.yaml"],
            id="resources-and-bases",
        ),
        pytest.param(
            {"kustomization.yaml": "secretGenerator:\n- name: s\n  files:\n  - key=token.bin\n"
             "  - cert.pem\n  envs:\n  - app.env\nconfigMapGenerator:\n- name: c\n  env: c.env\n",
             "token.bin": "", "cert.pem": "", "app.env": "", "c.env": ""},
            ["app.env", "c.env", "cert.pem", "token.bin"],
            id="generator-inputs",
        ),
        pytest.param(
            {"kustomization.yaml": "resources:\n- cm.yaml\npatches:\n- path: patch.yaml\n"
             "components:\n- comp\n", "cm.yaml": "", "patch.yaml": "",
             "comp/kustomization.yaml": "kind: Component\nsecretGenerator:\n- name: s\n"
             "  envs:\n  - s.env\n", "comp/s.env": ""},
            ["cm.yaml", "comp/s.env"],
            id="components-not-patches",
        ),
    ],
)  # fmt: skip
def test_decryptable_files(tmp_path: Path, files: dict[str, str], expect: list[str]) -> None:
    for name, content in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(content)
    found = building.decryptable_files(tmp_path, tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in found) == expect


def test_own_keys_from_a_directory(tmp_path: Path) -> None:
    key = age_key()
    (tmp_path / "cluster.agekey").write_text(key.identity + "\n")
    (tmp_path / "README").write_text("AGE-SECRET-KEY-1IGNORED")
    assert decrypting.keys_from_directory(tmp_path) == Keys(age=(key.identity,))


async def test_the_private_home_is_removed_on_success_and_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    key = age_key()
    work = tmp_path / "work"
    work.mkdir()
    encrypted = encrypt(SECRET, age=(key.recipient,), encrypted_regex=REGEX)
    (work / "s.yaml").write_text(encrypted)
    await Decryptor(keys=Keys(age=(key.identity,)), sops=find_sops(), confine=CONFINE
                    ).decrypt_files(work, [work / "s.yaml"])  # fmt: skip
    assert list(scratch.iterdir()) == []
    (work / "s.yaml").write_text(encrypted)
    with pytest.raises(decrypting.DecryptionError):
        await Decryptor(keys=Keys(age=(age_key().identity,)), sops=find_sops(),
                        confine=CONFINE).decrypt_files(work, [work / "s.yaml"])  # fmt: skip
    assert list(scratch.iterdir()) == []
