"""gitclient against a git server that hangs: bounded, and the process keeps its threads."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest

from sluice_envtest.faulty_proxy import Fault, FaultyProxy, prefix_route
from sluice_envtest.gitserver import GitHttpServer
from sluice_runtime import lanes
from sluice_runtime.git import client as gitclient


def hung_ls_remotes(
    proxy: FaultyProxy, repo: str, count: int, *, timeout: float
) -> list[asyncio.Task[dict[str, str]]]:
    """`count` ls-remotes of `repo` through `proxy`, each under a prefix of its own."""
    return [
        asyncio.create_task(
            gitclient.ls_remote(
                f"{proxy.url}/s{i}/{repo}.git", gitclient.GitAuth(), timeout=timeout
            )
        )
        for i in range(count)
    ]


async def test_hung_ls_remotes_leave_the_default_executor_to_the_file_server(
    git_http: GitHttpServer,
) -> None:
    """More hung ls-remotes than asyncio's default executor has threads (at most 32).

    The file server and storage run their file work in that executor; while
    the ls-remotes hang (each thread held until libgit2's 60 s timeout), it
    must still answer at once, and each ls-remote must fail at its deadline.
    """
    work = git_http.create_repo("hung-ls-remote")
    work.commit("one", files={"a.yaml": "a: 1\n"})
    work.push()
    with FaultyProxy(git_http.base_url, route=prefix_route) as proxy:
        proxy.set(Fault.HANG)
        listings = hung_ls_remotes(proxy, "hung-ls-remote", 40, timeout=1.0)
        try:
            await asyncio.sleep(0.5)
            started = time.monotonic()
            await asyncio.wait_for(asyncio.to_thread(lambda: None), 5)
            waited = time.monotonic() - started
            results = await asyncio.gather(*listings, return_exceptions=True)
        finally:
            proxy.set(Fault.NONE)
            for listing in listings:
                listing.cancel()
    assert waited < 1.0, f"the default executor answered after {waited:.1f}s"
    assert all(isinstance(r, gitclient.GitError) and r.kind == "timeout" for r in results), results
    refs = await gitclient.ls_remote(git_http.url("hung-ls-remote"), gitclient.GitAuth(), timeout=5)
    assert refs["refs/heads/main"] == work.head


async def test_a_requested_ls_remote_does_not_queue_behind_hung_ones(
    git_http: GitHttpServer,
) -> None:
    """Every ls-remote thread held by a hung server; a webhook's ls-remote still answers.

    Queued behind them, it would time out at its deadline (GitError "timeout").
    """
    work = git_http.create_repo("asked-ls-remote")
    work.commit("one", files={"a.yaml": "a: 1\n"})
    work.push()

    async def asked() -> dict[str, str]:
        lanes.serving_requests()
        return await gitclient.ls_remote(
            git_http.url("asked-ls-remote"), gitclient.GitAuth(), timeout=3.0
        )

    with FaultyProxy(git_http.base_url, route=prefix_route) as proxy:
        proxy.set(Fault.HANG)
        hung = hung_ls_remotes(proxy, "asked-ls-remote", 8, timeout=10.0)
        try:
            await asyncio.sleep(0.5)
            refs = await asyncio.create_task(asked())
        finally:
            proxy.set(Fault.NONE)
            for listing in hung:
                listing.cancel()
    assert refs["refs/heads/main"] == work.head


@pytest.mark.parametrize(
    ("requested", "advertisements"),
    [
        pytest.param(False, 1, id="interval-reconciles-join-one"),
        pytest.param(True, 8, id="requested-ones-ask-alone"),
    ],
)
async def test_concurrent_ls_remotes_of_one_url_share_one_answer(
    git_http: GitHttpServer, requested: bool, advertisements: int
) -> None:
    """Eight GitRepositories of one URL and credentials reconciled together (a
    monorepo fleet) ask the server once; a requested reconcile (a webhook
    announcing a push) must see the push, so it never joins one sent before."""
    name = f"shared-ls-remote-{requested}".lower()
    work = git_http.create_repo(name)
    work.commit("one", files={"a.yaml": "a: 1\n"})
    work.push()
    before = git_http.stats(name)

    async def listing() -> dict[str, str]:
        if requested:
            lanes.serving_requests()
        return await gitclient.ls_remote(git_http.url(name), gitclient.GitAuth(), timeout=10)

    listings = await asyncio.gather(*(asyncio.create_task(listing()) for _ in range(8)))
    assert [refs["refs/heads/main"] for refs in listings] == [work.head] * 8
    assert (git_http.stats(name) - before).upload_pack_advertisements == advertisements


async def test_an_http_ls_remote_leaves_libgit2_out_of_the_process(git_http: GitHttpServer) -> None:
    """pygit2 maps its own OpenSSL and libgit2, ~12 MiB resident for the life of
    the process (issue 19): an HTTP ls-remote, the only Git operation a
    controller ran in-process, must not load it. A fresh interpreter, as a
    controller's own `python -m` is."""
    work = git_http.create_repo("lean-ls-remote")
    work.commit("one", files={"a.yaml": "a: 1\n"})
    work.push()
    script = (
        "import asyncio, json, sys\n"
        "from sluice_runtime.git import client\n"
        "refs = asyncio.run(client.ls_remote(sys.argv[1], client.GitAuth(), timeout=10))\n"
        "print(json.dumps([refs['refs/heads/main'], 'pygit2' in sys.modules]))\n"
    )
    listing = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, git_http.url("lean-ls-remote"),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await listing.communicate()
    assert json.loads(out) == [work.head, False]


@pytest.mark.parametrize(
    ("auth", "kind", "message"),
    [
        pytest.param(gitclient.GitAuth(username="git", password="pw"), None, "", id="basic"),
        pytest.param(gitclient.GitAuth(bearer_token="tok"), None, "", id="bearer"),
        pytest.param(
            gitclient.GitAuth(),
            "auth",
            "the server requires authentication and no credentials fit",
            id="no-credentials",
        ),
        pytest.param(
            gitclient.GitAuth(username="git", password="wrong"),
            "auth",
            "the server refused the credentials",
            id="wrong-password",
        ),
    ],
)
async def test_ls_remote_credentials(
    tmp_path: Path, auth: gitclient.GitAuth, kind: str | None, message: str
) -> None:
    """Basic credentials after the server's 401, a bearer token on every request;
    refusals are `auth` failures with the messages the libgit2 worker gives."""
    with GitHttpServer(workdir=tmp_path, username="git", password="pw", token="tok") as server:
        work = server.create_repo("private")
        work.commit("one", files={"a.yaml": "a: 1\n"})
        work.push()
        listing = gitclient.ls_remote(server.url("private"), auth, timeout=10)
        if kind is None:
            assert (await listing)["refs/heads/main"] == work.head
        else:
            with pytest.raises(gitclient.GitError) as refused:
                await listing
            assert (refused.value.kind, refused.value.message) == (kind, message)
