"""HelmRelease `spec.kubeConfig`: released to a second control plane, uninstalled there,
and a kubeconfig asking for the controller's files refused before helm runs."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import yaml

from sluice_envtest.harness import condition, make_secret
from sluice_runtime.helming import helm_binary
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import NAMESPACE

from .conftest import CONFIG_MAP, HELMRELEASE, HelmDelivery


def helm_list(d: HelmDelivery, kubeconfig: str) -> list[str]:
    done = subprocess.run(
        [str(helm_binary()), "list", "--all", "--namespace", d.namespace, "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
        env={"HOME": str(d.home), "KUBECONFIG": kubeconfig, "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    return [r["name"] for r in json.loads(done.stdout)]


async def test_a_release_to_a_kubeconfig_cluster_is_installed_and_uninstalled_there(
    helm_delivery: HelmDelivery, second_cluster: Any
) -> None:
    d = helm_delivery
    ns = d.namespace
    remote = await KubeClient.connect(kubeconfig=str(second_cluster.kubeconfig))
    try:
        await remote.create(
            NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        )
        await make_secret(d.kube, ns, "member", {"value": second_cluster.kubeconfig.read_text()})
        d.charts.add("app", "1.0.0")
        await d.helm_repository()
        await d.helm_release(
            "web", kubeConfig={"secretRef": {"name": "member"}}, values={"greeting": "remote"}
        )
        obj = await d.observe.wait_ready(HELMRELEASE, "web", timeout=60)
        assert obj["status"]["history"][0]["status"] == "deployed"
        remote_config = str(second_cluster.kubeconfig)
        assert helm_list(d, remote_config) == ["web"]
        assert helm_list(d, d.kubeconfig) == [], "nothing released on the host"
        cm = await remote.get(CONFIG_MAP, "web-config", ns)
        assert cm["data"]["greeting"] == "remote"

        await d.kube.delete(HELMRELEASE, "web", namespace=ns)
        for _ in range(300):
            if not helm_list(d, remote_config):
                break
            await asyncio.sleep(0.1)
        assert helm_list(d, remote_config) == []
    finally:
        await remote.close()


async def test_a_kubeconfig_reading_the_controllers_files_is_refused(
    helm_delivery: HelmDelivery, second_cluster: Any
) -> None:
    d = helm_delivery
    ns = d.namespace
    config = yaml.safe_load(second_cluster.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}
    await make_secret(d.kube, ns, "sneaky", {"value": yaml.safe_dump(config)})
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    await d.helm_release("web", kubeConfig={"secretRef": {"name": "sneaky"}})
    obj = await d.observe.wait(
        HELMRELEASE,
        "web",
        lambda o: (condition(o, "Stalled") or {}).get("status") == "True",
        what="Stalled",
    )
    stalled = condition(obj, "Stalled")
    assert stalled is not None and stalled["reason"] == "InitFailed"
    assert f"kubeconfig secret '{ns}/sneaky'" in stalled["message"]
    assert "tokenFile" in stalled["message"]
    assert "/var/run" not in stalled["message"], "values never reach status"
    assert "history" not in obj["status"]
