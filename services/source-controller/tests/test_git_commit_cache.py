"""The commit cache: GitRepositories of one commit share one clone, never across access."""

from __future__ import annotations

import asyncio
from typing import Any

from structlog.testing import capture_logs

from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.harness import condition, make_secret

from .conftest import GITREPO, MANIFEST, SourceController, gitrepo, seeded, served_files


async def create(sc: SourceController, *objs: dict[str, Any]) -> None:
    for obj in objs:
        await sc.client.create(GITREPO, obj, namespace=sc.namespace)


def clones(entries: list[dict[str, Any]]) -> tuple[int, int]:
    """(checkouts, artifacts from the commit cache) the controller logged."""
    events = [e["event"] for e in entries]
    return events.count("fetched"), events.count("artifact from the commit cache")


async def test_gitrepositories_of_the_same_commit_share_one_clone(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    name = f"shared-{sc.namespace}"
    work = seeded(git_http, name)
    url = git_http.url(name)
    with capture_logs() as entries:
        # Created together: the later ones wait for the first one's clone.
        await create(sc, *(gitrepo(f"app-{i}", url, ref={"branch": "main"}) for i in range(4)))
        ready = await asyncio.gather(*(sc.wait_ready(GITREPO, f"app-{i}") for i in range(4)))
    assert clones(entries) == (1, 3), "one clone for four GitRepositories"
    # Each listed the refs with its own credentials (1 to 4: listings of one
    # URL and credentials in flight together are one, gitclient.ls_remote),
    # and one worker cloned (its own listing + pack).
    assert 2 <= git_http.stats(name).upload_pack_advertisements <= 5
    artifacts = [obj["status"]["artifact"] for obj in ready]
    assert {a["revision"] for a in artifacts} == {f"main@sha1:{work.head}"}
    assert len({a["digest"] for a in artifacts}) == 1
    assert [a["path"] for a in artifacts] == [
        f"gitrepository/{sc.namespace}/app-{i}/{work.head}.tar.gz" for i in range(4)
    ]
    for obj in ready:
        assert (await served_files(obj))["deploy/app.yaml"].decode() == MANIFEST
    new = await sc.wait_events("app-3", bool, reason="NewArtifact")
    assert [e["message"] for e in new] == ["stored artifact for commit 'first'"]
    # A new commit is a new entry: fetched once more, not served from the old one.
    work.commit("second", files={"deploy/extra.yaml": MANIFEST})
    work.push()
    with capture_logs() as entries:
        moved = await sc.poke(GITREPO, "app-0", "1")
    assert moved["status"]["artifact"]["revision"] == f"main@sha1:{work.head}"
    assert "deploy/extra.yaml" in await served_files(moved)
    assert clones(entries) == (1, 0)


async def test_wrong_credentials_fail_even_when_the_commit_is_cached(
    source_controller: SourceController, git_http_auth: GitHttpServer
) -> None:
    sc = source_controller
    name = f"secret-{sc.namespace}"
    seeded(git_http_auth, name)
    assert git_http_auth.username and git_http_auth.password
    good = {"username": git_http_auth.username, "password": git_http_auth.password}
    await make_secret(sc.client, sc.namespace, "good", good)
    await make_secret(sc.client, sc.namespace, "bad", {**good, "password": "nope"})
    url = git_http_auth.url(name)
    await create(sc, gitrepo("owner", url, ref={"branch": "main"}, secretRef={"name": "good"}))
    await sc.wait_ready(GITREPO, "owner")
    before = git_http_auth.stats(name)
    await create(
        sc,
        gitrepo("intruder", url, ref={"branch": "main"}, secretRef={"name": "bad"}),
        gitrepo("anonymous", url, ref={"branch": "main"}),
    )
    for intruder in ("intruder", "anonymous"):
        failed = await sc.wait_failed(GITREPO, intruder, "AuthenticationFailed")
        fetch = condition(failed, "FetchFailed")
        assert fetch is not None and fetch["reason"] == "AuthenticationFailed"
        assert "artifact" not in failed["status"]
    assert not any(
        (sc.storage / "gitrepository" / sc.namespace / n).exists()
        for n in ("intruder", "anonymous")
    )
    # The right credentials in another object still share the clone.
    await make_secret(sc.client, sc.namespace, "also-good", good)
    with capture_logs() as entries:
        await create(
            sc, gitrepo("peer", url, ref={"branch": "main"}, secretRef={"name": "also-good"})
        )
        await sc.wait_ready(GITREPO, "peer")
    assert clones(entries) == (0, 1)
    assert (git_http_auth.stats(name) - before).upload_pack_posts == 0, "nothing was fetched"


async def test_different_content_config_gets_its_own_artifact(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    name = f"shapes-{sc.namespace}"
    seeded(git_http, name)
    other = f"extra-{sc.namespace}"
    extra = git_http.create_repo(other)
    extra.commit("extra", files={"extra.yaml": MANIFEST})
    extra.push()
    url = git_http.url(name)
    main = {"branch": "main"}
    await create(
        sc,
        gitrepo("extra", git_http.url(other), ref=main),
        gitrepo("plain", url, ref=main),
        gitrepo("ignoring", url, ref=main, ignore="README.md\n"),
        gitrepo("sparse", url, ref=main, sparseCheckout=["deploy"]),
        gitrepo("including", url, ref=main, include=[{"repository": {"name": "extra"}}]),
    )
    files = {}
    for obj in ("plain", "ignoring", "sparse", "including"):
        files[obj] = sorted(await served_files(await sc.wait_ready(GITREPO, obj)))
    assert files == {
        "plain": ["README.md", "deploy/app.yaml"],
        "ignoring": [".github/workflows/ci.yml", "deploy/app.yaml", "deploy/logo.png"],
        "sparse": ["deploy/app.yaml"],
        "including": ["README.md", "deploy/app.yaml", "extra/extra.yaml"],
    }
