"""spec.decryption end to end: SOPS-encrypted files in Git are applied decrypted, or not at all.

The plaintext never shows in the Kustomization's status, its Events or the
controller's logs; a file that cannot be decrypted (wrong key, tampered,
no key) names itself and stops the whole revision.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from structlog.testing import capture_logs

from sluice_envtest.harness import condition
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import SECRET

from .conftest import CONFIG_MAP, KUSTOMIZATION, Delivery, config_map
from .sopsfiles import age_key, encrypt, has_gpg, pgp_key, secret_manifest, tamper

PASSWORD = "hunter2-plaintext"
ENV_TOKEN = "tok-plaintext-42"
REGEX = "^(data|stringData)$"


async def keys_secret(d: Delivery, name: str, **entries: str) -> None:
    await d.kube.create(
        SECRET,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": d.namespace},
            "stringData": entries,
        },
    )


def kustomization_yaml() -> str:
    return (
        "resources:\n- secret.yaml\n- ok.yaml\n"
        "secretGenerator:\n- name: app\n  envs:\n  - app.env\n"
        "generatorOptions:\n  disableNameSuffixHash: true\n"
    )


async def secret_value(d: Delivery, name: str, key: str) -> str:
    secret = await d.kube.get(SECRET, name, d.namespace)
    return base64.b64decode(secret["data"][key]).decode()


async def no_plaintext_anywhere(d: Delivery, name: str, output: str) -> None:
    obj = await d.kube.get(KUSTOMIZATION, name, d.namespace)
    events = await d.events(name)
    for text in (str(obj.get("status")), str(events), output):
        assert PASSWORD not in text and ENV_TOKEN not in text


async def test_age_encrypted_secret_and_generator_are_applied_decrypted(
    delivery: Delivery,
) -> None:
    d = delivery
    key = age_key()
    repo = d.repo("age")
    repo.commit(
        "encrypted",
        files={
            "kustomization.yaml": kustomization_yaml(),
            "secret.yaml": encrypt(
                secret_manifest("db", password=PASSWORD), age=(key.recipient,),
                encrypted_regex=REGEX,
            ),
            "app.env": encrypt(f"TOKEN={ENV_TOKEN}\n", suffix=".env", age=(key.recipient,)),
            "ok.yaml": config_map("ok"),
        },
    )  # fmt: skip
    repo.push()
    await keys_secret(d, "sops-age", **{"identity.agekey": key.identity + "\n"})
    await d.git_repository("age")
    # The controller's own log entries, whatever logging an earlier test configured.
    with capture_logs() as entries:
        await d.kustomization(
            "age",
            source="age",
            targetNamespace=d.namespace,
            decryption={"provider": "sops", "secretRef": {"name": "sops-age"}},
        )
        await d.observe.wait_ready(KUSTOMIZATION, "age")
    assert await secret_value(d, "db", "password") == PASSWORD
    assert await secret_value(d, "app", "TOKEN") == ENV_TOKEN
    secret = await d.kube.get(SECRET, "db", d.namespace)
    assert "sops" not in secret, "the sops metadata is not applied"
    logs = json.dumps(entries, default=str)
    assert "server-side apply completed" in logs, "the controller's logs are captured"
    await no_plaintext_anywhere(d, "age", logs)


@pytest.mark.skipif(not has_gpg(), reason="gpg is not installed")
async def test_openpgp_encrypted_secret_is_applied_decrypted(delivery: Delivery) -> None:
    d = delivery
    with pgp_key() as key:
        encrypted = encrypt(secret_manifest("db", password=PASSWORD), pgp=key,
                            encrypted_regex=REGEX)  # fmt: skip
        private = key.private
    repo = d.repo("pgp")
    repo.commit("encrypted", files={"secret.yaml": encrypted, "ok.yaml": config_map("ok")})
    repo.push()
    await keys_secret(d, "sops-gpg", **{"sops.asc": private})
    await d.git_repository("pgp")
    await d.kustomization(
        "pgp",
        source="pgp",
        targetNamespace=d.namespace,
        decryption={"provider": "sops", "secretRef": {"name": "sops-gpg"}},
    )
    await d.observe.wait_ready(KUSTOMIZATION, "pgp")
    assert await secret_value(d, "db", "password") == PASSWORD


@pytest.mark.parametrize(
    ("case", "expect"),
    [
        pytest.param("wrong-key", "failed to decrypt 'secret.yaml': ", id="wrong-key"),
        pytest.param("tampered", "MAC mismatch", id="tampered-mac"),
        pytest.param("no-key", "failed to decrypt 'secret.yaml': ", id="missing-key"),
        pytest.param("no-secret", "secret '{ns}/sops-keys' not found", id="missing-secret"),
    ],
)
async def test_a_file_that_fails_to_decrypt_stops_the_revision(
    delivery: Delivery, case: str, expect: str
) -> None:
    d = delivery
    key = age_key()
    encrypted = encrypt(secret_manifest("db", password=PASSWORD), age=(key.recipient,),
                        encrypted_regex=REGEX)  # fmt: skip
    if case == "tampered":
        encrypted = tamper(encrypted, "name: db", "name: other")
    keys: dict[str, Any] = {
        "wrong-key": {"identity.agekey": age_key().identity},
        "tampered": {"identity.agekey": key.identity},
        "no-key": {"readme.txt": "no keys here"},
    }
    if case in keys:
        await keys_secret(d, "sops-keys", **keys[case])
    repo = d.repo("bad")
    repo.commit("c", files={"secret.yaml": encrypted, "ok.yaml": config_map("ok")})
    repo.push()
    await d.git_repository("bad")
    with capture_logs() as entries:
        await d.kustomization(
            "bad",
            source="bad",
            targetNamespace=d.namespace,
            decryption={"provider": "sops", "secretRef": {"name": "sops-keys"}},
        )
        obj = await d.observe.wait_reason(KUSTOMIZATION, "bad", "BuildFailed")
    ready = condition(obj, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert expect.format(ns=d.namespace) in ready["message"], ready["message"]
    assert obj["status"].get("lastAppliedRevision") is None
    for rt, name in ((CONFIG_MAP, "ok"), (SECRET, "db"), (SECRET, "other")):
        with pytest.raises(NotFound):
            await d.kube.get(rt, name, d.namespace)
    await no_plaintext_anywhere(d, "bad", json.dumps(entries, default=str))


async def test_kms_by_workload_identity_is_refused(delivery: Delivery) -> None:
    d = delivery
    repo = d.repo("kms")
    repo.commit("c", files={"ok.yaml": config_map("ok")})
    repo.push()
    await d.git_repository("kms")
    await d.kustomization(
        "kms",
        source="kms",
        targetNamespace=d.namespace,
        decryption={"provider": "sops", "serviceAccountName": "kms"},
    )
    obj = await d.observe.wait_reason(KUSTOMIZATION, "kms", "BuildFailed")
    ready = condition(obj, "Ready")
    assert ready is not None
    assert (
        "serviceAccountName (cloud KMS by workload identity) is not supported" in ready["message"]
    )
    assert condition(obj, "Stalled") is not None
