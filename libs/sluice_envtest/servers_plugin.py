"""Pytest fixtures for the source-controller's tests: real git, OCI and S3 servers on loopback.

One server of each kind per test session, started when a test first asks
for it and stopped at the end; the processes die with the session however
it ends. Tests share them, so each test should use its own repository names
(the per-repository counters of the git servers then stay its own).
Register with `-p sluice_envtest.servers_plugin`; tests using these
fixtures are marked `e2e` by pytest_plugin.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.gitservice import GitServiceApi
from sluice_envtest.registry import OciRegistry
from sluice_envtest.s3server import S3Server
from sluice_envtest.sshserver import SshGitServer


@pytest.fixture(scope="session")
def git_http() -> Iterator[GitHttpServer]:
    """Smart HTTP without authentication."""
    with GitHttpServer() as server:
        yield server


@pytest.fixture(scope="session")
def git_http_auth() -> Iterator[GitHttpServer]:
    """Smart HTTP wanting basic auth (`.username`, `.password`) or a bearer `.token`."""
    with GitHttpServer(
        username="sluice",
        password=secrets.token_hex(8),
        token=secrets.token_hex(16),
    ) as server:
        yield server


@pytest.fixture(scope="session")
def git_https() -> Iterator[GitHttpServer]:
    """Smart HTTPS with a certificate from a test CA (`.ca_pem`, `.ca_file`); no auth."""
    with GitHttpServer(tls=True) as server:
        yield server


@pytest.fixture(scope="session")
def git_service_api() -> Iterator[GitServiceApi]:
    """GitHub's, GitLab's and Gitea's REST subsets over plain HTTP, wanting `.token`."""
    with GitServiceApi(token=secrets.token_hex(16)) as server:
        yield server


@pytest.fixture(scope="session")
def git_service_api_tls() -> Iterator[GitServiceApi]:
    """The same over HTTPS with a certificate from a test CA (`.ca_pem`); no token."""
    with GitServiceApi(tls=True) as server:
        yield server


@pytest.fixture(scope="session")
def git_ssh() -> Iterator[SshGitServer]:
    """sshd serving git as user `git`; `.known_hosts`, `.identity`, `.identity_pub`."""
    with SshGitServer() as server:
        yield server


@pytest.fixture(scope="session")
def oci_registry() -> Iterator[OciRegistry]:
    """docker-registry over plain HTTP without authentication."""
    with OciRegistry() as registry:
        yield registry


@pytest.fixture(scope="session")
def oci_registry_tls() -> Iterator[OciRegistry]:
    """docker-registry over HTTPS with a certificate from a test CA (`.ca_pem`)."""
    with OciRegistry(tls=True) as registry:
        yield registry


@pytest.fixture(scope="session")
def oci_registry_auth() -> Iterator[OciRegistry]:
    """docker-registry wanting htpasswd basic auth; `.docker_config` is the Secret's data."""
    with OciRegistry(username="sluice", password=secrets.token_hex(8)) as registry:
        yield registry


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 over plain HTTP, checking signatures; `.secret_data()` is a Bucket's Secret."""
    with S3Server() as server:
        yield server


@pytest.fixture(scope="session")
def s3_server_tls() -> Iterator[S3Server]:
    """moto's S3 over HTTPS with a certificate from a test CA (`.ca_pem`)."""
    with S3Server(tls=True) as server:
        yield server
