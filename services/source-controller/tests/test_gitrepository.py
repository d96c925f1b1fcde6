"""GitRepository against real Git servers (smart HTTP, HTTPS, SSH) and the real API server."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from sluice_envtest.gitserver import GitHttpServer, WorkRepo, generate_history
from sluice_envtest.harness import condition, make_secret
from sluice_envtest.pytest_plugin import Cluster
from sluice_envtest.sshserver import SshGitServer, generate_key, known_hosts_line
from sluice_runtime import holding
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import ResourceType

from .conftest import (
    GITREPO,
    MANIFEST,
    SourceController,
    corrupt_objects,
    download,
    gitrepo,
    seeded,
    served,
    served_files,
    start_source_controller,
)


async def create(sc: SourceController, obj: dict[str, Any]) -> None:
    await sc.client.create(GITREPO, obj, namespace=sc.namespace)


async def test_branch_is_archived_served_and_announced(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    work = seeded(git_http, f"branchy-{sc.namespace}")
    await create(
        sc, gitrepo("app", git_http.url(f"branchy-{sc.namespace}"), ref={"branch": "main"})
    )
    obj = await sc.wait_ready(GITREPO, "app")

    head = work.head
    revision = f"main@sha1:{head}"
    artifact = obj["status"]["artifact"]
    assert artifact["revision"] == revision
    assert artifact["path"] == f"gitrepository/{sc.namespace}/app/{head}.tar.gz"
    assert artifact["url"] == f"http://{sc.storage_addr}/{artifact['path']}"
    assert (
        obj["status"]["url"]
        == f"http://{sc.storage_addr}/gitrepository/{sc.namespace}/app/latest.tar.gz"
    )
    ready = condition(obj, "Ready")
    assert ready is not None
    assert ready["message"] == f"stored artifact for revision '{revision}'"
    stored = condition(obj, "ArtifactInStorage")
    assert stored is not None and stored["status"] == "True"
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    assert obj["status"]["contentConfigChecksum"].startswith("sha256:")

    files = await served_files(obj)
    # Flux's default exclusions: images and CI configuration never ship.
    assert sorted(files) == ["README.md", "deploy/app.yaml"]
    assert files["deploy/app.yaml"].decode() == MANIFEST
    assert (await download(obj["status"]["url"])) == await download(artifact["url"])

    new = await sc.wait_events("app", bool, reason="NewArtifact")
    assert [(e["message"], e["count"]) for e in new] == [("stored artifact for commit 'first'", 1)]


async def test_a_new_commit_becomes_a_new_artifact_and_the_old_one_is_collected(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    work = seeded(git_http, f"moving-{sc.namespace}")
    await create(
        sc, gitrepo("moving", git_http.url(f"moving-{sc.namespace}"), ref={"branch": "main"})
    )
    first = await sc.wait_ready(GITREPO, "moving")
    old_path = sc.storage / first["status"]["artifact"]["path"]
    assert old_path.exists()

    work.commit("second", files={"deploy/extra.yaml": MANIFEST.replace("app", "extra")})
    work.push()
    second = await sc.poke(GITREPO, "moving", "1")
    assert second["status"]["artifact"]["revision"] == f"main@sha1:{work.head}"
    assert "deploy/extra.yaml" in await served_files(second)
    # Retention is one record with no TTL in these tests: the old file is gone.
    assert not old_path.exists()


async def test_a_new_artifact_someone_asked_for_holds_bulk_work_for_its_consumers(
    source_controller: SourceController, git_http: GitHttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its consumers apply it as requested work next (sluice_runtime.holding): not a
    first fetch nobody asked for, nor a request answered without a new revision."""
    sc = source_controller
    # A clock that stands still: a hold in force stays, whatever the machine's speed.
    hold = holding.BulkHold(clock=lambda: 1000.0)
    monkeypatch.setattr(holding, "HOLD", hold)
    try:
        work = seeded(git_http, f"followed-{sc.namespace}")
        url = git_http.url(f"followed-{sc.namespace}")
        await create(sc, gitrepo("followed", url, ref={"branch": "main"}))
        await sc.wait_ready(GITREPO, "followed")
        assert not hold.holding, "a first fetch nobody asked for"
        await sc.poke(GITREPO, "followed", "no-op")
        assert not hold.holding, "asked, but no new revision"
        work.commit("second", files={"deploy/extra.yaml": MANIFEST.replace("app", "extra")})
        work.push()
        await sc.poke(GITREPO, "followed", "new")
        assert hold.holding
    finally:
        hold.limit = 0  # let go of any bulk work it holds
        hold.answered()


