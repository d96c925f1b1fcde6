"""The kubernetes-asyncio ApiClient behind a KubeClient, from a kubeconfig or from credentials.

The controller's own kubeconfig goes through kubernetes-asyncio's loader
(certificates, tokens, exec plugins, in-cluster service accounts);
credentials a tenant supplies (parsed by `kubeconfigs.parse`) never do: their
Configuration is built field by field from inline values.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import os
import ssl
import tempfile
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp

from sluice_runtime import resolving
from sluice_runtime.kube.errors import ConfigError
from sluice_runtime.kube.exec_plugins import run_exec_plugin
from sluice_runtime.kube.kubeconfigs import Credentials, ExecPlugin
from sluice_runtime.kube.transport import k8s_client, k8s_config


def kubeconfig_path(kubeconfig: str | None) -> str | None:
    """The kubeconfig file the controller's own client loads, as an absolute path,
    or None for the in-cluster service account (or no configuration at all).

    kubectl's order: the explicit path (`--kubeconfig`), `$KUBECONFIG`, the
    in-cluster service account, `~/.kube/config`. The client and every program
    the controller runs against its cluster (helm) take it from here, so they
    talk to the same cluster as the same identity: helm runs with a private
    HOME and working directory, where neither `$KUBECONFIG` nor `~` would
    lead to the controller's file.
    """
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        return os.path.abspath(path)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    home = os.path.expanduser("~/.kube/config")
    return home if os.path.exists(home) else None


async def kubeconfig_api_client(kubeconfig: str | None, context: str | None) -> Any:
    """An ApiClient configured the way kubectl loads configuration (see `KubeClient.connect`)."""
    configuration = k8s_client.Configuration()
    path = kubeconfig_path(kubeconfig)
    try:
        if path:
            if not os.path.exists(path):
                raise ConfigError(f"kubeconfig {path} does not exist")
            await k8s_config.load_kube_config(
                config_file=path, context=context, client_configuration=configuration
            )
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            raise ConfigError(
                "no kubeconfig: pass --kubeconfig, set KUBECONFIG, or run in a cluster"
            )
    except ConfigError:
        raise
    except Exception as error:  # any failure to read a user's file is a config error
        raise ConfigError(f"kubeconfig {path} is not usable: {error}") from None
    # Watches hold a connection each; the default pool of 100 could be
    # exhausted by informers plus concurrent reconciles.
    configuration.connection_pool_maxsize = 512
    api = k8s_client.ApiClient(configuration=configuration)
    await _own_lookups(api)
    skip_environment_lookups(api)
    return api


def twin_api_client(api: Any) -> Any:
    """An ApiClient like `api` (server, credentials, TLS context, headers) on a
    connection pool of its own.

    Built from `api` rather than from its Configuration: a client made from
    credentials loaded its certificate from files that were deleted once its
    SSLContext had read them, so the context is what carries it.
    """
    twin = copy.copy(api)
    twin.rest_client = copy.copy(api.rest_client)
    twin.rest_client.pool_manager = _session_like(api.rest_client.pool_manager)
    return twin


def _session_like(session: aiohttp.ClientSession) -> aiohttp.ClientSession:
    """kubernetes-asyncio's session (connection limit, TLS context, proxy lookups)
    with a connector that looks the server's name up on threads of its own
    (`resolving`): a tenant names the server of a remote cluster."""
    connector = session.connector
    assert isinstance(connector, aiohttp.TCPConnector)
    return aiohttp.ClientSession(
        connector=resolving.connector(limit=connector.limit, ssl=connector._ssl),
        trust_env=session.trust_env,
        read_bufsize=2**21,  # as kubernetes-asyncio's: big watch events fit
    )


async def _own_lookups(api: Any) -> None:
    """Swap the session kubernetes-asyncio made (no connection opened yet) for one like it."""
    made = api.rest_client.pool_manager
    api.rest_client.pool_manager = _session_like(made)
    await made.close()


def skip_environment_lookups(api: Any) -> None:
    """Stop aiohttp's per-request proxy and netrc lookups when they cannot find anything.

    kubernetes-asyncio makes its aiohttp session with `trust_env`, so every
    request looks for a proxy in the environment and reads `~/.netrc`, each
    in a worker thread: two thread hops per request, a large share of the
    client's CPU in an apply of thousands of objects. With no proxy variable
    and no netrc file (checked once, when the client is made) they find
    nothing, and are turned off; otherwise they stay, as kubectl honours
    HTTPS_PROXY.
    """
    netrc = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    if urllib.request.getproxies_environment() or os.path.exists(netrc):
        return
    api.rest_client.pool_manager._trust_env = False


async def credentials_api_client(credentials: Credentials) -> Any:
    """An ApiClient for parsed credentials (see `KubeClient.from_credentials`)."""
    configuration = k8s_client.Configuration()
    configuration.host = credentials.server
    configuration.verify_ssl = not credentials.insecure_skip_tls_verify
    configuration.tls_server_name = credentials.tls_server_name
    configuration.proxy = credentials.proxy_url
    configuration.connection_pool_maxsize = 64
    cert, key = credentials.cert_data, credentials.key_data
    if credentials.token:
        configuration.api_key["BearerToken"] = f"Bearer {credentials.token}"
    elif credentials.username is not None:
        pair = f"{credentials.username}:{credentials.password or ''}".encode()
        configuration.api_key["BearerToken"] = f"Basic {base64.b64encode(pair).decode()}"
    elif credentials.exec is not None:
        issued = await run_exec_plugin(credentials.exec)
        if issued.token:
            configuration.api_key["BearerToken"] = f"Bearer {issued.token}"
            configuration.refresh_api_key_hook = _exec_token_refresher(
                credentials.exec, issued.expires
            )
        else:
            cert, key = issued.cert_data, issued.key_data
    # The ssl module reads certificates and keys only from files: they live
    # in a private directory just long enough for the client's SSLContext
    # to load them, then are deleted.
    with tempfile.TemporaryDirectory(prefix="sluice-tls-") as scratch:
        configuration.ssl_ca_cert = _private_file(scratch, "ca.crt", credentials.ca_data)
        configuration.cert_file = _private_file(scratch, "tls.crt", cert)
        configuration.key_file = _private_file(scratch, "tls.key", key)
        try:
            if credentials.ca_data is not None:
                ssl.create_default_context(cadata=credentials.ca_data.decode(errors="replace"))
        except (ssl.SSLError, ValueError):
            raise ConfigError(
                "kubeconfig certificate-authority-data is not a PEM certificate"
            ) from None
        try:
            api = k8s_client.ApiClient(configuration=configuration)
        except (ssl.SSLError, ValueError):
            raise ConfigError(
                "kubeconfig client-certificate-data and client-key-data are not a PEM "
                "certificate and its key"
            ) from None
    configuration.ssl_ca_cert = configuration.cert_file = configuration.key_file = None
    await _own_lookups(api)
    skip_environment_lookups(api)
    return api


def _private_file(directory: str, name: str, data: bytes | None) -> str | None:
    if data is None:
        return None
    path = os.path.join(directory, name)
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    return path


def _exec_token_refresher(plugin: ExecPlugin, expires: datetime | None) -> Any:
    """A kubernetes-asyncio refresh hook that reruns the plugin shortly before its
    token expires (tokens without an expiry are kept for the client's life)."""
    lock = asyncio.Lock()
    state = {"expires": expires}

    async def refresh(configuration: Any) -> None:
        async with lock:
            due = state["expires"]
            if due is None or datetime.now(UTC) < due - timedelta(seconds=30):
                return
            issued = await run_exec_plugin(plugin)
            if issued.token:
                configuration.api_key["BearerToken"] = f"Bearer {issued.token}"
            state["expires"] = issued.expires

    return refresh
