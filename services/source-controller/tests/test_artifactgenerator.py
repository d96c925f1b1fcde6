"""ArtifactGenerator against the real API server: inventory, revision rules, refusals."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from sluice_api import ArtifactGenerator, ExternalArtifact
from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.harness import condition
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import ResourceType

from .conftest import GITREPO, SourceController, gitrepo, served_files, start_source_controller

GENERATOR = ResourceType.of_model(ArtifactGenerator)
EXTERNAL = ResourceType.of_model(ExternalArtifact)


def generator(name: str, artifacts: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "source.extensions.fluxcd.io/v1beta1",
        "kind": "ArtifactGenerator",
        "metadata": {"name": name},
        "spec": {
            "sources": [{"alias": "repo", "kind": "GitRepository", "name": "mono"}],
            "artifacts": artifacts,
            **spec,
        },
    }


async def mono(sc: SourceController, git_http: GitHttpServer) -> dict[str, Any]:
    work = git_http.create_repo(f"{sc.namespace}-mono")
    work.commit(
        "first",
        files={
            "deploy/frontend/app.yaml": "frontend",
            "deploy/backend/app.yaml": "backend",
            "deploy/backend/README.md": "docs",
        },
    )
    work.push()
    await sc.client.create(
        GITREPO,
        gitrepo("mono", git_http.url(f"{sc.namespace}-mono"), ref={"branch": "main"}),
        namespace=sc.namespace,
    )
    return await sc.wait_ready(GITREPO, "mono")


async def wait_gone(sc: SourceController, name: str) -> None:
    for _ in range(100):
        try:
            await sc.get(EXTERNAL, name)
        except NotFound:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"ExternalArtifact {name} not deleted")


async def wait_published(sc: SourceController, name: str, digest: str) -> dict[str, Any]:
    for _ in range(300):
        with contextlib.suppress(NotFound):
            obj = await sc.get(EXTERNAL, name)
            if (obj.get("status") or {}).get("artifact", {}).get("digest") == digest:
                return obj
        await asyncio.sleep(0.1)
    raise AssertionError(f"ExternalArtifact {name} not published again")


async def test_artifacts_are_generated_pruned_and_deleted_with_the_generator(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    repo = await mono(sc, git_http)
    artifacts = [
        {"name": "frontend", "copy": [{"from": "@repo/deploy/frontend/**", "to": "@artifact/"}]},
        {
            "name": "backend",
            "revision": "@repo",
            "copy": [{"from": "@repo/deploy/backend/**", "to": "@artifact/", "exclude": ["*.md"]}],
        },
    ]
    # Left by a reconcile whose status write was lost: it names the generator
    # but is in no inventory, and is deleted like any artifact that left the spec.
    await sc.client.create(
        EXTERNAL,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "ExternalArtifact",
            "metadata": {"name": "orphan"},
            "spec": {
                "sourceRef": {
                    "apiVersion": "source.extensions.fluxcd.io/v1beta1",
                    "kind": "ArtifactGenerator",
                    "name": "split",
                }
            },
        },
        namespace=sc.namespace,
    )
    await sc.client.create(GENERATOR, generator("split", artifacts), namespace=sc.namespace)
    obj = await sc.wait_ready(GENERATOR, "split")
    await wait_gone(sc, "orphan")
    assert [r["name"] for r in obj["status"]["inventory"]] == ["frontend", "backend"]

    frontend = (await sc.get(EXTERNAL, "frontend"))["status"]["artifact"]
    assert frontend["revision"] == f"latest@{frontend['digest']}"
    assert await served_files({"status": {"artifact": frontend}}) == {"app.yaml": b"frontend"}
    backend = await sc.get(EXTERNAL, "backend")
    # revision: "@repo" takes the Git source's revision.
    assert backend["status"]["artifact"]["revision"] == repo["status"]["artifact"]["revision"]
    assert (condition(backend, "Ready") or {}).get("status") == "True"
    assert await served_files(backend) == {"app.yaml": b"backend"}

    # Nothing changed: a reconcile unpacks and writes nothing (same file, same object).
    stored = sc.storage / frontend["path"]
    inode = stored.stat().st_ino
    version = (await sc.get(EXTERNAL, "frontend"))["metadata"]["resourceVersion"]
    await sc.poke(GENERATOR, "split", "again")
    assert stored.stat().st_ino == inode
    assert (await sc.get(EXTERNAL, "frontend"))["metadata"]["resourceVersion"] == version

    # An ExternalArtifact deleted by someone else is generated again.
    await sc.client.delete(EXTERNAL, "frontend", namespace=sc.namespace)
    again = await wait_published(sc, "frontend", frontend["digest"])
    assert again["spec"]["sourceRef"]["name"] == "split"

    # An artifact that leaves the spec is deleted, with its files.
    await sc.client.merge_patch(
        GENERATOR, "split", {"spec": {"artifacts": artifacts[:1]}}, namespace=sc.namespace
    )
    await wait_gone(sc, "backend")
    assert not (sc.storage / "externalartifact" / sc.namespace / "backend").exists()
    obj = await sc.wait(
        GENERATOR,
        "split",
        lambda o: [r["name"] for r in o["status"].get("inventory") or []] == ["frontend"],
        what="inventory without backend",
    )

    # Deleting the generator deletes what it generated.
    await sc.client.delete(GENERATOR, "split", namespace=sc.namespace)
    await wait_gone(sc, "frontend")


async def test_invalid_generators_stall_naming_the_problem(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    await mono(sc, git_http)
    copy = [{"from": "@repo/deploy/**", "to": "@artifact/"}]
    cases = {
        "unknown-alias": (
            [{"name": "a", "copy": [{"from": "@nope/x", "to": "@artifact/"}]}],
            {},
            "copy from '@nope/x' names no source alias",
        ),
        "duplicate": (
            [{"name": "a", "copy": copy}, {"name": "a", "copy": copy}],
            {},
            "duplicate artifact name 'a'",
        ),
        "helmchart": (
            [{"name": "a", "copy": copy}],
            {"sources": [{"alias": "repo", "kind": "HelmChart", "name": "chart"}]},
            "kind HelmChart is not supported",
        ),
    }
    for name, (artifacts, spec, _) in cases.items():
        await sc.client.create(
            GENERATOR, generator(name, artifacts, **spec), namespace=sc.namespace
        )
    for name, (_, _, message) in cases.items():
        obj = await sc.wait(
            GENERATOR,
            name,
            lambda o: (condition(o, "Stalled") or {}).get("status") == "True",
            what="Stalled",
        )
        ready = condition(obj, "Ready") or {}
        assert ready["reason"] == "ValidationFailed"
        assert message in ready["message"]

    # A copy that matches nothing fails the build, naming the pattern.
    await sc.client.create(
        GENERATOR,
        generator(
            "nomatch", [{"name": "b", "copy": [{"from": "@repo/none/**", "to": "@artifact/"}]}]
        ),
        namespace=sc.namespace,
    )
    obj = await sc.wait_failed(GENERATOR, "nomatch", "BuildFailed")
    assert "no files match pattern 'none/**'" in (condition(obj, "Ready") or {})["message"]


async def test_no_cross_namespace_refs_refuses_another_namespaces_source(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    async with start_source_controller(
        cluster, kube, namespace, tmp_path, "--no-cross-namespace-refs"
    ) as sc:
        await sc.client.create(
            GENERATOR,
            generator(
                "cross",
                [{"name": "a", "copy": [{"from": "@repo/**", "to": "@artifact/"}]}],
                sources=[
                    {"alias": "repo", "kind": "GitRepository", "name": "x", "namespace": "other"}
                ],
            ),
            namespace=sc.namespace,
        )
        obj = await sc.wait(
            GENERATOR,
            "cross",
            lambda o: (condition(o, "Stalled") or {}).get("status") == "True",
            what="Stalled",
        )
        ready = condition(obj, "Ready") or {}
        assert ready["reason"] == "AccessDenied"
        assert "GitRepository 'other/x'" in ready["message"]
        assert "--no-cross-namespace-refs" in ready["message"]
