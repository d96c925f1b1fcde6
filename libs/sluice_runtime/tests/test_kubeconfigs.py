"""Tenant kubeconfigs: inline credentials are read, files and commands are refused."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml

from sluice_runtime.kube.kubeconfigs import (
    PATH_FIELDS,
    Credentials,
    ExecPlugin,
    KubeconfigError,
    parse,
    render,
)

CA = b"-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n"
CERT = b"-----BEGIN CERTIFICATE-----\ncert\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN EC PRIVATE KEY-----\nkey\n-----END EC PRIVATE KEY-----\n"
SERVER = "https://remote.example:6443"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(
    cluster: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
    **top: Any,
) -> str:
    """One cluster 'c', one user 'u', one context 'ctx' (current), overridable."""
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": SERVER, **(cluster or {})}}],
        "users": [{"name": "u", "user": {"token": "t0ken"} if user is None else user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    config.update(top)
    return yaml.safe_dump(config)


def exec_spec(**extra: Any) -> dict[str, Any]:
    return {"apiVersion": "client.authentication.k8s.io/v1", "command": "get-token", **extra}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(kubeconfig(), Credentials(SERVER, token="t0ken"), id="token"),
        pytest.param(
            kubeconfig(
                {"certificate-authority-data": b64(CA)},
                {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)},
            ),
            Credentials(SERVER, ca_data=CA, cert_data=CERT, key_data=KEY),
            id="client-certificate-data",
        ),
        pytest.param(
            kubeconfig(user={"username": "admin", "password": "pw"}),
            Credentials(SERVER, username="admin", password="pw"),
            id="basic-auth",
        ),
        pytest.param(kubeconfig(user={}), Credentials(SERVER), id="anonymous-user"),
        pytest.param(
            kubeconfig(
                {
                    "server": SERVER + "/",
                    "tls-server-name": "kubernetes",
                    "proxy-url": "http://proxy:3128",
                    "disable-compression": True,
                    "extensions": [{"name": "x", "extension": {}}],
                    "insecure-skip-tls-verify": False,
                }
            ),
            Credentials(
                SERVER, token="t0ken", tls_server_name="kubernetes", proxy_url="http://proxy:3128"
            ),
            id="cluster-options-trailing-slash",
        ),
        pytest.param(
            yaml.safe_dump(
                {
                    "clusters": [
                        {"name": "c", "cluster": {"server": SERVER}},
                        {
                            "name": "evil",
                            "cluster": {"server": "http://x", "certificate-authority": "/etc/x"},
                        },
                    ],
                    "users": [
                        {"name": "u", "user": {"token": "t0ken"}},
                        {"name": "evil", "user": {"tokenFile": "/var/run/secrets/token"}},
                    ],
                    "contexts": [
                        {"name": "other", "context": {"cluster": "evil", "user": "evil"}},
                        {"name": "ctx", "context": {"cluster": "c", "user": "u"}},
                    ],
                    "current-context": "ctx",
                }
            ),
            Credentials(SERVER, token="t0ken"),
            id="current-context-chosen-others-unread",
        ),
        pytest.param(
            kubeconfig(**{"current-context": ""}),
            Credentials(SERVER, token="t0ken"),
            id="only-context-without-current",
        ),
    ],
)
def test_inline_credentials_are_read(text: str, expected: Credentials) -> None:
    assert parse(text) == expected


def test_exec_plugin_is_read_when_allowed() -> None:
    text = kubeconfig(
        user={"exec": exec_spec(args=["--cluster", "a"], env=[{"name": "K", "value": "v"}])}
    )
    assert parse(text, allow_exec=True).exec == ExecPlugin(
        "get-token", ("--cluster", "a"), (("K", "v"),), "client.authentication.k8s.io/v1"
    )


def test_insecure_tls_is_read_when_allowed() -> None:
    text = kubeconfig({"insecure-skip-tls-verify": True})
    assert parse(text, allow_insecure_tls=True).insecure_skip_tls_verify is True


def test_secrets_stay_out_of_repr() -> None:
    text = kubeconfig(
        {"certificate-authority-data": b64(CA)},
        {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)},
    )
    shown = repr(parse(text)) + repr(parse(kubeconfig(user={"username": "a", "password": "pw"})))
    assert "key" not in shown.lower().replace("key_data", "")
    assert "pw" not in shown and "t0ken" not in repr(parse(kubeconfig()))


def test_a_urls_password_stays_out_of_repr() -> None:
    # Found by the fuzz (test_fuzz_kubeconfigs.py).
    shown = repr(parse(kubeconfig({"server": "https://u:pw1@h", "proxy-url": "http://u:pw2@p"})))
    assert "pw1" not in shown and "pw2" not in shown
    assert "https://redacted@h" in shown


@pytest.mark.parametrize(
    ("text", "flags", "message"),
    [
        pytest.param(
            kubeconfig(**{"current-context": ["ctx"]}), {}, "'current-context' is not a string",
            id="current-context-a-list",
        ),
        pytest.param(
            kubeconfig(user={"exec": {"command": "c", "env": 5}}), {"allow_exec": True},
            "'env' is not a list", id="exec-env-a-number",
        ),
    ],
)  # fmt: skip
def test_a_malformed_field_is_a_kubeconfig_error(
    text: str, flags: dict[str, bool], message: str
) -> None:
    # Found by the fuzz: TypeError (unhashable list, int not iterable) escaped.
    with pytest.raises(KubeconfigError, match=message):
        parse(text, **flags)


@pytest.mark.parametrize(
    ("text", "flags", "fragments"),
    [
        # Files of the controller, refused whatever the flags.
        pytest.param(
            kubeconfig(user={"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}),
            {"allow_exec": True, "allow_insecure_tls": True},
            ["user 'u': 'tokenFile' is not allowed", "inline in 'token'"],
            id="tokenFile",
        ),
        pytest.param(
            kubeconfig(user={"client-certificate": "/tls.crt", "client-key-data": b64(KEY)}),
            {"allow_exec": True},
            ["user 'u': 'client-certificate' is not allowed"],
            id="client-certificate",
        ),
        pytest.param(
            kubeconfig(user={"client-key": "/tls.key", "client-certificate-data": b64(CERT)}),
            {"allow_exec": True},
            ["user 'u': 'client-key' is not allowed"],
            id="client-key",
        ),
        pytest.param(
            kubeconfig({"certificate-authority": "/ca.crt"}),
            {"allow_insecure_tls": True},
            ["cluster 'c': 'certificate-authority' is not allowed"],
            id="certificate-authority",
        ),
        # Commands.
        pytest.param(
            kubeconfig(user={"exec": exec_spec()}),
            {},
            ["user 'u': 'exec' is not allowed", "--insecure-kubeconfig-exec"],
            id="exec",
        ),
        pytest.param(
            kubeconfig(user={"auth-provider": {"name": "gcp", "config": {"cmd-path": "/bin/sh"}}}),
            {"allow_exec": True},
            ["user 'u': 'auth-provider' is not allowed"],
            id="auth-provider",
        ),
        pytest.param(
            kubeconfig(user={"exec": exec_spec(command=None)}),
            {"allow_exec": True},
            ["user 'u' exec: 'command' is missing"],
            id="exec-without-command",
        ),
        pytest.param(
            kubeconfig(
                user={"exec": exec_spec(apiVersion="client.authentication.k8s.io/v1alpha1")}
            ),
            {"allow_exec": True},
            ["apiVersion 'client.authentication.k8s.io/v1alpha1' is not supported"],
            id="exec-old-api-version",
        ),
        # TLS and transport.
        pytest.param(
            kubeconfig({"insecure-skip-tls-verify": True}),
            {"allow_exec": True},
            ["cluster 'c': 'insecure-skip-tls-verify' is not allowed", "--insecure-kubeconfig-tls"],
            id="insecure-skip-tls-verify",
        ),
        pytest.param(
            kubeconfig({"server": "http://user:hunter2@remote:8080"}),
            {"allow_insecure_tls": True},
            ["cluster 'c': 'server' must be an https:// URL"],
            id="plain-http-server",
        ),
        pytest.param(
            kubeconfig({"server": None}), {}, ["cluster 'c': 'server' is missing"], id="no-server"
        ),
        pytest.param(
            kubeconfig({"proxy-url": "socks5://proxy:1080"}),
            {},
            ["cluster 'c': 'proxy-url' must be an http:// proxy"],
            id="socks-proxy",
        ),
        # Identities other than the one written, and unknown fields.
        pytest.param(
            kubeconfig(user={"token": "t", "as": "system:admin"}),
            {},
            ["user 'u': 'as' is not supported"],
            id="impersonation",
        ),
        pytest.param(
            kubeconfig(user={"token": "t", "as-groups": ["system:masters"]}),
            {},
            ["user 'u': 'as-groups' is not supported"],
            id="impersonated-groups",
        ),
        pytest.param(
            kubeconfig({"certificate-authority-file": "/x"}),
            {},
            ["cluster 'c': 'certificate-authority-file' is not supported"],
            id="unknown-cluster-field",
        ),
        pytest.param(
            kubeconfig(user={"token": "t", "username": "a", "password": "b"}),
            {},
            ["more than one authentication method ('token', 'username')"],
            id="token-and-basic",
        ),
        pytest.param(
            kubeconfig(user={"username": "a"}),
            {},
            ["'username' and 'password' go together"],
            id="username-alone",
        ),
        pytest.param(
            kubeconfig(user={"client-certificate-data": b64(CERT)}),
            {},
            ["'client-certificate-data' and 'client-key-data' go together"],
            id="certificate-without-key",
        ),
        pytest.param(
            kubeconfig(
                user={"tokenFile": "/t", "exec": exec_spec()}, cluster={"server": "http://x"}
            ),
            {},
            [
                "'server' must be an https:// URL",
                "'tokenFile' is not allowed",
                "'exec' is not allowed",
            ],
            id="every-problem-named-at-once",
        ),
        # Structure.
        pytest.param(
            "clusters: [\n  - name: c\n   token: s3cret",
            {},
            ["kubeconfig is not valid YAML at line 2"],
            id="malformed-yaml",
        ),
        pytest.param("just a string", {}, ["not a YAML mapping"], id="not-a-mapping"),
        pytest.param(
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{n}: &{n} [{', '.join(['*' + p] * 10)}]\n"
                for p, n in zip("abcdefg", "bcdefgh", strict=True)
            ),
            {},
            ["kubeconfig refused: YAML expands to more than 500000 nodes (the node limit"],
            id="alias-expansion",
        ),
        pytest.param(
            kubeconfig(contexts=[]),
            {},
            ["current-context 'ctx' is not in contexts"],
            id="current-context-missing",
        ),
        pytest.param(
            kubeconfig(contexts=[], **{"current-context": ""}),
            {},
            ["has no contexts"],
            id="no-contexts",
        ),
        pytest.param(
            kubeconfig(
                contexts=[
                    {"name": "a", "context": {"cluster": "c", "user": "u"}},
                    {"name": "b", "context": {"cluster": "c", "user": "u"}},
                ],
                **{"current-context": ""},
            ),
            {},
            ["2 contexts and no current-context"],
            id="several-contexts-none-current",
        ),
        pytest.param(
            kubeconfig(clusters=[]), {}, ["cluster 'c' is not in clusters"], id="cluster-missing"
        ),
        pytest.param(kubeconfig(users=[]), {}, ["user 'u' is not in users"], id="user-missing"),
        pytest.param(
            kubeconfig({"certificate-authority-data": "not base64!"}),
            {},
            ["cluster 'c': 'certificate-authority-data' is not valid base64"],
            id="bad-base64",
        ),
    ],
)
def test_refusals_name_the_field(text: str, flags: dict[str, bool], fragments: list[str]) -> None:
    with pytest.raises(KubeconfigError) as raised:
        parse(text, **flags)
    message = str(raised.value)
    for fragment in fragments:
        assert fragment in message
    # Messages land in status conditions: never a value.
    for secret in ("hunter2", "s3cret", "/var/run/secrets", "/tls.key", "system:admin"):
        assert secret not in message


@pytest.mark.parametrize(
    "credentials",
    [
        pytest.param(Credentials(server=SERVER), id="anonymous"),
        pytest.param(Credentials(server=SERVER, ca_data=CA, token="t0ken"), id="token-and-ca"),
        pytest.param(
            Credentials(server=SERVER, ca_data=CA, cert_data=CERT, key_data=KEY), id="client-cert"
        ),
        pytest.param(
            Credentials(
                server=SERVER,
                username="u",
                password="p",
                tls_server_name="api.internal",
                proxy_url="http://proxy:3128",
            ),
            id="basic-auth-tls-name-proxy",
        ),
        pytest.param(
            Credentials(server=SERVER, insecure_skip_tls_verify=True), id="insecure-when-allowed"
        ),
        pytest.param(
            Credentials(
                server=SERVER,
                exec=ExecPlugin("aws", ("eks", "get-token"), (("AWS_PROFILE", "x"),)),
            ),
            id="exec-when-allowed",
        ),
    ],
)
def test_render_writes_back_exactly_what_was_read(credentials: Credentials) -> None:
    text = render(credentials)
    assert parse(text, allow_exec=True, allow_insecure_tls=True) == credentials
    # Nothing that would make the reader open a file.
    assert not any(f"{key}:" in text for key in PATH_FIELDS)
