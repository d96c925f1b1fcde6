"""A source that breaks keeps serving its last artifact, and says why it cannot move on.

Each case gets a good artifact first, then breaks the source the way it
breaks in the field (credentials rotated, a branch or tag deleted, a corrupt
repository, a host gone, a layer missing from the registry) and checks the
failure's Ready reason and message, that status.artifact did not change, and
that the file behind it is still served and still matches its digest.
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest

from sluice_envtest.controlplane import free_port
from sluice_envtest.gitserver import GitHttpServer, WorkRepo, run_git
from sluice_envtest.harness import condition, make_secret
from sluice_envtest.registry import OciRegistry
from sluice_runtime.kube.resources import SECRET, ResourceType

from .conftest import (
    GITREPO,
    MANIFEST,
    OCIREPO,
    SourceController,
    corrupt_objects,
    download,
    gitrepo,
    ocirepo,
    seeded,
    served,
)

NAME = "fragile"


@dataclass
class Source:
    """A source with a good artifact, and what its breakers need to break it."""

    sc: SourceController
    rt: ResourceType
    url: str
    repository: str
    """The repository's name on its server."""
    git: GitHttpServer | None = None
    work: WorkRepo | None = None
    registry: OciRegistry | None = None
    digest: str = ""
    """The OCI manifest digest of the good artifact."""


@dataclass(frozen=True)
class Broken:
    reason: str
    message: str
    prefix: bool = False
    """`message` is how the condition's message starts (the rest is the tool's words)."""
    new_revision: str | None = None
    """The revision seen upstream but not fetched: ArtifactOutdated names it."""


async def git_source(sc: SourceController, server: GitHttpServer) -> Source:
    repository = f"{NAME}-{sc.namespace}"
    work = seeded(server, repository)
    spec: dict[str, object] = {"ref": {"branch": "main"}}
    if server.username is not None and server.password is not None:
        await make_secret(
            sc.client,
            sc.namespace,
            NAME,
            {"username": server.username, "password": server.password},
        )
        spec["secretRef"] = {"name": NAME}
    url = server.url(repository)
    await sc.client.create(GITREPO, gitrepo(NAME, url, **spec), namespace=sc.namespace)
    return Source(sc, GITREPO, url, repository, git=server, work=work)


async def oci_source(sc: SourceController, registry: OciRegistry) -> Source:
    repository = f"{sc.namespace}/{NAME}"
    digest = registry.push_artifact(repository, "v1", files={"app.yaml": MANIFEST})
    spec: dict[str, object] = {"insecure": True, "ref": {"tag": "v1"}}
    if registry.username is not None:
        config = json.dumps(registry.docker_config)
        await make_secret(
            sc.client, sc.namespace, NAME, {".dockerconfigjson": config},
            type_="kubernetes.io/dockerconfigjson",
        )  # fmt: skip
        spec["secretRef"] = {"name": NAME}
    url = registry.oci_url(repository)
    await sc.client.create(OCIREPO, ocirepo(NAME, url, **spec), namespace=sc.namespace)
    return Source(sc, OCIREPO, url, repository, registry=registry, digest=digest)


async def replace_secret_data(source: Source, key: str, value: str) -> None:
    encoded = base64.b64encode(value.encode()).decode()
    await source.sc.client.merge_patch(
        SECRET, NAME, {"data": {key: encoded}}, namespace=source.sc.namespace
    )


# -- Git ---------------------------------------------------------------------


async def rotate_git_password(source: Source) -> Broken:
    await replace_secret_data(source, "password", "rotated-away")
    return Broken(
        "AuthenticationFailed",
        f"authentication to {source.url} failed: the server refused the credentials",
    )


async def delete_git_branch(source: Source) -> Broken:
    assert source.work is not None
    run_git("update-ref", "-d", "refs/heads/main", cwd=source.work.bare)
    return Broken("GitOperationFailed", f"branch 'main' not found in {source.url}")


async def corrupt_git_repository(source: Source) -> Broken:
    # A new commit is listed, but its objects cannot be sent.
    assert source.work is not None
    new = source.work.commit("second", files={"deploy/extra.yaml": MANIFEST})
    source.work.push()
    corrupt_objects(source.work.bare)
    return Broken(
        "GitOperationFailed",
        f"failed to fetch {source.url}: ",
        prefix=True,
        new_revision=f"main@sha1:{new}",
    )


async def hide_git_repository(source: Source) -> Broken:
    assert source.git is not None and source.work is not None
    bare = source.git.root / f"{source.repository}.git"
    shutil.move(bare, bare.with_name(f"{source.repository}-hidden.git"))
    return Broken("GitOperationFailed", f"failed to fetch {source.url}: ", prefix=True)


async def move_git_to_a_dead_host(source: Source) -> Broken:
    url = f"http://127.0.0.1:{free_port()}/{source.repository}.git"
    await source.sc.client.merge_patch(
        GITREPO, NAME, {"spec": {"url": url, "timeout": "5s"}}, namespace=source.sc.namespace
    )
    return Broken("GitOperationFailed", f"failed to fetch {url}: ", prefix=True)


# -- OCI ---------------------------------------------------------------------


async def delete_oci_tag(source: Source) -> Broken:
    registry = source.registry
    assert registry is not None
    registry.delete(source.repository, "manifests", source.digest)
    return Broken(
        "OCIArtifactPullFailed", f"artifact '{registry.host}/{source.repository}:v1' not found"
    )


