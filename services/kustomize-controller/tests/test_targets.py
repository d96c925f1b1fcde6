"""Remote clusters by kubeconfig Secret: a tenant's kubeconfig may carry credentials,
never reach the controller's files or run commands in it (unless the operator says so)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from sluice_envtest.harness import condition, make_secret
from sluice_envtest.traps import RecordingHttpsServer
from sluice_runtime.kube.client import JSON, KubeClient

from .conftest import CONFIG_MAP, KUSTOMIZATION, NAMESPACE, Delivery, Flags, config_map


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(server: str, ca: bytes, user: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "remote",
                    "cluster": {"server": server, "certificate-authority-data": b64(ca)},
                }
            ],
            "users": [{"name": "tenant", "user": user}],
            "contexts": [{"name": "remote", "context": {"cluster": "remote", "user": "tenant"}}],
            "current-context": "remote",
        }
    )


def exec_user(command: list[str]) -> dict[str, Any]:
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": command[0],
            "args": command[1:],
        }
    }


async def remote_kustomization(d: Delivery, name: str, content: str) -> None:
    await make_secret(d.kube, d.namespace, name, {"value": content})
    repo = d.repo(name)
    repo.commit("c", files={"r.yaml": config_map(f"{name}-cm", d.namespace, where="remote")})
    repo.push()
    await d.git_repository(name)
    await d.kustomization(name, source=name, kubeConfig={"secretRef": {"name": name}})


async def stalled(d: Delivery, name: str, *, harmed: Callable[[], bool]) -> JSON:
    """Wait for Stalled, or stop early once the harm is done (what the test must prevent)."""
    obj = await d.observe.wait(
        KUSTOMIZATION,
        name,
        lambda o: (condition(o, "Stalled") or {}).get("status") == "True" or harmed(),
        what="Stalled",
    )
    assert not harmed()
    ready = condition(obj, "Ready") or {}
    # Flux's reason for a kubeconfig it cannot use (docs/reasons.md: Sluice stalls).
    assert ready.get("status") == "False" and ready.get("reason") == "ReconciliationFailed"
    return obj


async def test_a_token_file_is_refused_and_the_controllers_token_never_sent(
    delivery: Delivery, tmp_path: Path
) -> None:
    """The attack: `tokenFile` at the controller's own service-account token, `server` at
    the tenant's host. The recording server stands in for that host."""
    d = delivery
    token_file = tmp_path / "token"
    token_file.write_text("controller-s3cret-token")
    async with RecordingHttpsServer() as trap:
        content = kubeconfig(trap.url, trap.ca_pem, {"tokenFile": str(token_file)})
        await remote_kustomization(d, "tokenfile", content)
        # Nothing may reach the server the tenant named.
        obj = await stalled(d, "tokenfile", harmed=lambda: bool(trap.requests))
    message = condition(obj, "Stalled")["message"]  # type: ignore[index]
    assert "kubeconfig user 'tenant': 'tokenFile' is not allowed" in message
    assert "controller-s3cret-token" not in json.dumps(obj)


async def test_an_exec_plugin_is_refused_and_never_run(delivery: Delivery, tmp_path: Path) -> None:
    d = delivery
    marker = tmp_path / "exec-ran"
    async with RecordingHttpsServer() as trap:
        content = kubeconfig(trap.url, trap.ca_pem, exec_user(["sh", "-c", f"touch {marker}"]))
        await remote_kustomization(d, "exec", content)
        obj = await stalled(d, "exec", harmed=lambda: marker.exists() or bool(trap.requests))
    message = condition(obj, "Stalled")["message"]  # type: ignore[index]
    assert "kubeconfig user 'tenant': 'exec' is not allowed" in message
    assert "--insecure-kubeconfig-exec" in message


@pytest.mark.parametrize(
    "delivery", [Flags(kustomize=("--insecure-kubeconfig-exec",))], indirect=True
)
async def test_with_insecure_kubeconfig_exec_a_plugin_supplies_the_credentials(
    delivery: Delivery, second_cluster: Any, tmp_path: Path
) -> None:
    d = delivery
    ns = d.namespace
    admin = yaml.safe_load(second_cluster.kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    user = admin["users"][0]["user"]
    # The plugin hands out the second cluster's admin client certificate.
    credential = tmp_path / "credential.json"
    credential.write_text(
        json.dumps(
            {
                "apiVersion": "client.authentication.k8s.io/v1",
                "kind": "ExecCredential",
                "status": {
                    "clientCertificateData": base64.b64decode(
                        user["client-certificate-data"]
                    ).decode(),
                    "clientKeyData": base64.b64decode(user["client-key-data"]).decode(),
                },
            }
        )
    )
    marker = tmp_path / "exec-ran"
    content = kubeconfig(
        cluster["server"],
        base64.b64decode(cluster["certificate-authority-data"]),
        exec_user(["sh", "-c", f"touch {marker} && cat {credential}"]),
    )
    remote = await KubeClient.connect(kubeconfig=str(second_cluster.kubeconfig))
    try:
        await remote.create(
            NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        )
        await remote_kustomization(d, "allowed", content)
        await d.observe.wait_ready(KUSTOMIZATION, "allowed")
        assert marker.exists()
        assert (await remote.get(CONFIG_MAP, "allowed-cm", ns))["data"] == {"where": "remote"}
    finally:
        await remote.close()


@pytest.mark.parametrize(
    ("delivery", "allowed"),
    [
        pytest.param(Flags(), False, id="refused"),
        pytest.param(Flags(kustomize=("--insecure-kubeconfig-tls",)), True, id="allowed"),
    ],
    indirect=["delivery"],
)
async def test_insecure_skip_tls_verify_needs_the_operators_flag(
    delivery: Delivery, allowed: bool
) -> None:
    d = delivery
    async with RecordingHttpsServer() as trap:
        # No CA: only skipping verification lets the client talk to this server.
        content = yaml.safe_dump(
            {
                "clusters": [
                    {"name": "c", "cluster": {"server": trap.url, "insecure-skip-tls-verify": True}}
                ],
                "users": [{"name": "u", "user": {"token": "tenant-token"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
        await remote_kustomization(d, "insecure", content)
        if allowed:
            await d.observe.wait(
                KUSTOMIZATION, "insecure", lambda o: bool(trap.requests), what="server contacted"
            )
            assert trap.requests[0].headers["Authorization"] == "Bearer tenant-token"
            return
        obj = await stalled(d, "insecure", harmed=lambda: bool(trap.requests))
    message = condition(obj, "Stalled")["message"]  # type: ignore[index]
    assert "cluster 'c': 'insecure-skip-tls-verify' is not allowed" in message
    assert "--insecure-kubeconfig-tls" in message
