"""Checking cosign signatures of OCI artifacts with public keys, as cosign stores them.

cosign's classic, key-based signatures live next to the artifact: the
manifest tagged `sha256-<hex of the artifact's manifest digest>.sig` has one
layer per signature, each a "simple signing" JSON payload that names the
signed digest, with the signature (base64, over the payload's bytes with
SHA-256) in the layer annotation `dev.cosignproject.cosign/signature`.
An artifact verifies when one layer's signature holds for one trusted key
and its payload names the artifact's digest.

Keys are PEM public keys (`cosign.pub`), the `*.pub` entries of the
Secret, as Flux reads them: ECDSA (cosign's default, P-256), RSA
(PKCS #1 v1.5) and Ed25519. Keyless signatures (Fulcio certificates, Rekor)
and notation are not implemented; the caller refuses them by name.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
SIMPLE_SIGNING_MEDIA_TYPE = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_TYPE = "cosign container image signature"
MAX_PAYLOAD_SIZE = 64 << 10
"""Bytes of one simple-signing payload; cosign's are a few hundred."""
PUBLIC_KEY_SUFFIX = ".pub"

PublicKey = ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey
_KEY_TYPES = (ec.EllipticCurvePublicKey, rsa.RSAPublicKey, ed25519.Ed25519PublicKey)


class CosignError(Exception):
    """Keys unusable, or no signature verifies; the message says which."""


def signature_tag(digest: str) -> str:
    """The tag cosign stores the signatures of manifest `digest` under."""
    algorithm, _, hex_digest = digest.partition(":")
    return f"{algorithm}-{hex_digest}.sig"


def simple_signing_payload(reference: str, digest: str) -> bytes:
    """The payload cosign signs for `reference@digest`, byte for byte as cosign writes it."""
    document = {
        "critical": {
            "identity": {"docker-reference": reference},
            "image": {"docker-manifest-digest": digest},
            "type": SIGNATURE_TYPE,
        },
        "optional": None,
    }
    return json.dumps(document, separators=(",", ":")).encode()


def public_keys(entries: Mapping[str, str]) -> list[tuple[str, PublicKey]]:
    """The `*.pub` entries of a Secret as keys, by entry name. Raises CosignError."""
    keys: list[tuple[str, PublicKey]] = []
    for name in sorted(entries):
        if not name.endswith(PUBLIC_KEY_SUFFIX):
            continue
        try:
            key = serialization.load_pem_public_key(entries[name].encode())
        except (ValueError, TypeError):
            raise CosignError(f"key '{name}' is not a PEM public key") from None
        if not isinstance(
            key, ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey
        ):
            raise CosignError(f"key '{name}' is of a type cosign does not sign with")
        keys.append((name, key))
    return keys


def _holds(key: PublicKey, signature: bytes, payload: bytes) -> bool:
    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signature, payload, ec.ECDSA(hashes.SHA256()))
        elif isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, payload, padding.PKCS1v15(), hashes.SHA256())
        else:
            key.verify(signature, payload)
    except InvalidSignature:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Verified:
    key: str
    """The Secret entry of the key that verified."""


def verify_signatures(
    manifest: Mapping[str, Any],
    *,
    digest: str,
    keys: Sequence[tuple[str, PublicKey]],
    read_blob: Callable[[str], bytes],
) -> Verified:
    """Find a layer of the `.sig` manifest that one of `keys` signed for `digest`.

    `read_blob` returns a layer's bytes, already checked against its digest.
    Raises CosignError saying why none verifies.
    """
    problems: list[str] = []
    layers = [
        layer
        for layer in manifest.get("layers") or []
        if isinstance(layer, dict) and layer.get("mediaType") == SIMPLE_SIGNING_MEDIA_TYPE
    ]
    if not layers:
        raise CosignError(f"the signature manifest of '{digest}' holds no cosign signature")
    for layer in layers:
        encoded = (layer.get("annotations") or {}).get(SIGNATURE_ANNOTATION)
        if not isinstance(encoded, str):
            problems.append("a layer has no signature annotation")
            continue
        try:
            signature = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            problems.append("a signature is not base64")
            continue
        if int(layer.get("size") or 0) > MAX_PAYLOAD_SIZE:
            problems.append("a payload is larger than a simple-signing payload can be")
            continue
        payload = read_blob(str(layer.get("digest")))
        signer = next((name for name, key in keys if _holds(key, signature, payload)), None)
        if signer is None:
            problems.append("a signature verifies with none of the keys")
            continue
        signed = _signed_digest(payload)
        if signed != digest:
            # A valid signature of another artifact, moved here: worth naming.
            problems.append(f"a signature by '{signer}' is for '{signed}', not this artifact")
            continue
        return Verified(key=signer)
    raise CosignError("; ".join(dict.fromkeys(problems)))


def _signed_digest(payload: bytes) -> str | None:
    try:
        document = json.loads(payload)
        critical = document["critical"]
        if critical.get("type") != SIGNATURE_TYPE:
            return None
        return str(critical["image"]["docker-manifest-digest"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
