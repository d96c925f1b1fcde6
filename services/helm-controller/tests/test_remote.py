"""kubeConfig: a HelmRelease released to another cluster (a second API server),
with the kubeconfig Secret read by the runtime's safe parser."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from sluice_envtest.harness import condition, make_secret
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.helming import helm_binary
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import NotFound

from .conftest import CONFIG_MAP, HELMRELEASE, HelmDelivery


def remote_helm(cluster: Cluster, home: Path, *args: str) -> Any:
    done = subprocess.run(
        [str(helm_binary()), *args, "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
        env={"HOME": str(home), "KUBECONFIG": str(cluster.kubeconfig), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_a_release_goes_to_the_cluster_of_its_kubeconfig(
    helm_delivery: HelmDelivery, second_cluster: Cluster
) -> None:
    d = helm_delivery
    ns = d.namespace
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    await make_secret(d.kube, ns, "remote", {"value": second_cluster.kubeconfig.read_text()})
    await d.helm_release(
        "web",
        values={"greeting": "far"},
        kubeConfig={"secretRef": {"name": "remote"}},
        install={"createNamespace": True},
        driftDetection={"mode": "enabled"},
    )
    obj = await d.observe.wait_ready(HELMRELEASE, "web", timeout=60)
    assert [h["version"] for h in obj["status"]["history"]] == [1]
    remote = await KubeClient.connect(kubeconfig=str(second_cluster.kubeconfig))
    try:
        cm = await remote.get(CONFIG_MAP, "web-config", ns)
        assert cm["data"] == {"greeting": "far", "version": "1.0.0"}
        # helm on the remote cluster sees the release; the local cluster has none.
        [listed] = remote_helm(second_cluster, d.home, "list", "--namespace", ns)
        assert (listed["name"], listed["status"]) == ("web", "deployed")
        assert d.helm("list", "--all") == []
        try:
            await d.kube.get(CONFIG_MAP, "web-config", ns)
            raise AssertionError("released locally")
        except NotFound:
            pass

        # Drift on the remote cluster is found and corrected there.
        await remote.merge_patch(
            CONFIG_MAP, "web-config", {"data": {"greeting": "edited"}}, namespace=ns
        )
        await d.observe.poke(HELMRELEASE, "web", "drifted")
        await d.wait_event("web", reason="DriftCorrected")
        assert (await remote.get(CONFIG_MAP, "web-config", ns))["data"]["greeting"] == "far"

        # Deleting the HelmRelease uninstalls it from the remote cluster.
        await d.kube.delete(HELMRELEASE, "web", namespace=ns)
        await d.wait_event("web", reason="UninstallSucceeded", timeout=30)
        assert remote_helm(second_cluster, d.home, "list", "--all", "--namespace", ns) == []
    finally:
        await remote.close()


async def test_a_kubeconfig_that_reads_controller_files_stalls_naming_the_field(
    helm_delivery: HelmDelivery, second_cluster: Cluster
) -> None:
    d = helm_delivery
    ns = d.namespace
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    config = yaml.safe_load(second_cluster.kubeconfig.read_text())
    for entry in config["users"]:
        entry["user"] = {"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}
    await make_secret(d.kube, ns, "sneaky", {"value": yaml.safe_dump(config)})
    await d.helm_release("web", kubeConfig={"secretRef": {"name": "sneaky"}})
    obj = await d.observe.wait_stalled(HELMRELEASE, "web", timeout=30)
    ready = condition(obj, "Ready")
    assert ready is not None and ready["reason"] == "InitFailed"
    assert f"kubeconfig secret '{ns}/sneaky'" in ready["message"]
    assert "tokenFile" in ready["message"]
    assert "/var/run/secrets" not in ready["message"]
    assert d.helm("list", "--all") == []
