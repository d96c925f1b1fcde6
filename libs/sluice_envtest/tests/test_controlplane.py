"""The local control plane behaves like a real cluster where Sluice needs it to."""

from __future__ import annotations

import asyncio
import subprocess
import time

from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import ResourceType

GITREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")


async def test_empty_strings_are_valid_in_custom_resources(
    kube: KubeClient, namespace: str
) -> None:
    # Built with Go >= 1.18 without the build's patch, kube-apiserver 1.20
    # rejects "" as null; conditions with empty messages would be refused.
    created = await kube.create(
        GITREPO,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "GitRepository",
            "metadata": {"name": "empty", "namespace": namespace},
            "spec": {"url": "https://example.com/x.git", "interval": "1m", "ignore": ""},
        },
    )
    assert created["spec"]["ignore"] == ""


def test_server_reports_its_real_version(cluster: Cluster) -> None:
    if cluster.plane is None:
        return  # an existing cluster reports whatever it is
    out = subprocess.run(
        cluster.kubectl("version", "-o", "json"), capture_output=True, text=True, check=True
    ).stdout
    assert '"gitVersion": "v1.20.2"' in out


def test_crds_are_served_with_their_schema(cluster: Cluster) -> None:
    # The API server publishes a new CRD's OpenAPI a few seconds after it is
    # Established; kubectl explain reads that.
    deadline = time.monotonic() + 30
    while True:
        done = subprocess.run(
            cluster.kubectl("explain", "gitrepository.spec.ref"), capture_output=True, text=True
        )
        if done.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert done.returncode == 0, done.stderr
    explained = done.stdout
    assert "The Git reference to resolve" in explained
    assert "KIND:     GitRepository" in explained or "KIND:" in explained
    for field in ("branch", "tag", "semver", "name", "commit"):
        assert f"   {field}\t" in explained or f"   {field} " in explained, field
    listed = subprocess.run(
        cluster.kubectl("get", "gitrepositories", "-A"), capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr


async def test_printer_columns_show_readiness_and_revision(
    cluster: Cluster, kube: KubeClient, namespace: str
) -> None:
    await kube.create(
        GITREPO,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "GitRepository",
            "metadata": {"name": "shown", "namespace": namespace},
            "spec": {"url": "https://example.com/x.git", "interval": "1m"},
        },
    )
    await kube.merge_patch(
        GITREPO,
        "shown",
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "Succeeded",
                        "message": "stored artifact for revision 'main@sha1:abc'",
                        "lastTransitionTime": "2026-11-21T10:00:00Z",
                    }
                ],
                "artifact": {
                    "path": "gitrepository/x/shown/abc.tar.gz",
                    "url": "http://source-controller/gitrepository/x/shown/abc.tar.gz",
                    "revision": "main@sha1:abc",
                    "digest": "sha256:0123",
                    "lastUpdateTime": "2026-11-21T10:00:00Z",
                },
            }
        },
        namespace=namespace,
        subresource="status",
    )
    listed = await asyncio.create_subprocess_exec(
        *cluster.kubectl("get", "gitrepositories", "-n", namespace),
        stdout=asyncio.subprocess.PIPE,
    )
    stdout, _ = await listed.communicate()
    table = stdout.decode().splitlines()
    assert table[0].split() == ["NAME", "URL", "AGE", "READY", "STATUS", "REVISION"]
    row = table[1]
    assert row.startswith("shown ")
    assert "https://example.com/x.git" in row
    assert " True " in row
    assert row.rstrip().endswith("main@sha1:abc")
