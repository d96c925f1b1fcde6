"""How a delivery reaches its Provider: through its proxy, with its TLS settings.

Flux honours these Provider fields, so a user who sets them relies on them;
ignoring them would send events straight past a mandatory egress proxy, or
trust the system CAs where the user pinned a private one:

- `spec.proxySecretRef`: a Secret with `address` and optional `username` and
  `password` (sent as proxy basic auth); `spec.proxy` (deprecated) is the
  address alone, used when there is no Secret.
- `spec.certSecretRef`: a Secret with `ca.crt` (the CAs the Provider's
  certificate must chain to, instead of the system ones) and/or `tls.crt`
  with `tls.key` (a client certificate, for mTLS).

Errors name the Secret and the key, never their contents.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sluice_api.notification import Provider
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.secrets import SecretError, require, secret_data


@dataclass(frozen=True, slots=True)
class Transport:
    """What `deliver` passes to aiohttp besides the request itself."""

    proxy: str | None = None
    proxy_headers: dict[str, str] | None = None
    ssl: ssl.SSLContext | None = None

    def headers_for(self, url: str) -> dict[str, str]:
        """Headers to add to the request itself: through a proxy, a plain-HTTP request
        is sent to the proxy as is, so its credentials travel on it (aiohttp puts
        `proxy_headers` on the CONNECT of HTTPS requests only)."""
        if self.proxy_headers and url.lower().startswith("http://"):
            return dict(self.proxy_headers)
        return {}


async def transport_for(client: KubeClient, provider: Provider) -> Transport:
    """The Provider's proxy and TLS settings, read from its Secrets."""
    namespace = provider.namespace
    proxy, proxy_headers = provider.spec.proxy, None
    if provider.spec.proxy_secret_ref is not None:
        name = provider.spec.proxy_secret_ref.name
        data = await secret_data(client, namespace, name)
        require(data, "address", secret=f"{namespace}/{name}")
        proxy = data["address"]
        if data.get("username"):
            credentials = f"{data['username']}:{data.get('password', '')}".encode()
            basic = base64.b64encode(credentials).decode()
            proxy_headers = {"Proxy-Authorization": f"Basic {basic}"}
    context = None
    if provider.spec.cert_secret_ref is not None:
        name = provider.spec.cert_secret_ref.name
        data = await secret_data(client, namespace, name)
        context = tls_context(data, secret=f"{namespace}/{name}")
    return Transport(proxy=proxy, proxy_headers=proxy_headers, ssl=context)


def tls_context(data: dict[str, str], *, secret: str) -> ssl.SSLContext:
    """A client context trusting `ca.crt` (else the system CAs), presenting
    `tls.crt`/`tls.key` when both are there."""
    has_cert, has_key = bool(data.get("tls.crt")), bool(data.get("tls.key"))
    if not (data.get("ca.crt") or has_cert or has_key):
        raise SecretError(f"secret '{secret}' has none of 'ca.crt', 'tls.crt' and 'tls.key'")
    if has_cert != has_key:
        raise SecretError(f"secret '{secret}' needs both 'tls.crt' and 'tls.key'")
    try:
        context = ssl.create_default_context(cadata=data.get("ca.crt") or None)
    except (ssl.SSLError, ValueError):
        raise SecretError(f"secret '{secret}' key 'ca.crt' is not a PEM certificate") from None
    if has_cert:
        # load_cert_chain reads files only: a private directory, gone at once.
        with tempfile.TemporaryDirectory(prefix="provider-tls-") as directory:
            cert, key = Path(directory) / "tls.crt", Path(directory) / "tls.key"
            for path, text in ((cert, data["tls.crt"]), (key, data["tls.key"])):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as file:
                    file.write(text)
            try:
                context.load_cert_chain(cert, key)
            except (ssl.SSLError, ValueError):
                raise SecretError(
                    f"secret '{secret}' keys 'tls.crt' and 'tls.key' are not a PEM "
                    "certificate and its key"
                ) from None
    return context
