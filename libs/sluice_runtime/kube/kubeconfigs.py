"""Kubeconfigs that tenants hand to a controller, read without trusting them.

A Kustomization's `kubeConfig.secretRef` is written by whoever may create
Secrets in its namespace. A full kubeconfig loader (kubectl's, or
kubernetes-asyncio's) does much more than describe a cluster: it runs `exec`
plugins and `auth-provider`s, and reads `tokenFile`, `client-key`,
`client-certificate` and `certificate-authority` from the local filesystem.
In a controller that means a tenant can run commands in the controller's
container, or send the controller's own service-account token (a
`tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token`) to a server
of their choosing.

So `parse` reads one context's cluster and user and accepts only inline
values: `server`, `certificate-authority-data`, `tls-server-name`, an http
`proxy-url`, `client-certificate-data`/`client-key-data`, `token`,
`username`/`password`. It refuses, naming the field:

- every field that names a file (`certificate-authority`,
  `client-certificate`, `client-key`, `tokenFile`), always: a Secret's
  content has no business reading the controller's files, and inline data
  does the same job;
- `exec`, unless the operator allows it (`--insecure-kubeconfig-exec`, as in
  Flux): the plugin runs as the controller;
- `auth-provider` (gcp, azure, oidc), always: the providers are deprecated
  in Kubernetes and some of them run commands too;
- `insecure-skip-tls-verify: true`, unless the operator allows it
  (`--insecure-kubeconfig-tls`, as in Flux);
- a server that is not https: every supported kube-apiserver serves only
  TLS, and plain http would carry the credentials and manifests in clear;
- impersonation fields (`as`, `as-uid`, `as-groups`, `as-user-extra`) and
  anything else it does not know, rather than silently acting as another
  identity than the one written.

Only the selected context's cluster and user are checked: the others are
never used. Error messages name fields and entries, never values, since they
end up in status conditions.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yaml

from sluice_runtime import yamlloading
from sluice_runtime.redacting import redact_url

EXEC_FLAG = "--insecure-kubeconfig-exec"
TLS_FLAG = "--insecure-kubeconfig-tls"

PATH_FIELDS = {
    "certificate-authority": "certificate-authority-data",
    "client-certificate": "client-certificate-data",
    "client-key": "client-key-data",
    "tokenFile": "token",
}
"""Fields that make the reader open a file, and their inline replacements."""

_CLUSTER_FIELDS = {
    "server",
    "certificate-authority-data",
    "tls-server-name",
    "proxy-url",
    "insecure-skip-tls-verify",
    "disable-compression",  # a hint only; compression is never requested anyway
    "extensions",
}
_USER_FIELDS = {
    "client-certificate-data",
    "client-key-data",
    "token",
    "username",
    "password",
    "exec",
    "extensions",
}
_EXEC_FIELDS = {
    "apiVersion",
    "command",
    "args",
    "env",
    "installHint",
    "provideClusterInfo",
    "interactiveMode",
}
_EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


class KubeconfigError(ValueError):
    """The kubeconfig is malformed or asks for something not allowed; the message says
    which field, never its value."""


@dataclass(frozen=True)
class ExecPlugin:
    """A `user.exec` credential plugin (allowed only by the operator's flag)."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    api_version: str = "client.authentication.k8s.io/v1"


@dataclass(frozen=True)
class Credentials:
    """Everything needed to talk to one cluster as one user, all of it inline.

    Secret values are left out of `repr`, so logging this object leaks nothing.
    """

    server: str
    ca_data: bytes | None = field(default=None, repr=False)
    cert_data: bytes | None = field(default=None, repr=False)
    key_data: bytes | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls_server_name: str | None = None
    proxy_url: str | None = None
    insecure_skip_tls_verify: bool = False
    exec: ExecPlugin | None = None

    def __repr__(self) -> str:
        # A URL's user:password is a secret too.
        return (
            f"Credentials(server={redact_url(self.server)!r}, username={self.username!r}, "
            f"tls_server_name={self.tls_server_name!r}, "
            f"proxy_url={redact_url(self.proxy_url) if self.proxy_url else None!r}, "
            f"insecure_skip_tls_verify={self.insecure_skip_tls_verify!r}, exec={self.exec!r})"
        )


def parse(text: str, *, allow_exec: bool = False, allow_insecure_tls: bool = False) -> Credentials:
    """The selected context's credentials; KubeconfigError lists every refusal."""
    config = _load(text)
    context_name, context = _select_context(config)
    cluster_name = _string(context, "cluster", where=f"context '{context_name}'")
    cluster = _named(config, "clusters", "cluster", cluster_name)
    # A context without a user is anonymous access, as with kubectl.
    user_name = ""
    user: dict[str, Any] = {}
    if context.get("user") is not None:
        user_name = _string(context, "user", where=f"context '{context_name}'")
        user = _named(config, "users", "user", user_name)
    problems = [
        *_cluster_problems(cluster_name, cluster, allow_insecure_tls=allow_insecure_tls),
        *_user_problems(user_name, user, allow_exec=allow_exec),
    ]
    if problems:
        raise KubeconfigError("; ".join(problems))
    where_c, where_u = f"cluster '{cluster_name}'", f"user '{user_name}'"
    return Credentials(
        server=str(cluster["server"]).rstrip("/"),
        ca_data=_data(cluster, "certificate-authority-data", where=where_c),
        cert_data=_data(user, "client-certificate-data", where=where_u),
        key_data=_data(user, "client-key-data", where=where_u),
        token=_optional_string(user, "token", where=where_u),
        username=_optional_string(user, "username", where=where_u),
        password=_optional_string(user, "password", where=where_u),
        tls_server_name=_optional_string(cluster, "tls-server-name", where=where_c),
        proxy_url=_optional_string(cluster, "proxy-url", where=where_c),
        insecure_skip_tls_verify=cluster.get("insecure-skip-tls-verify") is True,
        exec=_exec_plugin(user["exec"], where=where_u) if "exec" in user else None,
    )


def render(credentials: Credentials) -> str:
    """A kubeconfig holding exactly `credentials`, all inline, for a program that
    only reads kubeconfig files (helm): what `parse` accepted, and nothing else.

    The text holds secrets: write it only to a private file.
    """

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    cluster: dict[str, Any] = {"server": credentials.server}
    if credentials.ca_data is not None:
        cluster["certificate-authority-data"] = b64(credentials.ca_data)
    if credentials.tls_server_name:
        cluster["tls-server-name"] = credentials.tls_server_name
    if credentials.proxy_url:
        cluster["proxy-url"] = credentials.proxy_url
    if credentials.insecure_skip_tls_verify:
        cluster["insecure-skip-tls-verify"] = True
    user: dict[str, Any] = {}
    if credentials.cert_data is not None:
        user["client-certificate-data"] = b64(credentials.cert_data)
    if credentials.key_data is not None:
        user["client-key-data"] = b64(credentials.key_data)
    for key, value in (
        ("token", credentials.token),
        ("username", credentials.username),
        ("password", credentials.password),
    ):
        if value is not None:
            user[key] = value
    if credentials.exec is not None:
        plugin = credentials.exec
        user["exec"] = {
            "apiVersion": plugin.api_version,
            "command": plugin.command,
            "args": list(plugin.args),
            "env": [{"name": k, "value": v} for k, v in plugin.env],
            "interactiveMode": "Never",
        }
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "target", "cluster": cluster}],
        "users": [{"name": "target", "user": user}],
        "contexts": [{"name": "target", "context": {"cluster": "target", "user": "target"}}],
        "current-context": "target",
    }
    return yaml.safe_dump(config, sort_keys=False)