async def test_a_crashed_write_s_temporary_file_is_collected_with_no_new_revision(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    """A write killed before its rename leaves `.<name>.<hex>.tmp` (the chaos suite's
    `storage.artifact.mid-write` kill); a source whose revision never moves again
    must still lose it, as Flux collects in every reconcile's storage step."""
    sc = source_controller
    seeded(git_http, f"crashed-{sc.namespace}")
    await create(
        sc, gitrepo("crashed", git_http.url(f"crashed-{sc.namespace}"), ref={"branch": "main"})
    )
    first = await sc.wait_ready(GITREPO, "crashed")
    stored = sc.storage / first["status"]["artifact"]["path"]
    leftover = stored.parent / f".{stored.name}.0123456789abcdef.tmp"
    leftover.write_bytes(stored.read_bytes()[:100])  # older than the tests' 0 s TTL

    again = await sc.poke(GITREPO, "crashed", "after-the-crash")
    assert again["status"]["artifact"] == first["status"]["artifact"]
    assert not leftover.exists()
    assert stored.exists()


@pytest.mark.parametrize(
    ("ref", "expect"),
    [
        pytest.param({"tag": "v1.0.0"}, "v1.0.0@sha1:{v1}", id="annotated-tag"),
        pytest.param({"tag": "light"}, "light@sha1:{light}", id="lightweight-tag"),
        pytest.param({"semver": ">=1.0.0 <2.0.0"}, "v1.1.0@sha1:{v11}", id="semver"),
        pytest.param({"name": "refs/pull/7/head"}, "refs/pull/7/head@sha1:{pr}", id="name"),
        pytest.param({"commit": "{v1}"}, "sha1:{v1}", id="pinned-commit"),
        pytest.param({"branch": "main", "commit": "{v1}"}, "main@sha1:{v1}", id="commit-on-branch"),
        pytest.param(None, "master@sha1:{master}", id="default-master"),
    ],
)
async def test_each_ref_kind_checks_out_the_right_commit(
    source_controller: SourceController,
    git_http: GitHttpServer,
    ref: dict[str, str] | None,
    expect: str,
) -> None:
    sc = source_controller
    name = f"refs-{sc.namespace}"
    work = git_http.create_repo(name)
    shas: dict[str, str] = {}
    shas["v1"] = work.commit("v1", files={"version.txt": "1.0.0\n"})
    work.tag("v1.0.0", message="release 1.0.0")
    shas["light"] = work.commit("light", files={"version.txt": "light\n"})
    work.tag("light")
    shas["v11"] = work.commit("v1.1", files={"version.txt": "1.1.0\n"})
    work.tag("v1.1.0", message="release 1.1.0")
    shas["v2"] = work.commit("v2", files={"version.txt": "2.0.0\n"})
    work.tag("v2.0.0", message="release 2.0.0")
    shas["pr"] = work.commit("pr", files={"version.txt": "pr\n"})
    work.git("update-ref", "refs/pull/7/head", "HEAD")
    work.checkout("HEAD~1")
    work.checkout("master", create=True)
    shas["master"] = work.commit("on master", files={"version.txt": "master\n"})
    work.push(
        "+refs/heads/*:refs/heads/*",
        "+refs/tags/*:refs/tags/*",
        "+refs/pull/7/head:refs/pull/7/head",
    )

    spec_ref = None if ref is None else {k: v.format(**shas) for k, v in ref.items()}
    await create(sc, gitrepo("r", git_http.url(name), **({"ref": spec_ref} if spec_ref else {})))
    obj = await sc.wait_ready(GITREPO, "r")
    revision = expect.format(**shas)
    assert obj["status"]["artifact"]["revision"] == revision
    commit = revision.rsplit("sha1:", 1)[1]
    expected_version = {
        shas["v1"]: "1.0.0\n",
        shas["light"]: "light\n",
        shas["v11"]: "1.1.0\n",
        shas["pr"]: "pr\n",
        shas["master"]: "master\n",
    }[commit]
    files = await served_files(obj)
    assert files["version.txt"].decode() == expected_version


async def test_the_no_op_fetch_lists_refs_and_downloads_nothing(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    seeded(git_http, f"quiet-{sc.namespace}")
    await create(
        sc, gitrepo("quiet", git_http.url(f"quiet-{sc.namespace}"), ref={"branch": "main"})
    )
    first = await sc.wait_ready(GITREPO, "quiet")
    before = git_http.stats(f"quiet-{sc.namespace}")
    assert before.upload_pack_bytes > 0, "the first reconcile clones"

    again = await sc.poke(GITREPO, "quiet", "no-op")
    spent = git_http.stats(f"quiet-{sc.namespace}") - before
    assert spent.upload_pack_advertisements == 1, "one ref listing"
    assert spent.upload_pack_posts == 0
    assert spent.upload_pack_bytes == 0, "no objects downloaded"
    assert again["status"]["artifact"] == first["status"]["artifact"]
    ready = condition(again, "Ready")
    assert ready is not None and ready["status"] == "True"


async def test_changing_ignore_alone_rebuilds_the_same_commit(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    seeded(git_http, f"ignored-{sc.namespace}")
    await create(
        sc, gitrepo("ignored", git_http.url(f"ignored-{sc.namespace}"), ref={"branch": "main"})
    )
    first = await sc.wait_ready(GITREPO, "ignored")
    before = git_http.stats(f"ignored-{sc.namespace}")

    # spec.ignore replaces the defaults: the PNG ships now, README does not.
    await sc.client.merge_patch(
        GITREPO, "ignored", {"spec": {"ignore": "README.md\n"}}, namespace=sc.namespace
    )
    second = await sc.wait(
        GITREPO,
        "ignored",
        lambda o: (
            o["status"].get("observedIgnore") == "README.md\n"
            and o["status"]["observedGeneration"] == o["metadata"]["generation"]
        ),
        what="rebuilt with the new ignore rules",
    )
    assert second["status"]["artifact"]["revision"] == first["status"]["artifact"]["revision"]
    assert second["status"]["artifact"]["digest"] != first["status"]["artifact"]["digest"]
    assert second["status"]["contentConfigChecksum"] != first["status"]["contentConfigChecksum"]
    assert sorted(await served_files(second)) == [
        ".github/workflows/ci.yml",
        "deploy/app.yaml",
        "deploy/logo.png",
    ]
    assert (git_http.stats(f"ignored-{sc.namespace}") - before).upload_pack_bytes > 0, (
        "a full checkout"
    )


async def test_sourceignore_files_in_the_repository_are_honoured(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    work = git_http.create_repo(f"srcignore-{sc.namespace}")
    work.commit(
        "c",
        files={
            ".sourceignore": "secrets/\n",
            "deploy/.sourceignore": "*.md\n",
            "deploy/app.yaml": MANIFEST,
            "deploy/notes.md": "n\n",
            "secrets/key.txt": "k\n",
            "top.md": "kept: the nested rule applies under deploy/ only\n",
        },
    )
    work.push()
    await create(
        sc, gitrepo("si", git_http.url(f"srcignore-{sc.namespace}"), ref={"branch": "main"})
    )
    obj = await sc.wait_ready(GITREPO, "si")
    assert sorted(await served_files(obj)) == [
        ".sourceignore",
        "deploy/.sourceignore",
        "deploy/app.yaml",
        "top.md",
    ]


async def test_same_content_gives_the_same_digest(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    seeded(git_http, f"twin-{sc.namespace}")
    await create(
        sc, gitrepo("twin-a", git_http.url(f"twin-{sc.namespace}"), ref={"branch": "main"})
    )
    await create(
        sc, gitrepo("twin-b", git_http.url(f"twin-{sc.namespace}"), ref={"branch": "main"})
    )
    a = await sc.wait_ready(GITREPO, "twin-a")
    b = await sc.wait_ready(GITREPO, "twin-b")
    assert a["status"]["artifact"]["digest"] == b["status"]["artifact"]["digest"]


async def test_include_copies_another_repositorys_artifact(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    seeded(git_http, f"main-repo-{sc.namespace}")
    lib = git_http.create_repo(f"lib-repo-{sc.namespace}")
    lib.commit("lib", files={"components/base.yaml": "base: 1\n", "other.txt": "x\n"})
    lib.push()
    await create(
        sc,
        gitrepo(
            "main",
            git_http.url(f"main-repo-{sc.namespace}"),
            ref={"branch": "main"},
            include=[
                {"repository": {"name": "lib"}, "fromPath": "components", "toPath": "vendor/lib"}
            ],
        ),
    )
    waiting = await sc.wait(
        GITREPO,
        "main",
        lambda o: (condition(o, "IncludeUnavailable") or {}).get("status") == "True",
        what="IncludeUnavailable",
    )
    ready = condition(waiting, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert ready["message"] == f"included GitRepository '{sc.namespace}/lib' does not exist"

    await create(
        sc, gitrepo("lib", git_http.url(f"lib-repo-{sc.namespace}"), ref={"branch": "main"})
    )
    await sc.wait_ready(GITREPO, "lib")
    main = await sc.wait_ready(GITREPO, "main")
    files = await served_files(main)
    assert files["vendor/lib/base.yaml"] == b"base: 1\n"
    assert "vendor/lib/other.txt" not in files
    assert condition(main, "IncludeUnavailable") is None
    assert len(main["status"]["includedArtifacts"]) == 1

    # A new artifact of the included repository rebuilds the including one.
    lib.commit("lib 2", files={"components/base.yaml": "base: 2\n"})
    lib.push()
    await sc.poke(GITREPO, "lib", "lib-2")
    rebuilt = await sc.wait(
        GITREPO,
        "main",
        lambda o: o["status"]["artifact"]["digest"] != main["status"]["artifact"]["digest"],
        what="rebuilt after the include changed",
    )
    assert (await served_files(rebuilt))["vendor/lib/base.yaml"] == b"base: 2\n"


async def test_basic_auth_and_bearer_token(
    source_controller: SourceController, git_http_auth: GitHttpServer
) -> None:
    sc = source_controller
    work = seeded(git_http_auth, f"private-{sc.namespace}")
    assert git_http_auth.username and git_http_auth.password and git_http_auth.token
    await make_secret(
        sc.client,
        sc.namespace,
        "basic",
        {"username": git_http_auth.username, "password": git_http_auth.password},
    )
    await make_secret(sc.client, sc.namespace, "token", {"bearerToken": git_http_auth.token})
    await make_secret(
        sc.client, sc.namespace, "wrong", {"username": git_http_auth.username, "password": "nope"}
    )
    url = git_http_auth.url(f"private-{sc.namespace}")
    await create(sc, gitrepo("basic", url, ref={"branch": "main"}, secretRef={"name": "basic"}))
    await create(sc, gitrepo("token", url, ref={"branch": "main"}, secretRef={"name": "token"}))
    await create(sc, gitrepo("wrong", url, ref={"branch": "main"}, secretRef={"name": "wrong"}))
    await create(sc, gitrepo("anonymous", url, ref={"branch": "main"}))
    for name in ("basic", "token"):
        obj = await sc.wait_ready(GITREPO, name)
        assert obj["status"]["artifact"]["revision"] == f"main@sha1:{work.head}"
        assert (await served_files(obj))["deploy/app.yaml"].decode() == MANIFEST
    for name in ("wrong", "anonymous"):
        failed = await sc.wait_failed(GITREPO, name, "AuthenticationFailed")
        fetch = condition(failed, "FetchFailed")
        assert fetch is not None and fetch["status"] == "True"
        assert fetch["reason"] == "AuthenticationFailed"
        assert url in fetch["message"]
        assert git_http_auth.password not in str(failed["status"])
    assert {
        r.user for r in git_http_auth.requests(f"private-{sc.namespace}") if r.status == 200
    } >= {git_http_auth.username}


async def test_a_secret_missing_a_key_names_the_key(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    seeded(git_http, f"keys-{sc.namespace}")
    await make_secret(sc.client, sc.namespace, "half", {"username": "someone"})
    await make_secret(sc.client, sc.namespace, "sshless", {"identity": "x"})
    await create(
        sc, gitrepo("half", git_http.url(f"keys-{sc.namespace}"), secretRef={"name": "half"})
    )
    await create(
        sc, gitrepo("sshless", git_http.url(f"keys-{sc.namespace}"), secretRef={"name": "sshless"})
    )
    await create(
        sc, gitrepo("nosecret", git_http.url(f"keys-{sc.namespace}"), secretRef={"name": "missing"})
    )
    half = await sc.wait_failed(GITREPO, "half", "AuthenticationFailed")
    assert (
        condition(half, "Ready")["message"] == f"secret '{sc.namespace}/half' has no 'password' key"
    )  # type: ignore[index]
    sshless = await sc.wait_failed(GITREPO, "sshless", "AuthenticationFailed")
    assert "'known_hosts'" in condition(sshless, "Ready")["message"]  # type: ignore[index]
    missing = await sc.wait_failed(GITREPO, "nosecret", "AuthenticationFailed")
    assert condition(missing, "Ready")["message"] == f"secret '{sc.namespace}/missing' not found"  # type: ignore[index]


async def test_https_with_a_custom_ca(
    source_controller: SourceController, git_https: GitHttpServer
) -> None:
    sc = source_controller
    work = seeded(git_https, f"tls-{sc.namespace}")
    assert git_https.ca_pem is not None
    await make_secret(sc.client, sc.namespace, "ca", {"ca.crt": git_https.ca_pem.decode()})
    url = git_https.url(f"tls-{sc.namespace}")
    assert url.startswith("https://")
    await create(sc, gitrepo("trusted", url, ref={"branch": "main"}, secretRef={"name": "ca"}))
    await create(sc, gitrepo("untrusted", url, ref={"branch": "main"}))
    trusted = await sc.wait_ready(GITREPO, "trusted")
    assert trusted["status"]["artifact"]["revision"] == f"main@sha1:{work.head}"
    assert sorted(await served_files(trusted)) == ["README.md", "deploy/app.yaml"]
    failed = await sc.wait_failed(GITREPO, "untrusted", "AuthenticationFailed")
    assert "not trusted" in condition(failed, "Ready")["message"]  # type: ignore[index]


async def test_ssh_with_identity_and_verified_host_key(
    source_controller: SourceController, git_ssh: SshGitServer
) -> None:
    sc = source_controller
    seeded(git_ssh, f"over-ssh-{sc.namespace}")
    url = git_ssh.url(f"over-ssh-{sc.namespace}")
    await make_secret(
        sc.client,
        sc.namespace,
        "ssh",
        {"identity": git_ssh.identity, "known_hosts": git_ssh.known_hosts},
    )
    impostor = generate_key("ed25519")
    await make_secret(
        sc.client,
        sc.namespace,
        "ssh-wrong-host",
        {
            "identity": git_ssh.identity,
            "known_hosts": known_hosts_line(git_ssh.port, impostor.public_key),
        },
    )
    await create(sc, gitrepo("ssh", url, ref={"branch": "main"}, secretRef={"name": "ssh"}))
    await create(
        sc, gitrepo("ssh-mitm", url, ref={"branch": "main"}, secretRef={"name": "ssh-wrong-host"})
    )
    obj = await sc.wait_ready(GITREPO, "ssh")
    assert "deploy/app.yaml" in await served_files(obj)
    failed = await sc.wait_failed(GITREPO, "ssh-mitm", "AuthenticationFailed")
    assert "not trusted" in condition(failed, "Ready")["message"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("spec", "reason", "message"),
    [
        pytest.param({"ref": {"branch": "nope"}}, "GitOperationFailed", "branch 'nope' not found", id="missing-branch"),
        pytest.param({"ref": {"tag": "v9.9.9"}}, "GitOperationFailed", "tag 'v9.9.9' not found", id="missing-tag"),
        pytest.param({"ref": {"semver": ">=5.0.0"}}, "GitOperationFailed", "no tag matches semver range '>=5.0.0'", id="semver-no-match"),
    ],
)  # fmt: skip
async def test_missing_refs_fail_with_a_precise_message(
    source_controller: SourceController,
    git_http: GitHttpServer,
    spec: dict[str, Any],
    reason: str,
    message: str,
) -> None:
    sc = source_controller
    repo = f"refless-{sc.namespace}"
    seeded(git_http, repo)
    await create(sc, gitrepo("refless", git_http.url(repo), **spec))
    failed = await sc.wait_failed(GITREPO, "refless", reason)
    ready = condition(failed, "Ready")
    assert ready is not None and message in ready["message"]
    reconciling = condition(failed, "Reconciling")
    assert reconciling is not None and reconciling["reason"] == "ProgressingWithRetry"


async def test_an_invalid_url_stalls_without_retrying(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    await create(sc, gitrepo("bad-url", "https://"))
    obj = await sc.wait(
        GITREPO,
        "bad-url",
        lambda o: (condition(o, "Stalled") or {}).get("status") == "True",
        what="Stalled",
    )
    stalled = condition(obj, "Stalled")
    assert stalled is not None and stalled["reason"] == "URLInvalid"
    count = sc.reconciles.counts[f"{sc.namespace}/bad-url"]
    import asyncio

    await asyncio.sleep(1.0)
    assert sc.reconciles.counts[f"{sc.namespace}/bad-url"] == count, "no retry storm"


async def test_an_unreachable_host_is_a_fetch_failure(source_controller: SourceController) -> None:
    from sluice_envtest.controlplane import free_port

    sc = source_controller
    await create(sc, gitrepo("nowhere", f"http://127.0.0.1:{free_port()}/x.git", timeout="5s"))
    failed = await sc.wait_failed(GITREPO, "nowhere", "GitOperationFailed")
    assert "failed to fetch" in condition(failed, "Ready")["message"]  # type: ignore[index]


async def test_a_corrupt_repository_is_a_fetch_failure(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    work = seeded(git_http, f"corrupt-{sc.namespace}")
    corrupt_objects(work.bare)
    await create(
        sc, gitrepo("corrupt", git_http.url(f"corrupt-{sc.namespace}"), ref={"branch": "main"})
    )
    failed = await sc.wait_failed(GITREPO, "corrupt", "GitOperationFailed")
    assert failed["status"].get("artifact") is None


async def test_deleting_the_source_deletes_its_artifacts(
    source_controller: SourceController, git_http: GitHttpServer, kube: KubeClient
) -> None:
    sc = source_controller
    seeded(git_http, f"doomed-{sc.namespace}")
    await create(
        sc, gitrepo("doomed", git_http.url(f"doomed-{sc.namespace}"), ref={"branch": "main"})
    )
    obj = await sc.wait_ready(GITREPO, "doomed")
    directory = (sc.storage / obj["status"]["artifact"]["path"]).parent
    assert directory.is_dir()
    await kube.delete(GITREPO, "doomed", namespace=sc.namespace)

    async def gone() -> bool:
        try:
            await kube.get(GITREPO, "doomed", sc.namespace)
        except NotFound:
            return True
        return False

    import asyncio
    import time

    deadline = time.monotonic() + 20
    while not await gone():
        assert time.monotonic() < deadline, "finalizer not removed"
        await asyncio.sleep(0.1)
    assert not directory.exists()


async def test_a_failure_after_the_ref_listing_names_the_commit_in_its_event(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    work = seeded(git_http, f"partial-{sc.namespace}")
    await create(
        sc,
        gitrepo(
            "partial",
            git_http.url(f"partial-{sc.namespace}"),
            ref={"branch": "main"},
            include=[{"repository": {"name": "absent"}}],
        ),
    )
    await sc.wait_failed(GITREPO, "partial", "NotFound")
    events = await sc.wait_events("partial", lambda es: any(e["type"] == "Warning" for e in es))
    event = next(e for e in events if e["type"] == "Warning")
    assert event["reason"] == "NotFound"
    annotations = event["metadata"]["annotations"]
    assert annotations["source.toolkit.fluxcd.io/revision"] == f"main@sha1:{work.head}"


async def test_submodules_are_checked_out_when_asked(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    sub = git_http.create_repo(f"sub-{sc.namespace}")
    sub.commit("lib", files={"lib.yaml": MANIFEST})
    sub.push()
    parent = git_http.create_repo(f"parent-{sc.namespace}")
    parent.commit("app", files={"app.yaml": MANIFEST})
    parent.git(
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "add",
        git_http.url(f"sub-{sc.namespace}"),
        "vendor/lib",
    )
    parent.commit("add submodule")
    parent.push()
    url = git_http.url(f"parent-{sc.namespace}")
    await create(sc, gitrepo("with-subs", url, ref={"branch": "main"}, recurseSubmodules=True))
    await create(sc, gitrepo("without-subs", url, ref={"branch": "main"}))
    with_subs = await sc.wait_ready(GITREPO, "with-subs")
    without = await sc.wait_ready(GITREPO, "without-subs")
    assert "vendor/lib/lib.yaml" in await served_files(with_subs)
    assert "vendor/lib/lib.yaml" not in await served_files(without)
    assert with_subs["status"]["observedRecurseSubmodules"] is True


async def test_sparse_checkout_keeps_only_the_listed_directories(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    work = git_http.create_repo(f"sparse-{sc.namespace}")
    work.commit(
        "tree",
        files={
            "apps/a.yaml": MANIFEST,
            "infra/b.yaml": MANIFEST,
            "docs/c.yaml": MANIFEST,
            "top.yaml": MANIFEST,
        },
    )
    work.push()
    await create(
        sc,
        gitrepo(
            "sparse",
            git_http.url(f"sparse-{sc.namespace}"),
            ref={"branch": "main"},
            sparseCheckout=["apps", "infra/"],
        ),
    )
    obj = await sc.wait_ready(GITREPO, "sparse")
    assert sorted(await served_files(obj)) == ["apps/a.yaml", "infra/b.yaml"]
    assert obj["status"]["observedSparseCheckout"] == ["apps", "infra/"]


async def test_new_artifact_is_announced_only_when_the_revision_changes(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    repo = f"announced-{sc.namespace}"
    work = seeded(git_http, repo)
    await create(sc, gitrepo("announced", git_http.url(repo), ref={"branch": "main"}))
    first = await sc.wait_ready(GITREPO, "announced")
    await sc.wait_events("announced", bool, reason="NewArtifact")

    # A no-op reconcile, then a rebuild of the same commit with other ignore rules.
    noop = await sc.poke(GITREPO, "announced", "no-op")
    assert noop["status"]["artifact"] == first["status"]["artifact"]
    await sc.client.merge_patch(
        GITREPO, "announced", {"spec": {"ignore": "README.md\n"}}, namespace=sc.namespace
    )
    rebuilt = await sc.wait(
        GITREPO,
        "announced",
        lambda o: o["status"].get("observedIgnore") == "README.md\n",
        what="rebuilt with the new ignore rules",
    )
    assert rebuilt["status"]["artifact"]["digest"] != first["status"]["artifact"]["digest"]
    assert rebuilt["status"]["artifact"]["revision"] == first["status"]["artifact"]["revision"]

    work.commit("second", files={"deploy/extra.yaml": MANIFEST})
    work.push()
    moved = await sc.poke(GITREPO, "announced", "second")
    assert moved["status"]["artifact"]["revision"] == f"main@sha1:{work.head}"
    # Events go out in order, so once the second one is there, any the no-op
    # or the rebuild had sent are too: a repeat would have bumped the first's count.
    events = await sc.wait_events("announced", lambda es: len(es) >= 2, reason="NewArtifact")
    assert [(e["message"], e["count"]) for e in events] == [
        ("stored artifact for commit 'first'", 1),
        ("stored artifact for commit 'second'", 1),
    ]
    annotations = events[1]["metadata"]["annotations"]
    assert annotations["source.toolkit.fluxcd.io/revision"] == f"main@sha1:{work.head}"


async def test_an_included_repository_without_an_artifact_is_unavailable(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    seeded(git_http, f"app-repo-{sc.namespace}")
    lib = git_http.create_repo(f"empty-lib-{sc.namespace}")
    lib.commit("lib", files={"base.yaml": "base: 1\n"})
    lib.push()
    # The included repository exists but its branch does not: it never gets an artifact.
    await create(
        sc, gitrepo("lib", git_http.url(f"empty-lib-{sc.namespace}"), ref={"branch": "gone"})
    )
    await sc.wait_failed(GITREPO, "lib", "GitOperationFailed")
    await create(
        sc,
        gitrepo(
            "app",
            git_http.url(f"app-repo-{sc.namespace}"),
            ref={"branch": "main"},
            include=[{"repository": {"name": "lib"}, "toPath": "vendor/lib"}],
        ),
    )
    waiting = await sc.wait_failed(GITREPO, "app", "NoArtifact")
    message = f"included GitRepository '{sc.namespace}/lib' has no artifact yet"
    unavailable = condition(waiting, "IncludeUnavailable")
    assert unavailable is not None
    assert (unavailable["status"], unavailable["reason"], unavailable["message"]) == (
        "True",
        "NoArtifact",
        message,
    )
    ready = condition(waiting, "Ready")
    assert ready is not None and (ready["status"], ready["message"]) == ("False", message)
    assert waiting["status"].get("artifact") is None

    # Once the included repository has an artifact, the including one is built.
    await sc.client.merge_patch(
        GITREPO, "lib", {"spec": {"ref": {"branch": "main"}}}, namespace=sc.namespace
    )
    await sc.wait_ready(GITREPO, "lib")
    app = await sc.wait_ready(GITREPO, "app")
    assert condition(app, "IncludeUnavailable") is None
    assert (await served_files(app))["vendor/lib/base.yaml"] == b"base: 1\n"


async def test_a_long_history_is_cloned_shallow_and_not_fetched_again(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    repo = f"long-{sc.namespace}"
    work = git_http.create_repo(repo)
    work.commit("base", files={"README.md": "long\n"})
    work.push()
    # 3000 commits, each rewriting 1 kB of random bytes: ~3 MB of history, 2 s to make.
    tip = generate_history(work.bare, commits=3000, blob_size=1_000)
    history = sum(f.stat().st_size for f in (work.bare / "objects").rglob("*") if f.is_file())
    assert history > 3_000_000

    await create(sc, gitrepo("long", git_http.url(repo), ref={"branch": "main"}))
    first = await sc.wait_ready(GITREPO, "long")
    assert first["status"]["artifact"]["revision"] == f"main@sha1:{tip}"
    assert (await served_files(first))["counter.txt"] == b"3000\n"
    cloned = git_http.stats(repo)
    assert 0 < cloned.upload_pack_bytes < history // 100, "one commit, not the history"

    again = await sc.poke(GITREPO, "long", "no-op")
    spent = git_http.stats(repo) - cloned
    assert spent.upload_pack_advertisements == 1, "one ref listing"
    assert spent.upload_pack_posts == 0
    assert spent.upload_pack_bytes == 0
    assert again["status"]["artifact"] == first["status"]["artifact"]
    ready = condition(again, "Ready")
    assert ready is not None and ready["status"] == "True"


def add_submodule(work: WorkRepo, path: str, url: str, commit: str) -> None:
    """Record a submodule at `path` pointing at `url` without cloning it
    (the URL may be one the test's git could not, or should not, reach)."""
    work.write({".gitmodules": f'[submodule "{path}"]\n\tpath = {path}\n\turl = {url}\n'})
    work.git("add", ".gitmodules")
    work.git("update-index", "--add", "--cacheinfo", f"160000,{commit},{path}")
    # Not `work.commit`: its `add --all` would drop the gitlink, absent from the work tree.
    work.git("commit", "--quiet", "--message", f"add submodule {path}")
    work.push()


async def private_parent(sc: SourceController, server: GitHttpServer, name: str) -> WorkRepo:
    """A repository on `server` (which wants credentials), and the secret for it."""
    assert server.username is not None and server.password is not None
    parent = server.create_repo(f"{name}-{sc.namespace}")
    parent.commit("app", files={"app.yaml": MANIFEST})
    await make_secret(
        sc.client,
        sc.namespace,
        name,
        {"username": server.username, "password": server.password},
    )
    return parent


async def test_a_submodule_on_another_host_gets_no_credentials(
    source_controller: SourceController, git_http_auth: GitHttpServer
) -> None:
    sc = source_controller
    with GitHttpServer(username="other", password=secrets.token_hex(8)) as other:
        sub = other.create_repo("lib")
        commit = sub.commit("lib", files={"lib.yaml": MANIFEST})
        sub.push()
        parent = await private_parent(sc, git_http_auth, "elsewhere")
        add_submodule(parent, "vendor/lib", other.url("lib"), commit)
        url = git_http_auth.url(f"elsewhere-{sc.namespace}")
        await create(
            sc,
            gitrepo(
                "elsewhere",
                url,
                ref={"branch": "main"},
                recurseSubmodules=True,
                secretRef={"name": "elsewhere"},
            ),
        )
        obj = await sc.wait_failed(GITREPO, "elsewhere", "AuthenticationFailed")
        asked = other.requests("lib")
    assert asked, "the submodule was fetched from the other host"
    # The parent's credentials went to the parent's host, and nowhere else.
    assert {r.offered for r in asked} == {""}
    assert f"basic:{git_http_auth.username}" in {
        r.offered for r in git_http_auth.requests(f"elsewhere-{sc.namespace}")
    }
    assert git_http_auth.password is not None
    assert git_http_auth.password not in json.dumps(obj["status"])


async def test_a_relative_submodule_resolves_against_the_parent_with_its_credentials(
    source_controller: SourceController, git_http_auth: GitHttpServer
) -> None:
    sc = source_controller
    sub = git_http_auth.create_repo(f"rel-lib-{sc.namespace}")
    commit = sub.commit("lib", files={"lib.yaml": MANIFEST})
    sub.push()
    parent = await private_parent(sc, git_http_auth, "relative")
    add_submodule(parent, "vendor/lib", f"../rel-lib-{sc.namespace}.git", commit)
    url = git_http_auth.url(f"relative-{sc.namespace}")
    spec = {"ref": {"branch": "main"}, "recurseSubmodules": True, "secretRef": {"name": "relative"}}
    await create(sc, gitrepo("relative", url, **spec))
    obj = await sc.wait_ready(GITREPO, "relative")
    assert "vendor/lib/lib.yaml" in await served_files(obj)
    assert {
        r.user for r in git_http_auth.requests(f"rel-lib-{sc.namespace}") if r.status == 200
    } == {git_http_auth.username}


@pytest.mark.parametrize(
    "local",
    [
        pytest.param(lambda bare: f"file://{bare}", id="file-url"),
        pytest.param(lambda bare: str(bare), id="absolute-path"),
    ],
)
async def test_a_submodule_on_this_machine_is_refused(
    source_controller: SourceController, git_http: GitHttpServer, local: Any
) -> None:
    sc = source_controller
    secret = git_http.create_repo(f"local-secret-{sc.namespace}")
    commit = secret.commit("secret", files={"token.txt": "s3cret"})
    secret.push()
    parent = seeded(git_http, f"local-{sc.namespace}")
    add_submodule(parent, "vendor/lib", local(secret.bare), commit)
    url = git_http.url(f"local-{sc.namespace}")
    await create(sc, gitrepo("local", url, ref={"branch": "main"}, recurseSubmodules=True))
    obj = await sc.wait_failed(GITREPO, "local", "GitOperationFailed")
    ready = condition(obj, "Ready")
    assert ready is not None
    assert "submodule 'vendor/lib'" in ready["message"]
    assert "is not allowed" in ready["message"] and "file://" in ready["message"]
    assert "artifact" not in obj["status"]


async def test_checkout_and_artifact_size_limits_keep_the_last_artifact(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path, git_http: GitHttpServer
) -> None:
    flags = (
        "--git-checkout-max-size", str(256 * 1024),
        "--artifact-max-size", str(96 * 1024),
        "--artifact-max-files", "50",
    )  # fmt: skip
    async with start_source_controller(cluster, kube, namespace, tmp_path, *flags) as sc:
        work = seeded(git_http, f"growing-{namespace}")
        url = git_http.url(f"growing-{namespace}")
        await create(sc, gitrepo("growing", url, ref={"branch": "main"}))
        good = await sc.wait_ready(GITREPO, "growing")

        # Incompressible, under the checkout limit, over the artifact limit.
        work.commit("noise", files={"noise.bin": os.urandom(128 * 1024)})
        work.push()
        await sc.poke(GITREPO, "growing", "1")
        obj = await sc.wait_failed(GITREPO, "growing", "Failed")
        failed = condition(obj, "StorageOperationFailed")
        assert failed is not None and failed["status"] == "True"
        assert (
            f"larger than the limit of {96 * 1024} bytes (--artifact-max-size)"
            in (failed["message"])
        )
        assert obj["status"]["artifact"] == good["status"]["artifact"]
        await served(obj)

        # Zeros compress to almost nothing: the pack is small, the checkout is not.
        work.commit("zeros", files={"zeros.bin": bytes(1024 * 1024)})
        work.push()
        await sc.poke(GITREPO, "growing", "2")
        obj = await sc.wait_failed(GITREPO, "growing", "GitOperationFailed")
        ready = condition(obj, "Ready")
        assert ready is not None
        assert f"limit of {256 * 1024} bytes (--git-checkout-max-size)" in ready["message"]
        assert obj["status"]["artifact"] == good["status"]["artifact"]
        await served(obj)

        # Small, but many: each file is an entry the archive holds.
        many = {f"many/{i}.yaml": "" for i in range(60)}
        work.commit("many", files=many, remove=["noise.bin", "zeros.bin"])
        work.push()
        await sc.poke(GITREPO, "growing", "3")
        obj = await sc.wait(
            GITREPO, "growing", lambda o: "(--artifact-max-files)" in json.dumps(o["status"])
        )
        ready = condition(obj, "Ready")
        assert ready is not None and "more than the limit of 50 files" in ready["message"]
        assert obj["status"]["artifact"] == good["status"]["artifact"]


async def test_credentials_in_the_url_never_reach_status_events_or_logs(
    source_controller: SourceController, git_http_auth: GitHttpServer
) -> None:
    sc = source_controller
    seeded(git_http_auth, f"inline-{sc.namespace}")
    assert git_http_auth.password is not None
    url = git_http_auth.url(f"inline-{sc.namespace}", credentials=True)
    assert git_http_auth.password in url
    with capture_logs() as entries:
        await create(sc, gitrepo("inline", url, ref={"branch": "nope"}))
        obj = await sc.wait_failed(GITREPO, "inline", "GitOperationFailed")
        events = await sc.wait_events("inline", bool)
    ready = condition(obj, "Ready")
    assert ready is not None and "redacted@127.0.0.1" in ready["message"], ready
    for text in (json.dumps(obj["status"]), json.dumps(events), json.dumps(entries, default=str)):
        assert git_http_auth.password not in text


@pytest.mark.parametrize(
    ("include", "message"),
    [
        pytest.param(
            {"fromPath": "nope"},
            "include 'lib': fromPath 'nope' does not exist in its artifact",
            id="missing-fromPath",
        ),
        pytest.param(
            {"toPath": "../../escape"},
            "include toPath '../../escape' points outside the artifact",
            id="toPath-escapes",
        ),
    ],
)
async def test_an_include_that_cannot_be_copied_stalls_with_flux_reason(
    source_controller: SourceController,
    git_http: GitHttpServer,
    include: dict[str, str],
    message: str,
) -> None:
    sc = source_controller
    seeded(git_http, f"copy-main-{sc.namespace}")
    lib = git_http.create_repo(f"copy-lib-{sc.namespace}")
    lib.commit("lib", files={"base.yaml": "base: 1\n"})
    lib.push()
    await create(
        sc, gitrepo("lib", git_http.url(f"copy-lib-{sc.namespace}"), ref={"branch": "main"})
    )
    await sc.wait_ready(GITREPO, "lib")
    await create(
        sc,
        gitrepo(
            "main",
            git_http.url(f"copy-main-{sc.namespace}"),
            ref={"branch": "main"},
            include=[{"repository": {"name": "lib"}, **include}],
        ),
    )
    # Flux's reason for an include it cannot copy is CopyFailed.
    obj = await sc.wait_failed(GITREPO, "main", "CopyFailed")
    ready = condition(obj, "Ready")
    assert ready is not None and (ready["status"], ready["message"]) == ("False", message)
    stalled = condition(obj, "Stalled")
    assert stalled is not None and stalled["status"] == "True"


@pytest.mark.parametrize("version", ["v1beta2", "v1beta1"])
async def test_an_old_version_with_its_deprecated_fields_goes_ready(
    source_controller: SourceController, git_http: GitHttpServer, version: str
) -> None:
    """`gitImplementation` and `accessFrom` (v1beta1/v1beta2) apply unchanged and, as in
    Flux v1beta2, change nothing; the object reads back as v1 with them kept."""
    sc = source_controller
    seeded(git_http, f"old-{version}-{sc.namespace}")
    obj = gitrepo(
        "old",
        git_http.url(f"old-{version}-{sc.namespace}"),
        ref={"branch": "main"},
        gitImplementation="libgit2",
        accessFrom={"namespaceSelectors": [{"matchLabels": {"team": "apps"}}]},
    )
    obj["apiVersion"] = f"source.toolkit.fluxcd.io/{version}"
    rt = ResourceType(GITREPO.group, version, GITREPO.plural, GITREPO.kind)
    await sc.client.create(rt, obj, namespace=sc.namespace)
    ready = await sc.wait_ready(GITREPO, "old")
    assert ready["apiVersion"] == "source.toolkit.fluxcd.io/v1"
    assert ready["spec"]["gitImplementation"] == "libgit2"
    assert ready["spec"]["accessFrom"] == {
        "namespaceSelectors": [{"matchLabels": {"team": "apps"}}]
    }
    assert sorted(await served_files(ready)) == ["README.md", "deploy/app.yaml"]
