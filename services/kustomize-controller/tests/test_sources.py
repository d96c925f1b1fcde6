"""Where a Kustomization's artifact comes from: a source not ready yet, an OCI
artifact, an S3 bucket, a source in another namespace."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path

import pytest

from sluice_envtest.harness import condition, make_secret
from sluice_envtest.registry import OciRegistry
from sluice_envtest.s3server import S3Server
from sluice_runtime.kube.errors import KubeError
from sluice_runtime.kube.resources import ResourceType

from .conftest import (
    CONFIG_MAP,
    GITREPO,
    KUSTOMIZATION,
    NAMESPACE,
    OCIREPO,
    TEST_LABEL,
    Delivery,
    Flags,
    config_map,
)

BUCKET = ResourceType("source.toolkit.fluxcd.io", "v1", "buckets", "Bucket")


async def test_a_source_without_an_artifact_is_waited_for_quietly(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    repo = d.repo("later")
    repo.commit("c", files={"cm.yaml": config_map("later", ns)})
    repo.push()
    await d.git_repository("later", suspend=True)  # no artifact until resumed
    await d.kustomization("later", source="later")
    message = f"Source 'GitRepository/{ns}/later' has no artifact yet"
    obj = await d.observe.wait(
        KUSTOMIZATION,
        "later",
        lambda o: (condition(o, "Ready") or {}).get("message") == message,
        what="waiting for the artifact",
    )
    ready = condition(obj, "Ready")
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", "ArtifactFailed")
    reconciling = condition(obj, "Reconciling")
    assert reconciling is not None and reconciling["status"] == "True"
    assert condition(obj, "Stalled") is None, "a missing artifact is retried, not stalled"

    await d.kube.merge_patch(GITREPO, "later", {"spec": {"suspend": False}}, namespace=ns)
    done = await d.observe.wait_ready(KUSTOMIZATION, "later")
    assert done["status"]["lastAppliedRevision"] == f"main@sha1:{repo.head}"
    await d.kube.get(CONFIG_MAP, "later", ns)

    # Events are written in order: once the success is announced, a warning about
    # the wait would be there too.
    await d.wait_event("later", reason="ReconciliationSucceeded")
    assert await d.events("later", type="Warning") == []


async def test_an_oci_artifact_is_delivered(delivery: Delivery, oci_registry: OciRegistry) -> None:
    d = delivery
    ns = d.namespace
    repository = f"{ns}/manifests"
    digest = oci_registry.push_artifact(
        repository,
        "v1",
        files={"cm.yaml": config_map("from-oci", ns, v="1")},
        annotations={"org.opencontainers.image.revision": "main@sha1:0123abc"},
    )
    await d.oci_repository(
        "manifests", url=oci_registry.oci_url(repository), insecure=True, ref={"tag": "v1"}
    )
    await d.kustomization(
        "from-oci", source="manifests", sourceRef={"kind": "OCIRepository", "name": "manifests"}
    )
    obj = await d.observe.wait_ready(KUSTOMIZATION, "from-oci")
    status = obj["status"]
    assert status["lastAppliedRevision"] == f"v1@{digest}"
    assert status["lastAppliedOriginRevision"] == "main@sha1:0123abc"
    assert [e["id"] for e in status["inventory"]["entries"]] == [f"{ns}_from-oci__ConfigMap"]
    assert (await d.kube.get(CONFIG_MAP, "from-oci", ns))["data"] == {"v": "1"}


async def test_a_bucket_is_delivered_and_a_changed_object_is_applied(
    delivery: Delivery, s3_server: S3Server
) -> None:
    d = delivery
    ns = d.namespace
    name = f"manifests-{ns}"[:63]
    s3_server.create_bucket(name, {"apps/cm.yaml": config_map("from-bucket", ns, v="1")})
    await make_secret(d.kube, ns, "s3", s3_server.secret_data())
    await d.kube.create(
        BUCKET,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "Bucket",
            "metadata": {"name": "manifests", "labels": {TEST_LABEL: ns}},
            "spec": {
                "bucketName": name,
                "endpoint": s3_server.endpoint,
                "insecure": True,
                "interval": "1h",
                "secretRef": {"name": "s3"},
            },
        },
        namespace=ns,
    )
    await d.kustomization(
        "from-bucket",
        source="manifests",
        path="./apps",
        sourceRef={"kind": "Bucket", "name": "manifests"},
    )
    obj = await d.observe.wait_ready(KUSTOMIZATION, "from-bucket")
    bucket = await d.kube.get(BUCKET, "manifests", ns)
    assert obj["status"]["lastAppliedRevision"] == bucket["status"]["artifact"]["revision"]
    assert (await d.kube.get(CONFIG_MAP, "from-bucket", ns))["data"] == {"v": "1"}

    s3_server.put(name, "apps/cm.yaml", config_map("from-bucket", ns, v="2"))
    await d.observe.poke(BUCKET, "manifests", "changed")
    await d.observe.wait(
        CONFIG_MAP, "from-bucket", lambda o: o["data"] == {"v": "2"}, what="new object applied"
    )


async def test_an_artifact_pushed_by_sluice_is_delivered(
    delivery: Delivery, oci_registry: OciRegistry, tmp_path: Path
) -> None:
    """CI's half and the cluster's: `sluice push artifact` from a directory, as a
    pipeline runs it, then an OCIRepository pulls it and a Kustomization applies it."""
    d = delivery
    ns = d.namespace
    src = tmp_path / "app"
    (src / "base").mkdir(parents=True)
    (src / "base" / "cm.yaml").write_text(config_map("pushed", ns, v="1"))
    (src / "kustomization.yaml").write_text("resources: [base/cm.yaml]\n")
    (src / "notes.md").write_text("left out by .sourceignore\n")
    (src / ".sourceignore").write_text("*.md\n")
    repository = f"{ns}/app"
    push = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sluice_cli", "push", "artifact",
        f"{oci_registry.oci_url(repository)}:app-v1", "--path", str(src),
        "--source", "https://git.example/mono.git", "--revision", "main@sha1:4b825dc6",
        "--insecure-registry", "--output", "json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "DOCKER_CONFIG": str(tmp_path / "docker")},
    )  # fmt: skip
    out, err = await push.communicate()
    assert push.returncode == 0, err.decode()
    digest = json.loads(out)["digest"]

    await d.oci_repository(
        "app", url=oci_registry.oci_url(repository), insecure=True, ref={"tag": "app-v1"}
    )
    await d.kustomization(
        "app", source="app", sourceRef={"kind": "OCIRepository", "name": "app"}, path="./"
    )
    obj = await d.observe.wait_ready(KUSTOMIZATION, "app")
    status = obj["status"]
    assert status["lastAppliedRevision"] == f"app-v1@{digest}"
    assert status["lastAppliedOriginRevision"] == "main@sha1:4b825dc6"
    assert [e["id"] for e in status["inventory"]["entries"]] == [f"{ns}_pushed__ConfigMap"]
    assert (await d.kube.get(CONFIG_MAP, "pushed", ns))["data"] == {"v": "1"}
    source = await d.kube.get(OCIREPO, "app", ns)
    metadata = source["status"]["artifact"]["metadata"]
    assert metadata["org.opencontainers.image.source"] == "https://git.example/mono.git"


@pytest.mark.parametrize("delivery", [Flags(cluster_wide=True)], indirect=True)
async def test_a_source_in_another_namespace_is_used_by_default(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    other = f"src-{ns}"[:63]
    await d.kube.create(
        NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}}
    )
    try:
        repo = d.repo("shared")
        repo.commit("c", files={"cm.yaml": config_map("shared", ns)})
        repo.push()
        await d.git_repository("shared", namespace=other)
        await d.kustomization(
            "shared",
            source="shared",
            sourceRef={"kind": "GitRepository", "name": "shared", "namespace": other},
        )
        obj = await d.observe.wait_ready(KUSTOMIZATION, "shared")
        assert obj["status"]["lastAppliedRevision"] == f"main@sha1:{repo.head}"
        await d.kube.get(CONFIG_MAP, "shared", ns)
    finally:
        with contextlib.suppress(KubeError):
            await d.kube.delete(NAMESPACE, other)


@pytest.mark.parametrize(
    "delivery", [Flags(kustomize=("--no-cross-namespace-refs",))], indirect=True
)
async def test_no_cross_namespace_refs_stalls_with_access_denied(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    await d.kustomization(
        "across",
        source="shared",
        sourceRef={"kind": "GitRepository", "name": "shared", "namespace": "elsewhere"},
    )
    obj = await d.observe.wait(
        KUSTOMIZATION,
        "across",
        lambda o: (condition(o, "Stalled") or {}).get("status") == "True",
        what="Stalled",
    )
    message = (
        "cannot access GitRepository/elsewhere/shared: cross-namespace references are not allowed"
    )
    stalled, ready = condition(obj, "Stalled"), condition(obj, "Ready")
    assert stalled is not None and (stalled["reason"], stalled["message"]) == (
        "AccessDenied",
        message,
    )
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", "AccessDenied")

    # Naming its own namespace is no cross-namespace reference.
    repo = d.repo("own")
    repo.commit("c", files={"cm.yaml": config_map("own", ns)})
    repo.push()
    await d.git_repository("own")
    await d.kustomization(
        "own", source="own", sourceRef={"kind": "GitRepository", "name": "own", "namespace": ns}
    )
    await d.observe.wait_ready(KUSTOMIZATION, "own")
