"""Which cluster, as whom: the client a Kustomization's apply, prune and health use.

`serviceAccountName` (or `--default-service-account`) makes every call of
those steps impersonate `system:serviceaccount:<namespace>:<name>`, so the
API server's RBAC decides what a tenant may touch. `kubeConfig.secretRef`
points the same steps at another cluster; its client is built once per
version of the Secret and reused. That kubeconfig is a tenant's input: it is
read by `kubeconfigs.parse` (inline credentials only; no files, no commands
unless the operator allows exec plugins), never by a kubeconfig loader.
Discovery (the REST mapping) uses the cluster's own credentials, since every
authenticated identity may read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sluice_api.kustomize import Kustomization
from sluice_runtime.kube import kubeconfigs
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.discovery import RestMapper
from sluice_runtime.kube.errors import KubeError, NotFound
from sluice_runtime.kube.resources import SECRET
from sluice_runtime.kube.secrets import SecretError, secret_data

DEFAULT_KUBECONFIG_KEYS = ("value", "value.yaml")


class TargetError(Exception):
    """The target cluster or identity cannot be used; the message says why."""


class TargetRefused(TargetError):
    """The kubeconfig asks for what the controller never does for a tenant (read its
    files, run commands, skip TLS checks): retrying cannot help until the Secret or
    the controller's flags change."""


@dataclass
class _Remote:
    version: str
    client: KubeClient
    mapper: RestMapper


@dataclass
class Targets:
    client: KubeClient
    default_service_account: str | None = None
    allow_kubeconfig_exec: bool = False
    """--insecure-kubeconfig-exec: kubeconfig Secrets may use exec plugins."""
    allow_kubeconfig_insecure_tls: bool = False
    """--insecure-kubeconfig-tls: kubeconfig Secrets may skip TLS verification."""
    _mapper: RestMapper | None = None
    _remotes: dict[str, _Remote] = field(default_factory=dict)

    def local_mapper(self) -> RestMapper:
        if self._mapper is None:
            self._mapper = RestMapper(self.client)
        return self._mapper

    async def for_kustomization(
        self, ks: Kustomization, client: KubeClient
    ) -> tuple[KubeClient, RestMapper]:
        namespace = ks.metadata.namespace or "default"
        if ks.spec.kube_config is not None:
            base, mapper = await self._remote(ks, namespace, client)
        else:
            base, mapper = self.client, self.local_mapper()
        account = ks.spec.service_account_name or self.default_service_account
        if account:
            return base.impersonate(f"system:serviceaccount:{namespace}:{account}"), mapper
        return base, mapper

    async def _remote(
        self, ks: Kustomization, namespace: str, client: KubeClient
    ) -> tuple[KubeClient, RestMapper]:
        assert ks.spec.kube_config is not None
        ref = ks.spec.kube_config.secret_ref
        if ref is None:
            # configMapRef (workload identity) is refused before any target is built.
            raise TargetError("spec.kubeConfig names no secretRef")
        key = f"{namespace}/{ref.name}"
        try:
            secret = await client.get(SECRET, ref.name, namespace)
        except NotFound:
            raise TargetError(f"kubeconfig secret '{key}' not found") from None
        version = str(secret["metadata"].get("resourceVersion", ""))
        cached = self._remotes.get(key)
        if cached is not None and cached.version == version:
            return cached.client, cached.mapper
        try:
            data = await secret_data(client, namespace, ref.name)
        except SecretError as error:
            raise TargetError(str(error)) from None
        keys = (ref.key,) if ref.key else DEFAULT_KUBECONFIG_KEYS
        content = next((data[k] for k in keys if data.get(k)), None)
        if content is None:
            wanted = " or ".join(f"'{k}'" for k in keys)
            raise TargetError(f"kubeconfig secret '{key}' has no {wanted} key")
        try:
            credentials = kubeconfigs.parse(
                content,
                allow_exec=self.allow_kubeconfig_exec,
                allow_insecure_tls=self.allow_kubeconfig_insecure_tls,
            )
        except kubeconfigs.KubeconfigError as error:
            raise TargetRefused(f"kubeconfig secret '{key}': {error}") from None
        try:
            remote = await KubeClient.from_credentials(credentials)
        except KubeError as error:
            raise TargetError(f"kubeconfig secret '{key}': {error}") from None
        if cached is not None:
            await cached.client.close()
        self._remotes[key] = _Remote(version, remote, RestMapper(remote))
        return remote, self._remotes[key].mapper

    async def close(self) -> None:
        for remote in self._remotes.values():
            await remote.client.close()
        self._remotes.clear()
