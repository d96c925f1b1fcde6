"""The kubeconfig helm gets for a remote cluster: only the checked, inline credentials."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from helm_controller.targets import kubeconfig_document
from sluice_runtime.kube.kubeconfigs import Credentials


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    ("credentials", "cluster_entry", "user_entry"),
    [
        pytest.param(
            Credentials(server="https://k:6443", ca_data=b"CA", token="t0k"),
            {"server": "https://k:6443", "certificate-authority-data": b64("CA")},
            {"token": "t0k"},
            id="token",
        ),
        pytest.param(
            Credentials(server="https://k", cert_data=b"C", key_data=b"K", tls_server_name="api"),
            {"server": "https://k", "tls-server-name": "api"},
            {"client-certificate-data": b64("C"), "client-key-data": b64("K")},
            id="client-certificate",
        ),
        pytest.param(
            Credentials(server="https://k", username="u", password=None, proxy_url="http://p:3128"),
            {"server": "https://k", "proxy-url": "http://p:3128"},
            {"username": "u", "password": ""},
            id="basic-auth-and-proxy",
        ),
        pytest.param(Credentials(server="https://k"), {"server": "https://k"}, {}, id="anonymous"),
    ],
)
def test_the_kubeconfig_holds_the_credentials_and_nothing_else(
    credentials: Credentials, cluster_entry: dict[str, Any], user_entry: dict[str, Any]
) -> None:
    document = kubeconfig_document(credentials)
    assert document["clusters"] == [{"name": "target", "cluster": cluster_entry}]
    assert document["users"] == [{"name": "target", "user": user_entry}]
    assert document["current-context"] == "target"
    assert document["contexts"] == [
        {"name": "target", "context": {"cluster": "target", "user": "target"}}
    ]
