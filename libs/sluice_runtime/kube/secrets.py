"""Reading Secrets that a spec references, with errors that name what is missing."""

from __future__ import annotations

import base64
import binascii

from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import SECRET


class SecretError(Exception):
    """The referenced Secret is missing or lacks a key; the message says which."""


async def secret_data(client: KubeClient, namespace: str, name: str) -> dict[str, str]:
    """The Secret's data, decoded to text (stringData is merged by the API server)."""
    try:
        secret = await client.get(SECRET, name, namespace)
    except NotFound:
        raise SecretError(f"secret '{namespace}/{name}' not found") from None
    decoded: dict[str, str] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            decoded[key] = base64.b64decode(value).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise SecretError(
                f"secret '{namespace}/{name}' key '{key}' is not valid text"
            ) from None
    return decoded


def require(data: dict[str, str], *keys: str, secret: str) -> None:
    """Fail naming every key of `keys` the secret lacks."""
    missing = [k for k in keys if not data.get(k)]
    if missing:
        names = ", ".join(f"'{k}'" for k in missing)
        raise SecretError(f"secret '{secret}' has no {names} key")
