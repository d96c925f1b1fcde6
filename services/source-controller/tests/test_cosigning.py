"""cosign signature checks, against a signature real cosign wrote and ones made here alike."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from source_controller import cosigning
from source_controller.cosigning import CosignError

from .cosignfiles import key_pair, sign

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "cosign-dangerzone.json").read_text())
DIGEST = "sha256:" + "a" * 64


def test_payload_is_byte_for_byte_what_cosign_signed() -> None:
    layer = FIXTURE["manifest"]["layers"][0]
    payload = cosigning.simple_signing_payload(FIXTURE["reference"], FIXTURE["digest"])
    assert len(payload) == layer["size"]
    assert "sha256:" + hashlib.sha256(payload).hexdigest() == layer["digest"]


def test_a_signature_written_by_cosign_verifies() -> None:
    payload = cosigning.simple_signing_payload(FIXTURE["reference"], FIXTURE["digest"])
    keys = cosigning.public_keys({"cosign.pub": FIXTURE["public_key"]})
    blobs = {FIXTURE["manifest"]["layers"][0]["digest"]: payload}
    verified = cosigning.verify_signatures(
        FIXTURE["manifest"], digest=FIXTURE["digest"], keys=keys, read_blob=blobs.__getitem__
    )
    assert verified.key == "cosign.pub"
    with pytest.raises(CosignError, match="not this artifact"):
        cosigning.verify_signatures(
            FIXTURE["manifest"], digest=DIGEST, keys=keys, read_blob=blobs.__getitem__
        )


def test_signatures_made_here_match_the_real_format() -> None:
    """The test helper's signature differs from cosign's only by the key and ECDSA's nonce."""
    private, public = key_pair()
    payload, signature = sign(private, FIXTURE["reference"], FIXTURE["digest"])
    assert hashlib.sha256(payload).hexdigest() == FIXTURE["manifest"]["layers"][0]["digest"][7:]
    assert base64.b64decode(signature)[0] == 0x30, "DER SEQUENCE, as cosign's"
    manifest = _sig_manifest([(payload, signature)])
    keys = cosigning.public_keys({"cosign.pub": public})
    blobs = {_digest(payload): payload}
    cosigning.verify_signatures(
        manifest, digest=FIXTURE["digest"], keys=keys, read_blob=blobs.__getitem__
    )


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _sig_manifest(layers: list[tuple[bytes, str]]) -> dict[str, Any]:
    return {
        "layers": [
            {
                "mediaType": cosigning.SIMPLE_SIGNING_MEDIA_TYPE,
                "size": len(payload),
                "digest": _digest(payload),
                "annotations": {cosigning.SIGNATURE_ANNOTATION: signature},
            }
            for payload, signature in layers
        ]
    }


def _case(case: str) -> tuple[list[tuple[bytes, str]], str]:
    """(layers, the public key trusted) for one failure case."""
    private, public = key_pair()
    other, other_public = key_pair()
    payload, signature = sign(private, "r", DIGEST)
    if case == "other-key":
        return [(payload, signature)], other_public
    if case == "tampered":
        return [(payload.replace(b'"r"', b'"x"'), signature)], public
    if case == "other-digest":
        return [sign(private, "r", "sha256:" + "b" * 64)], public
    if case == "not-base64":
        return [(payload, "!!!")], public
    if case == "second-layer-good":
        return [sign(other, "r", DIGEST), (payload, signature)], public
    raise AssertionError(case)


@pytest.mark.parametrize(
    ("case", "expect"),
    [
        pytest.param("other-key", "verifies with none of the keys", id="untrusted-key"),
        pytest.param("tampered", "verifies with none of the keys", id="tampered-payload"),
        pytest.param("other-digest", "not this artifact", id="signature-of-another-digest"),
        pytest.param("not-base64", "not base64", id="bad-annotation"),
        pytest.param("second-layer-good", None, id="any-layer-verifies"),
    ],
)
def test_verify_signatures(case: str, expect: str | None) -> None:
    layers, public = _case(case)
    manifest = _sig_manifest(layers)
    blobs = {_digest(p): p for p, _ in layers}
    keys = cosigning.public_keys({"cosign.pub": public})
    if expect is None:
        cosigning.verify_signatures(manifest, digest=DIGEST, keys=keys, read_blob=blobs.__getitem__)
        return
    with pytest.raises(CosignError, match=expect):
        cosigning.verify_signatures(manifest, digest=DIGEST, keys=keys, read_blob=blobs.__getitem__)


@pytest.mark.parametrize(
    ("entries", "expect"),
    [
        pytest.param({"cosign.key": "private"}, 0, id="only-pub-entries"),
        pytest.param({"cosign.pub": FIXTURE["public_key"], "x.txt": "y"}, 1, id="one-key"),
    ],
)
def test_public_keys(entries: dict[str, str], expect: int) -> None:
    assert len(cosigning.public_keys(entries)) == expect


def test_a_broken_key_is_named() -> None:
    with pytest.raises(CosignError, match=r"key 'team\.pub' is not a PEM public key"):
        cosigning.public_keys({"team.pub": "nope"})
