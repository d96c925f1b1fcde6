"""OCIRepository spec.verify with cosign public keys: signed digests become artifacts,
unsigned or foreign-signed ones never do."""

from __future__ import annotations

from typing import Any

import pytest

from sluice_envtest.harness import condition, make_secret
from sluice_envtest.registry import OciRegistry
from sluice_runtime.kube.client import JSON

from .conftest import MANIFEST, OCIREPO, SourceController, ocirepo
from .cosignfiles import key_pair, sign


def has_verified(status: str) -> Any:
    return lambda obj: (condition(obj, "SourceVerified") or {}).get("status") == status


async def start(
    sc: SourceController, registry: OciRegistry, name: str, *, public: str, **verify: Any
) -> None:
    await make_secret(sc.client, sc.namespace, f"{name}-keys", {"cosign.pub": public})
    repository = f"{sc.namespace}/{name}"
    body = ocirepo(
        name,
        registry.oci_url(repository),
        insecure=True,
        ref={"tag": "v1"},
        verify={"provider": "cosign", "secretRef": {"name": f"{name}-keys"}, **verify},
    )
    await sc.client.create(OCIREPO, body, namespace=sc.namespace)


async def test_a_signed_artifact_is_verified_and_an_unsigned_one_keeps_the_last(
    source_controller: SourceController, oci_registry: OciRegistry
) -> None:
    sc = source_controller
    private, public = key_pair()
    repository = f"{sc.namespace}/signed"
    digest = oci_registry.push_artifact(repository, "v1", files={"app.yaml": MANIFEST})
    reference = f"{oci_registry.host}/{repository}"
    oci_registry.push_cosign_signature(
        repository, digest, payloads=[sign(private, reference, digest)]
    )
    await start(sc, oci_registry, "signed", public=public)
    obj = await sc.wait_ready(OCIREPO, "signed")
    assert obj["status"]["artifact"]["revision"] == f"v1@{digest}"
    verified = condition(obj, "SourceVerified")
    assert verified is not None and verified["status"] == "True"
    assert verified["reason"] == "Succeeded"
    assert (
        f"verified signature of revision v1@{digest} with key 'cosign.pub'" in verified["message"]
    )

    unsigned = oci_registry.push_artifact(repository, "v1", files={"app.yaml": MANIFEST + "#"})
    await sc.poke(OCIREPO, "signed", "1")
    obj = await sc.wait(OCIREPO, "signed", has_verified("False"), what="SourceVerified=False")
    verified = condition(obj, "SourceVerified")
    assert verified is not None and verified["reason"] == "VerificationError"
    assert f"no signature found for '{unsigned}'" in verified["message"]
    ready = condition(obj, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert obj["status"]["artifact"]["revision"] == f"v1@{digest}", "last artifact kept"


@pytest.mark.parametrize(
    ("case", "expect"),
    [
        pytest.param("unsigned", "no signature found", id="unsigned"),
        pytest.param("other-key", "verifies with none of the keys", id="untrusted-key"),
        pytest.param("moved", "is for 'sha256:", id="signature-of-another-artifact"),
    ],
)
async def test_an_unverified_artifact_is_never_stored(
    source_controller: SourceController, oci_registry: OciRegistry, case: str, expect: str
) -> None:
    sc = source_controller
    private, public = key_pair()
    other, _ = key_pair()
    repository = f"{sc.namespace}/bad"
    reference = f"{oci_registry.host}/{repository}"
    digest = oci_registry.push_artifact(repository, "v1", files={"app.yaml": MANIFEST})
    if case == "other-key":
        oci_registry.push_cosign_signature(
            repository, digest, payloads=[sign(other, reference, digest)]
        )
    if case == "moved":
        elsewhere = oci_registry.push_artifact(repository, "v0", files={"old.yaml": MANIFEST})
        oci_registry.push_cosign_signature(
            repository, digest, payloads=[sign(private, reference, elsewhere)]
        )
    await start(sc, oci_registry, "bad", public=public)
    obj: JSON = await sc.wait(OCIREPO, "bad", has_verified("False"), what="SourceVerified=False")
    verified = condition(obj, "SourceVerified")
    assert verified is not None and expect in verified["message"], verified
    assert "artifact" not in obj["status"]
    assert not list(sc.storage.rglob("*.tar.gz")), "nothing unverified is stored"


@pytest.mark.parametrize(
    ("verify", "expect"),
    [
        pytest.param(
            {"provider": "cosign", "matchOIDCIdentity": [{"issuer": ".*", "subject": ".*"}]},
            "keyless cosign verification (spec.verify.matchOIDCIdentity) is not supported",
            id="keyless-identity",
        ),
        pytest.param(
            {"provider": "cosign"},
            "keyless cosign verification (spec.verify without secretRef) is not supported",
            id="keyless-no-keys",
        ),
        pytest.param(
            {"provider": "notation", "secretRef": {"name": "k"}},
            "spec.verify.provider 'notation' is not supported",
            id="notation",
        ),
    ],
)
async def test_what_is_not_built_is_refused_by_name(
    source_controller: SourceController,
    oci_registry: OciRegistry,
    verify: dict[str, Any],
    expect: str,
) -> None:
    sc = source_controller
    repository = f"{sc.namespace}/refused"
    oci_registry.push_artifact(repository, "v1", files={"app.yaml": MANIFEST})
    body = ocirepo("refused", oci_registry.oci_url(repository), insecure=True,
                   ref={"tag": "v1"}, verify=verify)  # fmt: skip
    await sc.client.create(OCIREPO, body, namespace=sc.namespace)
    obj = await sc.wait(OCIREPO, "refused", has_verified("False"), what="SourceVerified=False")
    assert (condition(obj, "Stalled") or {}).get("status") == "True"
    assert expect in (condition(obj, "SourceVerified") or {})["message"]
    assert "artifact" not in obj["status"]