# -- structure ---------------------------------------------------------------------


def _load(text: str) -> dict[str, Any]:
    try:
        config = yamlloading.load(text, limits=yamlloading.VALUES_LIMITS)
    except yamlloading.YamlLimitExceeded as error:
        raise KubeconfigError(f"kubeconfig refused: {error}") from None
    except yaml.YAMLError as error:
        # The parser's own message quotes the offending line, which may hold a
        # key: say only where it is.
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise KubeconfigError(f"kubeconfig is not valid YAML{where}") from None
    if not isinstance(config, dict):
        raise KubeconfigError("kubeconfig is not a YAML mapping")
    return config


def _select_context(config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    contexts = _entries(config, "contexts", "context")
    current = config.get("current-context")
    if current and not isinstance(current, str):
        raise KubeconfigError("kubeconfig 'current-context' is not a string")
    if current:
        if current not in contexts:
            raise KubeconfigError(f"kubeconfig current-context '{current}' is not in contexts")
        return str(current), contexts[current]
    if len(contexts) == 1:
        name = next(iter(contexts))
        return name, contexts[name]
    if not contexts:
        raise KubeconfigError("kubeconfig has no contexts")
    raise KubeconfigError(
        f"kubeconfig has {len(contexts)} contexts and no current-context to choose one"
    )


def _entries(config: dict[str, Any], list_key: str, item_key: str) -> dict[str, dict[str, Any]]:
    """`clusters`/`users`/`contexts` as name → body, checking their shape."""
    items = config.get(list_key) or []
    if not isinstance(items, list):
        raise KubeconfigError(f"kubeconfig '{list_key}' is not a list")
    found: dict[str, dict[str, Any]] = {}
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise KubeconfigError(f"kubeconfig {list_key}[{index}] has no name")
        body = item.get(item_key) or {}
        if not isinstance(body, dict):
            raise KubeconfigError(f"kubeconfig {item_key} '{item['name']}' is not a mapping")
        found[item["name"]] = body
    return found


def _named(config: dict[str, Any], list_key: str, item_key: str, name: str) -> dict[str, Any]:
    entries = _entries(config, list_key, item_key)
    if name not in entries:
        raise KubeconfigError(f"kubeconfig {item_key} '{name}' is not in {list_key}")
    return entries[name]


# -- what is refused ----------------------------------------------------------------


def _cluster_problems(name: str, cluster: dict[str, Any], *, allow_insecure_tls: bool) -> list[str]:
    where = f"kubeconfig cluster '{name}'"
    problems = [_path_problem(where, key) for key in cluster if key in PATH_FIELDS]
    problems += [
        f"{where}: '{key}' is not supported"
        for key in cluster
        if key not in PATH_FIELDS and key not in _CLUSTER_FIELDS
    ]
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        problems.append(f"{where}: 'server' is missing")
    else:
        parts = urlsplit(server)
        if parts.scheme != "https" or not parts.hostname:
            # Named without the value: a URL may carry user:password.
            problems.append(
                f"{where}: 'server' must be an https:// URL "
                "(plain http would carry credentials and manifests in clear text)"
            )
    if cluster.get("insecure-skip-tls-verify") is True and not allow_insecure_tls:
        problems.append(
            f"{where}: 'insecure-skip-tls-verify' is not allowed "
            f"(the controller's operator can allow it with {TLS_FLAG})"
        )
    proxy = cluster.get("proxy-url")
    if proxy is not None and (not isinstance(proxy, str) or urlsplit(proxy).scheme != "http"):
        problems.append(f"{where}: 'proxy-url' must be an http:// proxy (the only kind supported)")
    return problems


def _user_problems(name: str, user: dict[str, Any], *, allow_exec: bool) -> list[str]:
    where = f"kubeconfig user '{name}'"
    problems = [_path_problem(where, key) for key in user if key in PATH_FIELDS]
    for key in user:
        if key == "auth-provider":
            problems.append(
                f"{where}: 'auth-provider' is not allowed (auth providers are deprecated "
                "in Kubernetes; use a token or client certificate data)"
            )
        elif key == "exec" and not allow_exec:
            problems.append(
                f"{where}: 'exec' is not allowed (exec plugins run commands in the "
                f"controller; its operator can allow them with {EXEC_FLAG})"
            )
        elif key not in PATH_FIELDS and key not in _USER_FIELDS:
            problems.append(f"{where}: '{key}' is not supported")
    if ("username" in user) != ("password" in user):
        problems.append(f"{where}: 'username' and 'password' go together")
    methods = [m for m in ("token", "username", "exec") if m in user]
    if len(methods) > 1:
        names = ", ".join(f"'{m}'" for m in methods)
        problems.append(f"{where}: more than one authentication method ({names})")
    if ("client-certificate-data" in user) != ("client-key-data" in user):
        problems.append(f"{where}: 'client-certificate-data' and 'client-key-data' go together")
    return problems


def _path_problem(where: str, key: str) -> str:
    return (
        f"{where}: '{key}' is not allowed (a kubeconfig from a Secret may not read "
        f"the controller's files; put the content inline in '{PATH_FIELDS[key]}')"
    )


# -- values -------------------------------------------------------------------------


def _string(body: dict[str, Any], key: str, *, where: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise KubeconfigError(f"kubeconfig {where}: '{key}' is missing")
    return value


def _optional_string(body: dict[str, Any], key: str, *, where: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise KubeconfigError(f"kubeconfig {where}: '{key}' is not a string")
    return str(value)


def _data(body: dict[str, Any], key: str, *, where: str) -> bytes | None:
    value = body.get(key)
    if value is None:
        return None
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigError(f"kubeconfig {where}: '{key}' is not valid base64") from None


def _exec_plugin(spec: Any, *, where: str) -> ExecPlugin:
    where = f"{where} exec"
    if not isinstance(spec, dict):
        raise KubeconfigError(f"kubeconfig {where}: not a mapping")
    unknown = sorted(set(spec) - _EXEC_FIELDS)
    if unknown:
        raise KubeconfigError(f"kubeconfig {where}: '{unknown[0]}' is not supported")
    command = _string(spec, "command", where=where)
    api_version = spec.get("apiVersion") or _EXEC_API_VERSIONS[0]
    if api_version not in _EXEC_API_VERSIONS:
        raise KubeconfigError(f"kubeconfig {where}: apiVersion '{api_version}' is not supported")
    args = spec.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise KubeconfigError(f"kubeconfig {where}: 'args' is not a list of strings")
    env: list[tuple[str, str]] = []
    if not isinstance(spec.get("env") or [], list):
        raise KubeconfigError(f"kubeconfig {where}: 'env' is not a list")
    for item in spec.get("env") or []:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise KubeconfigError(f"kubeconfig {where}: 'env' entries need a name and a value")
        env.append((item["name"], str(item.get("value", ""))))
    return ExecPlugin(command, tuple(args), tuple(env), str(api_version))
