"""The HTTP git server speaks git's smart protocol as real hosts do, to git and libgit2."""

from __future__ import annotations

import base64
import gzip
import http.client
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pygit2
import pytest

from sluice_envtest.gitserver import (
    GitHttpServer,
    WorkRepo,
    generate_history,
    git_environ,
    run_git,
)
from sluice_envtest.processes import ServerError


def git(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    return run_git(*args, env=env or git_environ(), cwd=cwd)


def failing_git(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", *args], env=env or git_environ(), capture_output=True, text=True, check=False
    )
    assert done.returncode != 0, done.stdout
    return done.stderr


def demo_repo(server: GitHttpServer, name: str) -> WorkRepo:
    repo = server.create_repo(name)
    repo.commit("first", files={"README.md": "# demo\n", "deploy/app.yaml": "kind: Pod\n"})
    repo.tag("v1.0.0", message="release 1.0.0")
    repo.checkout("feature", create=True)
    repo.commit("feature work", files={"feature.txt": "wip\n"})
    repo.checkout("main")
    repo.push()
    return repo


@pytest.mark.parametrize("version", ["0", "1", "2"])
def test_git_clones_with_each_protocol_version(
    git_http: GitHttpServer, tmp_path: Path, version: str
) -> None:
    name = f"protocol-v{version}"
    repo = demo_repo(git_http, name)
    git("-c", f"protocol.version={version}", "clone", "-q", git_http.url(name), str(tmp_path))
    assert (tmp_path / "README.md").read_text() == "# demo\n"
    assert git("rev-parse", "HEAD", cwd=tmp_path).strip() == repo.head
    assert git("rev-parse", "origin/feature", cwd=tmp_path).strip() == repo.rev_parse("feature")
    sent = {r.git_protocol for r in git_http.requests(name)}
    assert sent == ({""} if version == "0" else {f"version={version}"})
    stats = git_http.stats(name)
    assert stats.upload_pack_advertisements == 1
    assert stats.upload_pack_posts == (2 if version == "2" else 1)  # v2: ls-refs, fetch


def test_libgit2_clones_and_a_no_op_fetch_downloads_nothing(
    git_http: GitHttpServer, tmp_path: Path
) -> None:
    repo = demo_repo(git_http, "libgit2-noop")
    cloned = pygit2.clone_repository(git_http.url("libgit2-noop"), str(tmp_path / "clone"))
    assert str(cloned.head.target) == repo.head
    assert git_http.stats("libgit2-noop").upload_pack_bytes > 0

    before = git_http.stats("libgit2-noop")
    cloned.remotes["origin"].fetch()
    nothing = git_http.stats("libgit2-noop") - before
    assert nothing.upload_pack_advertisements == 1
    assert nothing.upload_pack_posts == 0
    assert nothing.upload_pack_bytes == 0

    new = repo.commit("second", files={"deploy/app.yaml": "kind: Deployment\n"})
    repo.push()
    before = git_http.stats("libgit2-noop")
    cloned.remotes["origin"].fetch()
    something = git_http.stats("libgit2-noop") - before
    assert something.upload_pack_bytes > 0
    assert str(cloned.revparse_single("refs/remotes/origin/main").id) == new


def test_a_v2_no_op_fetch_lists_refs_but_negotiates_no_pack(
    git_http: GitHttpServer, tmp_path: Path
) -> None:
    demo_repo(git_http, "v2-noop")
    git("clone", "-q", git_http.url("v2-noop"), str(tmp_path))
    before = git_http.stats("v2-noop")
    git("fetch", "-q", "origin", cwd=tmp_path)
    nothing = git_http.stats("v2-noop") - before
    assert nothing.upload_pack_posts == 1  # ls-refs only
    assert nothing.upload_pack_bytes == 0
    assert git_http.requests("v2-noop")[-1].command == "ls-refs"


def test_gzip_request_bodies_reach_git(git_http: GitHttpServer, tmp_path: Path) -> None:
    # A v0 request wanting many refs is over 1 KiB, which git gzips.
    repo = git_http.create_repo("gzip")
    repo.commit("base", files={"a": "a\n"})
    for index in range(60):
        repo.checkout(f"branch-{index:02d}", create=True)
        repo.commit(f"on branch {index}", files={"a": f"{index}\n"})
    repo.checkout("main")
    repo.push()
    git("-c", "protocol.version=0", "clone", "-q", "--mirror", git_http.url("gzip"), str(tmp_path))
    posts = [r for r in git_http.requests("gzip") if r.method == "POST"]
    assert any(r.request_encoding == "gzip" for r in posts), posts
    assert all(r.status == 200 for r in posts)
    mirrored = git("for-each-ref", "--format=%(objectname)", "refs/heads/branch-59", cwd=tmp_path)
    assert mirrored.strip() == repo.rev_parse("branch-59")


def test_gzip_request_body_is_answered_like_a_plain_one(git_http: GitHttpServer) -> None:
    demo_repo(git_http, "gzip-raw")
    body = b"0014command=ls-refs\n0001" + b"0009peel\n0000"
    answers = []
    for payload, headers in (
        (body, {}),
        (gzip.compress(body), {"Content-Encoding": "gzip"}),
    ):
        request = urllib.request.Request(  # noqa: S310 - our loopback server
            f"{git_http.url('gzip-raw')}/git-upload-pack",
            data=payload,
            headers={
                "Content-Type": "application/x-git-upload-pack-request",
                "Git-Protocol": "version=2",
                **headers,
            },
        )
        with urllib.request.urlopen(request) as answer:  # noqa: S310 - our loopback server
            answers.append(answer.read())
    assert answers[0] == answers[1]
    assert b"refs/heads/main" in answers[0]
    assert [r.command for r in git_http.requests("gzip-raw")] == ["ls-refs", "ls-refs"]


def test_responses_are_streamed_chunked(git_http: GitHttpServer) -> None:
    demo_repo(git_http, "chunked")
    connection = http.client.HTTPConnection("127.0.0.1", git_http.port, timeout=10)
    connection.request("GET", "/chunked.git/info/refs?service=git-upload-pack")
    answer = connection.getresponse()
    assert answer.status == 200
    assert answer.getheader("Transfer-Encoding") == "chunked"
    assert answer.getheader("Content-Type") == "application/x-git-upload-pack-advertisement"
    assert b"refs/heads/main" in answer.read()
    connection.close()


def test_a_large_push_arrives_chunked(git_http: GitHttpServer, tmp_path: Path) -> None:
    repo = demo_repo(git_http, "big-push")
    git("clone", "-q", git_http.url("big-push"), str(tmp_path))
    (tmp_path / "blob.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    git("add", "blob.bin", cwd=tmp_path)
    git("commit", "-q", "-m", "big", cwd=tmp_path)
    git("push", "-q", "origin", "main", cwd=tmp_path)
    pushed = git("rev-parse", "HEAD", cwd=tmp_path).strip()
    assert run_git("rev-parse", "refs/heads/main", cwd=repo.bare).strip() == pushed
    posts = [r for r in git_http.requests("big-push") if r.service == "git-receive-pack"]
    assert any(r.request_chunked for r in posts if not r.advertisement)
    # Before a body too big to buffer, git probes with an empty POST.
    assert git_http.stats("big-push").receive_pack_posts == 2


def test_basic_auth_and_bearer_tokens(git_http_auth: GitHttpServer, tmp_path: Path) -> None:
    server = git_http_auth
    demo_repo(server, "private")
    assert server.username is not None and server.token is not None

    for header in (None, "Basic " + base64.b64encode(b"sluice:wrong").decode(), "Bearer nope"):
        url = f"{server.url('private')}/info/refs?service=git-upload-pack"
        request = urllib.request.Request(url)  # noqa: S310 - our loopback server
        if header:
            request.add_header("Authorization", header)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request)  # noqa: S310 - our loopback server
        assert refused.value.code == 401
        assert refused.value.headers["WWW-Authenticate"] == f'Basic realm="{server.realm}"'

    stderr = failing_git("clone", "-q", server.url("private"), str(tmp_path / "anonymous"))
    assert "Authentication failed" in stderr or "could not read Username" in stderr

    git("clone", "-q", server.url("private", credentials=True), str(tmp_path / "basic"))
    git(
        "-c",
        f"http.extraHeader=Authorization: Bearer {server.token}",
        "clone",
        "-q",
        server.url("private"),
        str(tmp_path / "bearer"),
    )
    callbacks = pygit2.RemoteCallbacks(
        credentials=pygit2.UserPass(server.username, server.password or "")
    )
    cloned = pygit2.clone_repository(
        server.url("private"), str(tmp_path / "libgit2"), callbacks=callbacks
    )
    assert not cloned.is_empty
    users = {r.user for r in server.requests("private") if r.status == 200}
    assert users == {"sluice", "bearer"}


def test_tls_is_verified_against_the_test_ca(git_https: GitHttpServer, tmp_path: Path) -> None:
    demo_repo(git_https, "secure")
    assert git_https.ca_file is not None and git_https.ca_pem is not None
    assert git_https.url("secure").startswith("https://127.0.0.1:")
    stderr = failing_git("clone", "-q", git_https.url("secure"), str(tmp_path / "untrusted"))
    assert "certificate verification failed" in stderr
    env = git_environ()
    env["GIT_SSL_CAINFO"] = str(git_https.ca_file)
    git("clone", "-q", git_https.url("secure"), str(tmp_path / "trusted"), env=env)
    assert (tmp_path / "trusted" / "README.md").exists()
    assert git_https.ca_pem.startswith(b"-----BEGIN CERTIFICATE-----")


def test_libgit2_verifies_tls_against_the_ca_it_is_given(
    git_https: GitHttpServer, tmp_path: Path
) -> None:
    # The CA locations are process-wide in libgit2: try them in a process of their own.
    demo_repo(git_https, "secure-libgit2")
    script = (
        "import sys, pygit2\n"
        "try:\n"
        "    pygit2.clone_repository(sys.argv[1], sys.argv[3])\n"
        "except pygit2.GitError as error:\n"
        "    print(error)\n"
        "pygit2.settings.set_ssl_cert_locations(sys.argv[2], None)\n"
        "print(pygit2.clone_repository(sys.argv[1], sys.argv[4]).head.target)\n"
    )
    done = subprocess.run(
        [
            sys.executable, "-c", script, git_https.url("secure-libgit2"),
            str(git_https.ca_file), str(tmp_path / "untrusted"), str(tmp_path / "trusted"),
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    refused, cloned = done.stdout.splitlines()
    assert refused == "user rejected certificate for 127.0.0.1"
    assert cloned == run_git("rev-parse", "main", cwd=git_https.root / "secure-libgit2.git").strip()


def test_a_server_that_cannot_start_says_why(git_http: GitHttpServer) -> None:
    taken = GitHttpServer(port=git_http.port)
    with pytest.raises(ServerError, match=r"did not start.*address already in use"):
        taken.start()
    taken.stop()  # a second stop is harmless


def test_credentials_in_urls_are_quoted() -> None:
    server = GitHttpServer(username="a@b", password="p:ss/w?rd")
    try:
        assert server.url("r", credentials=True) == (
            f"http://a%40b:p%3Ass%2Fw%3Frd@127.0.0.1:{server.port}/r.git"
        )
        assert server.url("r") == f"http://127.0.0.1:{server.port}/r.git"
    finally:
        server.stop()


def test_work_repo_commits_are_reproducible(tmp_path: Path) -> None:
    heads = []
    for index in range(2):
        repo = WorkRepo.create(tmp_path / f"bare-{index}.git", work=tmp_path / f"work-{index}")
        repo.commit("one", files={"a.txt": "1\n"})
        repo.commit("two", files={"b/c.txt": b"\x00\x01"}, remove=["a.txt"])
        annotated = repo.tag("v2", message="two")
        light = repo.tag("light")
        repo.push()
        heads.append(repo.head)
        assert annotated == light == repo.head
        assert run_git("cat-file", "-t", "v2", cwd=repo.bare).strip() == "tag"
        assert run_git("cat-file", "-t", "light", cwd=repo.bare).strip() == "commit"
        assert run_git("ls-tree", "-r", "--name-only", "main", cwd=repo.bare).split() == ["b/c.txt"]
    assert heads[0] == heads[1]


def test_work_repo_continues_an_existing_repository(tmp_path: Path) -> None:
    first = WorkRepo.create(tmp_path / "shared.git", work=tmp_path / "first")
    base = first.commit("base", files={"a": "a\n"})
    first.push()
    second = WorkRepo.create(tmp_path / "shared.git", work=tmp_path / "second")
    assert second.head == base
    second.commit("more", files={"b": "b\n"})
    second.push()
    assert run_git("rev-list", "--count", "main", cwd=tmp_path / "shared.git").strip() == "2"


def test_a_large_history_is_made_fast_and_served_shallow(
    git_http: GitHttpServer, tmp_path: Path
) -> None:
    repo = git_http.create_repo("history")
    repo.commit("base", files={"README.md": "big\n"})
    repo.push()
    tip = generate_history(repo.bare, commits=3000, blob_size=10_000)
    assert run_git("rev-list", "--count", tip, cwd=repo.bare).strip() == "3001"

    git("clone", "-q", "--depth", "1", git_http.url("history"), str(tmp_path / "shallow"))
    shallow = git_http.stats("history")
    assert git("rev-parse", "HEAD", cwd=tmp_path / "shallow").strip() == tip
    assert shallow.upload_pack_bytes < 1_000_000

    git("clone", "-q", git_http.url("history"), str(tmp_path / "full"))
    full = git_http.stats("history") - shallow
    assert full.upload_pack_bytes > 30_000_000  # random data does not compress
    assert (tmp_path / "full" / "counter.txt").read_text() == "3000\n"