async def delete_new_oci_layer(source: Source) -> Broken:
    # The tag moves to a new manifest whose layer the registry no longer has.
    registry = source.registry
    assert registry is not None
    new = registry.push_artifact(source.repository, "v1", files={"app.yaml": MANIFEST + "#2\n"})
    layer = registry.manifest(source.repository, new)["layers"][0]["digest"]
    registry.delete(source.repository, "blobs", layer)
    return Broken(
        "OCIArtifactPullFailed",
        f"blob {layer} from {registry.host}: not found",
        new_revision=f"v1@{new}",
    )


async def rotate_oci_password(source: Source) -> Broken:
    registry = source.registry
    assert registry is not None
    config = registry.docker_config
    entry = config["auths"][registry.host]
    entry.update(password="rotated-away", auth=base64.b64encode(b"sluice:rotated-away").decode())
    await replace_secret_data(source, ".dockerconfigjson", json.dumps(config))
    return Broken(
        "AuthenticationFailed",
        f"authentication to {registry.host} failed: the credentials were refused",
    )


async def move_oci_to_an_unresolvable_host(source: Source) -> Broken:
    # The name never resolves (RFC 6761): the message says so, without the HTTP
    # library's reprs of its connection pools.
    host = "registry.sluice-test.invalid"
    await source.sc.client.merge_patch(
        OCIREPO,
        NAME,
        {"spec": {"url": f"oci://{host}/{source.repository}", "timeout": "5s"}},
        namespace=source.sc.namespace,
    )
    return Broken(
        "OCIArtifactPullFailed", f"cannot reach registry {host}: host name not found (DNS)"
    )


Breaker = Callable[[Source], Awaitable[Broken]]


@pytest.mark.parametrize(
    ("server", "break_source"),
    [
        pytest.param("git_http_auth", rotate_git_password, id="git-wrong-credentials"),
        pytest.param("git_http", delete_git_branch, id="git-missing-branch"),
        pytest.param("git_http", corrupt_git_repository, id="git-corrupt-repository"),
        pytest.param("git_http", hide_git_repository, id="git-repository-gone"),
        pytest.param("git_http", move_git_to_a_dead_host, id="git-unreachable-host"),
        pytest.param("oci_registry", delete_oci_tag, id="oci-missing-tag"),
        pytest.param("oci_registry", delete_new_oci_layer, id="oci-layer-404"),
        pytest.param("oci_registry_auth", rotate_oci_password, id="oci-wrong-credentials"),
        pytest.param("oci_registry", move_oci_to_an_unresolvable_host, id="oci-unresolvable-host"),
    ],
)
async def test_a_broken_source_keeps_serving_its_last_artifact(
    source_controller: SourceController,
    request: pytest.FixtureRequest,
    server: str,
    break_source: Breaker,
) -> None:
    sc = source_controller
    remote = request.getfixturevalue(server)
    if isinstance(remote, GitHttpServer):
        source = await git_source(sc, remote)
    else:
        source = await oci_source(sc, remote)
    good = await sc.wait_ready(source.rt, NAME)
    artifact = good["status"]["artifact"]
    good_bytes = await served(good)

    broken = await break_source(source)
    failed = await sc.poke(source.rt, NAME, "broken")

    ready = condition(failed, "Ready")
    fetch = condition(failed, "FetchFailed")
    assert ready is not None and fetch is not None
    assert (ready["status"], ready["reason"]) == ("False", broken.reason)
    assert (fetch["status"], fetch["reason"]) == ("True", broken.reason)
    assert fetch["message"] == ready["message"]
    if broken.prefix:
        assert ready["message"].startswith(broken.message), ready["message"]
    else:
        assert ready["message"] == broken.message
    outdated = condition(failed, "ArtifactOutdated")
    if broken.new_revision is None:
        assert outdated is None
    else:
        assert outdated is not None
        assert (outdated["status"], outdated["reason"], outdated["message"]) == (
            "True",
            "NewRevision",
            f"new upstream revision '{broken.new_revision}'",
        )
    # The last good artifact stays in status and on the file server, intact.
    assert failed["status"]["artifact"] == artifact
    assert await served(failed) == good_bytes
    assert await download(failed["status"]["url"]) == good_bytes
    stored = condition(failed, "ArtifactInStorage")
    assert stored is not None and stored["status"] == "True"
    assert (sc.storage / artifact["path"]).is_file()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("interval", "99999999999999999999h", id="interval-overflows"),
        pytest.param("timeout", "9" * 400 + "s", id="timeout-overflows"),
    ],
)
async def test_a_duration_past_go_s_range_is_stalled_as_invalid(
    source_controller: SourceController, git_http: GitHttpServer, field: str, value: str
) -> None:
    """Found by the duration property: the CRD pattern admits any number of digits,
    and such a duration raised OverflowError in every reconcile (a traceback, no
    condition). Go's ParseDuration refuses it, so Flux never reads such an object."""
    sc = source_controller
    seeded(git_http, f"huge-{sc.namespace}")
    obj = gitrepo("huge", git_http.url(f"huge-{sc.namespace}"), ref={"branch": "main"})
    obj["spec"][field] = value
    await sc.client.create(GITREPO, obj, namespace=sc.namespace)
    stalled = await sc.wait_reason(GITREPO, "huge", "InvalidSpec")
    ready = condition(stalled, "Ready") or {}
    assert f"spec.{field}" in ready["message"]
    assert "out of range" in ready["message"]
    assert (condition(stalled, "Stalled") or {}).get("status") == "True"
