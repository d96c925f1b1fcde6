"""Docker Hub's three names, and which Docker config login is a host's."""

from __future__ import annotations

import base64
import json

import pytest

from sluice_runtime.oci.hosts import api_location, credentials_for, login_server
from sluice_runtime.oci.registry import OCIURL, Hints, Registry

AUTH = base64.b64encode(b"robot:s3cret").decode()


@pytest.mark.parametrize(
    ("host", "repository", "expected"),
    [
        pytest.param("docker.io", "acme/app", ("registry-1.docker.io", "acme/app"), id="hub"),
        pytest.param("index.docker.io", "acme/app", ("registry-1.docker.io", "acme/app"), id="hub-index"),
        pytest.param("docker.io", "nginx", ("registry-1.docker.io", "library/nginx"), id="hub-official"),
        pytest.param("ghcr.io", "acme/app", ("ghcr.io", "acme/app"), id="other"),
        pytest.param("127.0.0.1:5000", "app", ("127.0.0.1:5000", "app"), id="local-single-segment"),
    ],
)  # fmt: skip
def test_api_location(host: str, repository: str, expected: tuple[str, str]) -> None:
    assert api_location(host, repository) == expected


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        pytest.param("docker.io", "https://index.docker.io/v1/", id="hub"),
        pytest.param("registry-1.docker.io", "https://index.docker.io/v1/", id="hub-api"),
        pytest.param("ghcr.io", "ghcr.io", id="other"),
    ],
)
def test_login_server(host: str, expected: str) -> None:
    assert login_server(host) == expected


@pytest.mark.parametrize(
    ("key", "host", "expected"),
    [
        pytest.param("https://index.docker.io/v1/", "docker.io", ("robot", "s3cret"), id="docker-login-key"),
        pytest.param("docker.io", "index.docker.io", ("robot", "s3cret"), id="hub-alias"),
        pytest.param("ghcr.io", "ghcr.io", ("robot", "s3cret"), id="same-host"),
        pytest.param("https://index.docker.io/v1/", "ghcr.io", (None, None), id="hub-login-elsewhere"),
        pytest.param("ghcr.io", "docker.io", (None, None), id="other-login-for-hub"),
    ],
)  # fmt: skip
def test_credentials_for(key: str, host: str, expected: tuple[str | None, str | None]) -> None:
    assert credentials_for(json.dumps({"auths": {key: {"auth": AUTH}}}), host) == expected


@pytest.mark.parametrize(
    ("url", "manifest"),
    [
        pytest.param("oci://docker.io/acme/app", "registry-1.docker.io/v2/acme/app/manifests/v1", id="hub"),
        pytest.param("oci://docker.io/nginx", "registry-1.docker.io/v2/library/nginx/manifests/v1", id="hub-official"),
        pytest.param("oci://ghcr.io/acme/app", "ghcr.io/v2/acme/app/manifests/v1", id="other"),
    ],
)  # fmt: skip
def test_the_client_asks_the_api_host(url: str, manifest: str) -> None:
    parsed = OCIURL.parse(url)
    registry = Registry(
        parsed, insecure=False, ca_file=None, username=None, password=None, timeout=1,
        hints=Hints(tls="", credentials=""),
    )  # fmt: skip
    assert registry.container.manifest_url("v1") == manifest
    assert registry.url == parsed  # messages keep the host the user wrote
