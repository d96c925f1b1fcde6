"""KubeClient.from_credentials against a real HTTPS peer on loopback: what it sends,
what it verifies, and that no key material stays on disk."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import tempfile
from pathlib import Path

import pytest

from sluice_envtest.certificates import make_serving_pki
from sluice_envtest.traps import RecordingHttpsServer
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import ApiUnavailable, ConfigError
from sluice_runtime.kube.kubeconfigs import Credentials, ExecPlugin


async def version(credentials: Credentials) -> None:
    client = await KubeClient.from_credentials(credentials, verify=False)
    try:
        await client.request("GET", "/version")
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("auth", "header"),
    [
        pytest.param({"token": "t0ken"}, "Bearer t0ken", id="token"),
        pytest.param(
            {"username": "admin", "password": "pw"},
            "Basic " + base64.b64encode(b"admin:pw").decode(),
            id="basic",
        ),
        pytest.param({}, None, id="anonymous"),
    ],
)
async def test_sends_only_the_inline_credentials(auth: dict[str, str], header: str | None) -> None:
    async with RecordingHttpsServer() as trap:
        await version(Credentials(trap.url, ca_data=trap.ca_pem, **auth))
    assert [(r.method, r.path) for r in trap.requests] == [("GET", "/version")]
    assert trap.requests[0].headers.get("Authorization") == header


async def test_the_server_certificate_is_verified_against_the_given_ca() -> None:
    other_ca = make_serving_pki().ca.cert
    async with RecordingHttpsServer() as trap:
        with pytest.raises(ApiUnavailable):
            await version(Credentials(trap.url, ca_data=other_ca, token="t0ken"))
        with pytest.raises(ApiUnavailable):
            await version(Credentials(trap.url, token="t0ken"))  # system CAs only
        # What --insecure-kubeconfig-tls lets a kubeconfig ask for.
        await version(Credentials(trap.url, token="t0ken", insecure_skip_tls_verify=True))
    assert len(trap.requests) == 1


async def test_tls_server_name_is_what_the_certificate_is_checked_against() -> None:
    async with RecordingHttpsServer(pki=make_serving_pki(hosts=("kubernetes",))) as trap:
        with pytest.raises(ApiUnavailable):
            await version(Credentials(trap.url, ca_data=trap.ca_pem))
        await version(Credentials(trap.url, ca_data=trap.ca_pem, tls_server_name="kubernetes"))
    assert len(trap.requests) == 1


async def test_no_certificate_or_key_stays_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    pki = make_serving_pki()
    async with RecordingHttpsServer() as trap:
        await version(
            Credentials(
                trap.url, ca_data=trap.ca_pem, cert_data=pki.serving.cert, key_data=pki.serving.key
            )
        )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("credentials", "message"),
    [
        pytest.param(
            Credentials("https://127.0.0.1:1", ca_data=b"not a certificate"),
            "certificate-authority-data is not a PEM certificate",
            id="bad-ca",
        ),
        pytest.param(
            Credentials("https://127.0.0.1:1", cert_data=b"x", key_data=b"y"),
            "client-certificate-data and client-key-data are not",
            id="bad-client-pair",
        ),
    ],
)
async def test_unusable_certificate_data_is_named(credentials: Credentials, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        await KubeClient.from_credentials(credentials, verify=False)


def exec_plugin(tmp_path: Path, status: dict[str, str], *, exit_code: int = 0) -> ExecPlugin:
    """A plugin that leaves a marker (proof it ran) and prints an ExecCredential."""
    answer = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential"}
    script = (
        "import json, os, pathlib, sys\n"
        f"pathlib.Path({str(tmp_path / 'ran')!r}).write_text(os.environ['PLUGIN_ARG'])\n"
        f"print(json.dumps({{**{answer!r}, 'status': {status!r}}}))\n"
        f"print('plugin says no', file=sys.stderr); sys.exit({exit_code})\n"
    )
    return ExecPlugin(sys.executable, ("-c", script), (("PLUGIN_ARG", "from-env"),))


async def test_an_allowed_exec_plugin_supplies_the_token(tmp_path: Path) -> None:
    async with RecordingHttpsServer() as trap:
        plugin = exec_plugin(tmp_path, {"token": "from-plugin"})
        await version(Credentials(trap.url, ca_data=trap.ca_pem, exec=plugin))
    assert (tmp_path / "ran").read_text() == "from-env"
    assert trap.requests[0].headers["Authorization"] == "Bearer from-plugin"


async def test_a_failing_exec_plugin_is_reported_without_its_output(tmp_path: Path) -> None:
    plugin = exec_plugin(tmp_path, {"token": "leaked"}, exit_code=3)
    with pytest.raises(ConfigError) as raised:
        await KubeClient.from_credentials(Credentials("https://127.0.0.1:1", exec=plugin))
    assert "exited with 3: plugin says no" in str(raised.value)
    assert "leaked" not in str(raised.value) and json.dumps("leaked") not in str(raised.value)


_PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY")


def _environment(monkeypatch: pytest.MonkeyPatch, home: Path, **variables: str) -> None:
    for name in _PROXY_VARIABLES + tuple(n.lower() for n in _PROXY_VARIABLES) + ("NETRC",):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    for name, value in variables.items():
        monkeypatch.setenv(name, value.replace("{home}", str(home)))


def test_requests_take_no_worker_thread_without_a_proxy_or_netrc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # aiohttp's trust_env lookups run in the loop's default executor, which
    # exists only once something has used it: a fresh loop shows whether it was.
    _environment(monkeypatch, tmp_path)

    async def two_requests() -> object:
        async with RecordingHttpsServer() as trap:
            await version(Credentials(trap.url, ca_data=trap.ca_pem, token="t0ken"))
            await version(Credentials(trap.url, ca_data=trap.ca_pem, token="t0ken"))
        assert len(trap.requests) == 2
        return asyncio.get_running_loop()._default_executor  # type: ignore[attr-defined]

    assert asyncio.run(two_requests()) is None


@pytest.mark.parametrize(
    ("variables", "trusted"),
    [
        pytest.param({}, False, id="nothing-to-find"),
        pytest.param({"HTTPS_PROXY": "http://127.0.0.1:9"}, True, id="https-proxy"),
        pytest.param({"no_proxy": "example.com"}, True, id="lower-case-variable"),
        pytest.param({"NETRC": "{home}/netrc"}, True, id="netrc-variable"),
    ],
)
async def test_the_environment_is_consulted_only_when_it_holds_something(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], trusted: bool
) -> None:
    _environment(monkeypatch, tmp_path, **variables)
    (tmp_path / "netrc").write_text("machine example.com login a password b\n")
    client = await KubeClient.from_credentials(Credentials("https://127.0.0.1:9"), verify=False)
    try:
        assert client._shared.api.rest_client.pool_manager.trust_env is trusted
    finally:
        await client.close()


async def test_a_netrc_file_is_still_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _environment(monkeypatch, tmp_path)
    (tmp_path / ".netrc").write_text("machine 127.0.0.1 login robot password s3cret\n")
    async with RecordingHttpsServer() as trap:
        await version(Credentials(trap.url, ca_data=trap.ca_pem))
    expected = "Basic " + base64.b64encode(b"robot:s3cret").decode()
    assert trap.requests[0].headers.get("Authorization") == expected
