"""The cluster a HelmRelease releases to: the controller's, or a kubeconfig Secret's.

`spec.kubeConfig.secretRef` is a tenant's input, so it is read by
`kubeconfigs.parse` (inline credentials only: no files, no commands, no
skipped TLS checks) and never by a kubeconfig loader. helm wants a
kubeconfig file, so a new one is written from the parsed credentials alone,
into a private directory that lives only as long as the reconcile: what
helm reads is exactly what was checked, and nothing the tenant wrote that
was refused can reach it. Error messages name the Secret and the field,
never a value.
"""

from __future__ import annotations

import base64
import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sluice_api.kustomize import KubeConfigReference
from sluice_runtime.kube import kubeconfigs
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import KubeError
from sluice_runtime.kube.secrets import SecretError, secret_data

DEFAULT_KEYS = ("value", "value.yaml")
"""Where Flux looks for the kubeconfig in the Secret when secretRef names no key."""


class TargetError(Exception):
    """The remote cluster cannot be used; the message says why (never a secret value)."""


class TargetRefused(TargetError):
    """The kubeconfig asks for what a tenant's kubeconfig may never do: retrying cannot
    help until the Secret changes."""


@dataclass(frozen=True)
class Target:
    """A remote cluster for one reconcile: a client and a kubeconfig file for helm."""

    client: KubeClient
    kubeconfig: str


def kubeconfig_document(credentials: kubeconfigs.Credentials) -> dict[str, Any]:
    """A kubeconfig holding only the parsed, inline credentials."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    cluster: dict[str, Any] = {"server": credentials.server}
    if credentials.ca_data:
        cluster["certificate-authority-data"] = b64(credentials.ca_data)
    if credentials.tls_server_name:
        cluster["tls-server-name"] = credentials.tls_server_name
    if credentials.proxy_url:
        cluster["proxy-url"] = credentials.proxy_url
    user: dict[str, Any] = {}
    if credentials.cert_data:
        user["client-certificate-data"] = b64(credentials.cert_data)
    if credentials.key_data:
        user["client-key-data"] = b64(credentials.key_data)
    if credentials.token:
        user["token"] = credentials.token
    if credentials.username is not None:
        user["username"] = credentials.username
        user["password"] = credentials.password or ""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "target", "cluster": cluster}],
        "users": [{"name": "target", "user": user}],
        "contexts": [{"name": "target", "context": {"cluster": "target", "user": "target"}}],
        "current-context": "target",
    }


async def remote(
    ref: KubeConfigReference,
    *,
    client: KubeClient,
    namespace: str,
    cleanup: contextlib.AsyncExitStack,
) -> Target:
    """The Target of `ref`; its client and file are undone by `cleanup`."""
    if ref.secret_ref is None:
        raise TargetRefused("spec.kubeConfig.configMapRef is not supported; use secretRef")
    name = ref.secret_ref.name
    where = f"kubeconfig secret '{namespace}/{name}'"
    try:
        data = await secret_data(client, namespace, name)
    except SecretError as error:
        raise TargetError(f"{where}: {error}") from None
    except KubeError as error:
        raise TargetError(f"{where}: {error}") from None
    keys = (ref.secret_ref.key,) if ref.secret_ref.key else DEFAULT_KEYS
    content = next((data[k] for k in keys if data.get(k)), None)
    if content is None:
        raise TargetError(f"{where} has no {' or '.join(repr(k) for k in keys)} key")
    try:
        credentials = kubeconfigs.parse(content)
    except kubeconfigs.KubeconfigError as error:
        raise TargetRefused(f"{where}: {error}") from None
    try:
        target_client = await KubeClient.from_credentials(credentials)
    except KubeError as error:
        raise TargetError(f"{where}: {error}") from None
    cleanup.push_async_callback(target_client.close)
    work = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="hr-target-")))
    path = work / "kubeconfig"
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(kubeconfig_document(credentials)))
    return Target(client=target_client, kubeconfig=str(path))
