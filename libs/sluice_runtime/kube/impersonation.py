"""Which cluster, as whom: the client a delivery's apply, prune and health checks use.

Shared by every kind that applies a tenant's objects (Kustomization today,
HelmRelease's identity, ResourceSet next), so the tenancy rules live once:

- `serviceAccountName` (or the controller's `--default-service-account`)
  makes every call impersonate `system:serviceaccount:<namespace>:<name>`, so
  the API server's RBAC decides what a tenant may touch;
- a kubeconfig Secret points the same calls at another cluster; its client is
  built once per version of the Secret and reused. That kubeconfig is a
  tenant's input: it is read by `kubeconfigs.parse` (inline credentials only;
  no files, no commands unless the operator allows exec plugins), never by a
  kubeconfig loader.

Discovery (the REST mapping) uses the cluster's own credentials, since every
authenticated identity may read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sluice_api.meta import SecretKeyReference
from sluice_runtime.kube import kubeconfigs
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.discovery import RestMapper
from sluice_runtime.kube.errors import KubeError, NotFound
from sluice_runtime.kube.resources import SECRET
from sluice_runtime.kube.secrets import SecretError, secret_data

DEFAULT_KUBECONFIG_KEYS = ("value", "value.yaml")
"""Flux's keys of a kubeconfig Secret when the reference names none."""


class TargetClusterError(Exception):
    """The target cluster or identity cannot be used now; the message says why."""


class TargetClusterRefused(TargetClusterError):
    """The kubeconfig asks for what the controller never does for a tenant (read its
    files, run commands, skip TLS checks): retrying cannot help until the Secret or
    the controller's flags change."""


def impersonated_user(
    namespace: str, service_account_name: str | None, default: str | None = None
) -> str | None:
    """The user a tenant's calls run as: its service account, else the controller's
    default one, else None (the controller's own identity)."""
    account = service_account_name or default
    return f"system:serviceaccount:{namespace}:{account}" if account else None


@dataclass(frozen=True)
class TargetCluster:
    """Where and as whom one object's apply, prune and health reads go."""

    client: KubeClient
    """Impersonating the tenant's service account when one applies."""
    mapper: RestMapper
    """Discovery of the same cluster, with that cluster's own credentials."""


@dataclass
class _Remote:
    version: str
    client: KubeClient
    mapper: RestMapper


@dataclass
class TargetClusters:
    """The controller's clients for tenants: one per remote cluster, impersonated per call."""

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

    async def resolve(
        self,
        *,
        namespace: str,
        service_account_name: str | None,
        kubeconfig: SecretKeyReference | None = None,
        reader: KubeClient | None = None,
    ) -> TargetCluster:
        """The cluster (local, or the one `kubeconfig` names in `namespace`) and the
        identity for an object in `namespace`; `reader` reads the Secret (the
        controller's client by default). Raises TargetClusterError."""
        if kubeconfig is not None:
            base, mapper = await self._remote(namespace, kubeconfig, reader or self.client)
        else:
            base, mapper = self.client, self.local_mapper()
        user = impersonated_user(namespace, service_account_name, self.default_service_account)
        return TargetCluster(base.impersonate(user) if user else base, mapper)

    async def _remote(
        self, namespace: str, ref: SecretKeyReference, reader: KubeClient
    ) -> tuple[KubeClient, RestMapper]:
        key = f"{namespace}/{ref.name}"
        try:
            secret = await reader.get(SECRET, ref.name, namespace)
        except NotFound:
            raise TargetClusterError(f"kubeconfig secret '{key}' not found") from None
        version = str(secret["metadata"].get("resourceVersion", ""))
        cached = self._remotes.get(key)
        if cached is not None and cached.version == version:
            return cached.client, cached.mapper
        try:
            data = await secret_data(reader, namespace, ref.name)
        except SecretError as error:
            raise TargetClusterError(str(error)) from None
        keys = (ref.key,) if ref.key else DEFAULT_KUBECONFIG_KEYS
        content = next((data[k] for k in keys if data.get(k)), None)
        if content is None:
            wanted = " or ".join(f"'{k}'" for k in keys)
            raise TargetClusterError(f"kubeconfig secret '{key}' has no {wanted} key")
        try:
            credentials = kubeconfigs.parse(
                content,
                allow_exec=self.allow_kubeconfig_exec,
                allow_insecure_tls=self.allow_kubeconfig_insecure_tls,
            )
        except kubeconfigs.KubeconfigError as error:
            raise TargetClusterRefused(f"kubeconfig secret '{key}': {error}") from None
        try:
            remote = await KubeClient.from_credentials(credentials)
        except KubeError as error:
            raise TargetClusterError(f"kubeconfig secret '{key}': {error}") from None
        if cached is not None:
            await cached.client.close()
        self._remotes[key] = _Remote(version, remote, RestMapper(remote))
        return remote, self._remotes[key].mapper

    async def close(self) -> None:
        for remote in self._remotes.values():
            await remote.client.close()
        self._remotes.clear()
