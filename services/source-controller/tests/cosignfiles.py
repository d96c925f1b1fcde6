"""cosign signatures made in tests by cosign's algorithm: ECDSA P-256 over the simple-signing
payload with SHA-256, DER, base64 (test_cosigning checks the payload and the check against a
signature real cosign wrote)."""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from source_controller.cosigning import simple_signing_payload


def key_pair() -> tuple[ec.EllipticCurvePrivateKey, str]:
    private = ec.generate_private_key(ec.SECP256R1())
    public = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public.decode()


def sign(private: ec.EllipticCurvePrivateKey, reference: str, digest: str) -> tuple[bytes, str]:
    """(payload, base64 signature) as `cosign sign --key` makes them for `reference@digest`."""
    payload = simple_signing_payload(reference, digest)
    signature = private.sign(payload, ec.ECDSA(hashes.SHA256()))
    return payload, base64.b64encode(signature).decode()
