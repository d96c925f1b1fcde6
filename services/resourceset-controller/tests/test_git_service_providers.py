"""Flux Operator's Git-service providers (GitHub, GitLab, Gitea) against their REST APIs on
loopback, backed by real repositories: pull requests become preview environments, follow
pushes and go away when closed; filters, skip labels, pages, rate limits and bad answers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sluice_envtest.gitservice import Answer, GitServiceApi
from sluice_envtest.harness import condition, make_secret
from sluice_runtime.kube.errors import NotFound

from .conftest import CONFIG_MAP, RSET, RSIP, Alone

PREVIEW = "deploy/flux-preview"


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        await asyncio.sleep(0.1)


async def reconcile_now(a: Alone, name: str) -> dict[str, Any]:
    """Ask the provider to list again and wait for that reconcile's outcome."""
    token = f"{time.time_ns()}"
    await a.kube.merge_patch(
        RSIP, name,
        {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}},
        namespace=a.namespace,
    )  # fmt: skip
    obj: dict[str, Any] = await a.observe.wait(
        RSIP, name, lambda o: o.get("status", {}).get("lastHandledReconcileAt") == token,
        what="the requested reconcile",
    )  # fmt: skip
    return obj


async def token_secret(a: Alone, api: GitServiceApi, name: str = "git-token") -> None:
    assert api.token is not None
    await make_secret(a.kube, a.namespace, name, {"username": "flux", "password": api.token})


async def config_map(a: Alone, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = await a.observe.get(CONFIG_MAP, name)
    except NotFound:
        return None
    return found


def is_false(obj: dict[str, Any]) -> bool:
    return (condition(obj, "Ready") or {}).get("status") == "False"


async def test_github_pull_requests_become_preview_environments(
    alone: Alone, git_service_api: GitServiceApi
) -> None:
    a, api = alone, git_service_api
    name = f"org/app-{a.namespace}"
    repo = api.create_repo(name)
    repo.commit("init", files={"README": "x"})
    heads = {}
    for branch in ("feat/one", "feat/two", "wip"):
        repo.checkout("main")
        repo.checkout(branch, create=True)
        heads[branch] = repo.commit(branch)
    repo.push()
    one = api.open_request(name, branch="feat/one", title="One", author="ann", labels=[PREVIEW])
    two = api.open_request(
        name, branch="feat/two", title="Two", author="bo", labels=[PREVIEW, "size/s"]
    )
    api.open_request(name, branch="wip", title="WIP", labels=[])
    await token_secret(a, api)
    await a.create(
        RSIP, "prs",
        {"type": "GitHubPullRequest", "url": api.url(name), "secretRef": {"name": "git-token"},
         "filter": {"labels": [PREVIEW]}, "defaultValues": {"chart": "charts/app"}},
    )  # fmt: skip
    exported = (await a.observe.wait_ready(RSIP, "prs"))["status"]["exportedInputs"]
    assert exported == [
        {"id": str(two), "sha": heads["feat/two"], "branch": "feat/two", "author": "bo",
         "title": "Two", "labels": [PREVIEW, "size/s"], "chart": "charts/app"},
        {"id": str(one), "sha": heads["feat/one"], "branch": "feat/one", "author": "ann",
         "title": "One", "labels": [PREVIEW], "chart": "charts/app"},
    ]  # fmt: skip
    sent = api.requests(name)
    assert sent and all(r.authorization == f"Bearer {api.token}" for r in sent)
    assert {(r.flavor, r.resource, r.query.get("state")) for r in sent} == {
        ("github", "pulls", "open")
    }

    await a.create(
        RSET, "previews",
        {"inputsFrom": [{"kind": "ResourceSetInputProvider", "name": "prs"}],
         "resources": [{"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "preview-<< inputs.id >>"},
                        "data": {"sha": "<< inputs.sha >>", "branch": "<< inputs.branch >>",
                                 "author": "<< inputs.author >>"}}]},
    )  # fmt: skip
    await a.observe.wait_ready(RSET, "previews")
    assert (await config_map(a, f"preview-{one}") or {}).get("data") == {
        "sha": heads["feat/one"],
        "branch": "feat/one",
        "author": "ann",
    }
    assert await config_map(a, f"preview-{two}") is not None

    # A push to one request moves its environment, and only its.
    repo.checkout("feat/one")
    pushed = repo.commit("one, again")
    repo.push()
    await reconcile_now(a, "prs")

    async def moved() -> bool:
        cm = await config_map(a, f"preview-{one}")
        return cm is not None and cm["data"]["sha"] == pushed

    await eventually(moved, "the preview of the pushed request on its new commit")
    assert (await config_map(a, f"preview-{two}") or {})["data"]["sha"] == heads["feat/two"]

    # Merging the other removes its environment.
    api.close_request(name, two, merged=True)
    await reconcile_now(a, "prs")

    async def removed() -> bool:
        return await config_map(a, f"preview-{two}") is None

    await eventually(removed, "the merged request's preview removed")
    assert await config_map(a, f"preview-{one}") is not None


async def test_skip_labels_hold_a_request_on_its_last_commit(
    alone: Alone, git_service_api: GitServiceApi
) -> None:
    a, api = alone, git_service_api
    name = f"org/skip-{a.namespace}"
    repo = api.create_repo(name)
    repo.commit("init")
    repo.checkout("feat", create=True)
    first = repo.commit("first")
    repo.push()
    number = api.open_request(name, branch="feat", title="Feat", labels=[PREVIEW])
    await token_secret(a, api)
    await a.create(
        RSIP, "prs",
        {"type": "GiteaPullRequest", "url": api.url(name), "secretRef": {"name": "git-token"},
         "filter": {"labels": [PREVIEW]}, "skip": {"labels": ["deploy/pause"]}},
    )  # fmt: skip
    exported = (await a.observe.wait_ready(RSIP, "prs"))["status"]["exportedInputs"]
    assert [(i["id"], i["sha"]) for i in exported] == [(str(number), first)]

    # Paused: a push does not move the exported commit; a new paused request is left out.
    api.set_labels(name, number, [PREVIEW, "deploy/pause"])
    second = repo.commit("second")
    repo.push()
    api.open_request(name, branch="feat", title="Other", labels=[PREVIEW, "deploy/pause"])
    obj = await reconcile_now(a, "prs")
    assert [(i["id"], i["sha"]) for i in obj["status"]["exportedInputs"]] == [(str(number), first)]

    # Unpaused: the request follows its branch again.
    api.set_labels(name, number, [PREVIEW])
    obj = await reconcile_now(a, "prs")
    assert [(i["id"], i["sha"]) for i in obj["status"]["exportedInputs"]] == [(str(number), second)]


async def test_every_git_service_type_lists_its_inputs(
    alone: Alone, git_service_api: GitServiceApi
) -> None:
    a, api = alone, git_service_api
    name = f"group/all-{a.namespace}"
    repo = api.create_repo(name)
    main = repo.commit("init")
    repo.tag("v1.0.0")
    repo.checkout("feat/a", create=True)
    feat = repo.commit("a")
    repo.tag("v1.1.0", message="annotated")
    repo.tag("v2.0.0-rc.1")
    repo.checkout("main")
    repo.push()
    number = api.open_request(name, branch="feat/a", title="A", author="ann", labels=["x"])
    await token_secret(a, api)
    request = {"id": str(number), "sha": feat, "branch": "feat/a", "author": "ann", "title": "A",
               "labels": ["x"]}  # fmt: skip
    branches = [
        {"id": "134349361", "sha": feat, "branch": "feat/a"},
        {"id": "68878758", "sha": main, "branch": "main"},
    ]
    tags = [
        {"id": "93716837", "sha": feat, "tag": "v1.1.0"},
        {"id": "93520228", "sha": main, "tag": "v1.0.0"},
    ]
    expected = {}
    for service, req in (("GitHub", "PullRequest"), ("GitLab", "MergeRequest"),
                         ("Gitea", "PullRequest")):  # fmt: skip
        expected[f"{service}{req}"] = ([request], {})
        expected[f"{service}Branch"] = (branches, {})
        expected[f"{service}Tag"] = (tags, {"semver": ">=1.0.0"})
    for kind, (_, filt) in expected.items():
        await a.create(
            RSIP, kind.lower(),
            {"type": kind, "url": api.url(name), "secretRef": {"name": "git-token"},
             "filter": filt},
        )  # fmt: skip
    for kind, (want, _) in expected.items():
        obj = await a.observe.wait_ready(RSIP, kind.lower())
        assert obj["status"]["exportedInputs"] == want, kind
    flavors = {(r.flavor, r.authorization.split(" ")[0]) for r in api.requests(name)}
    assert flavors == {("github", "Bearer"), ("gitlab", "PRIVATE-TOKEN:"), ("gitea", "token")}


async def test_pages_are_followed_until_the_limit(
    alone: Alone, git_service_api: GitServiceApi
) -> None:
    a, api = alone, git_service_api
    name = f"group/sub/many-{a.namespace}"
    repo = api.create_repo(name)
    repo.commit("init")
    repo.checkout("feat", create=True)
    repo.commit("feat")
    for i in range(120):
        repo.tag(f"v1.{i}.0")
    repo.push()
    numbers = [api.open_request(name, branch="feat", title=f"MR {i}") for i in range(230)]
    await token_secret(a, api)
    await a.create(
        RSIP, "mrs",
        {"type": "GitLabMergeRequest", "url": api.url(name), "secretRef": {"name": "git-token"},
         "filter": {"limit": 150}},
    )  # fmt: skip
    await a.create(
        RSIP, "all-mrs",
        {"type": "GitLabMergeRequest", "url": api.url(name), "secretRef": {"name": "git-token"},
         "filter": {"limit": 1000}},
    )  # fmt: skip
    api.add_repo(name.replace("/sub", ""), repo.bare)
    await a.create(
        RSIP, "tags",
        {"type": "GitHubTag", "url": api.url(name.replace("/sub", "")),
         "secretRef": {"name": "git-token"}, "filter": {"semver": ">=1.100.0", "limit": 5}},
    )  # fmt: skip

    limited = (await a.observe.wait_ready(RSIP, "mrs"))["status"]["exportedInputs"]
    assert [i["id"] for i in limited] == [str(n) for n in reversed(numbers)][:150]
    every = (await a.observe.wait_ready(RSIP, "all-mrs"))["status"]["exportedInputs"]
    assert len(every) == 230
    newest = (await a.observe.wait_ready(RSIP, "tags"))["status"]["exportedInputs"]
    assert [i["tag"] for i in newest] == [f"v1.{i}.0" for i in (119, 118, 117, 116, 115)]

    pages = [r.query.get("page", "1") for r in api.requests(name) if r.status == 200]
    # 150 of 230 requests: two pages of 100, not the third; all of them: three.
    assert sorted(pages) == ["1", "1", "2", "2", "3"]
    tag_pages = [r.query.get("page", "1") for r in api.requests(name.replace("/sub", ""))]
    assert sorted(tag_pages) == ["1", "2"]


@pytest.mark.parametrize(
    ("status", "retry_after", "due"),
    [
        pytest.param(403, None, 1800.0, id="github-403-reset"),
        pytest.param(429, "120", 120.0, id="429-retry-after"),
    ],
)
async def test_a_rate_limit_is_waited_out_keeping_the_inputs(
    alone: Alone, git_service_api: GitServiceApi, status: int, retry_after: str | None, due: float
) -> None:
    a, api = alone, git_service_api
    name = f"org/limited-{a.namespace}"
    repo = api.create_repo(name)
    repo.commit("init")
    repo.push()
    await token_secret(a, api)
    await a.create(
        RSIP, "branches",
        {"type": "GitHubBranch", "url": api.url(name), "secretRef": {"name": "git-token"}},
    )  # fmt: skip
    before = (await a.observe.wait_ready(RSIP, "branches"))["status"]["exportedInputs"]
    # Every answer stays a rate limit, so a reconcile that happens to follow finds it too.
    api.rate_limit(status=status, reset_in=1800, retry_after=retry_after, repo=name, times=100)
    try:
        obj = await reconcile_now(a, "branches")
        ready = condition(obj, "Ready") or {}
        assert ready.get("status") == "False" and "rate limit" in ready.get("message", ""), ready
        assert obj["status"]["exportedInputs"] == before
        # The next attempt waits for the reset, not for the (2s at most) backoff.
        key = f"{a.namespace}/branches"
        left = a.providers.queue.due_in(key)
        assert left is not None and due - 60 < left <= due, left
        limited = [r for r in api.requests(name) if r.status == status]
        assert 1 <= len(limited) <= 2, len(limited)
    finally:
        api.clear_answers(name)


async def test_bad_credentials_and_answers_keep_the_last_inputs(
    alone: Alone, git_service_api: GitServiceApi
) -> None:
    a, api = alone, git_service_api
    name = f"org/bad-{a.namespace}"
    repo = api.create_repo(name)
    repo.commit("init")
    repo.push()
    await token_secret(a, api)
    await make_secret(a.kube, a.namespace, "wrong", {"username": "flux", "password": "n0pe-t0ken"})
    await make_secret(a.kube, a.namespace, "half", {"password": "n0pe-t0ken"})
    await a.create(
        RSIP, "branches",
        {"type": "GitLabBranch", "url": api.url(name), "secretRef": {"name": "git-token"}},
    )  # fmt: skip
    before = (await a.observe.wait_ready(RSIP, "branches"))["status"]["exportedInputs"]
    assert before

    async def failing(patch: dict[str, Any] | None, expected: str) -> None:
        if patch is not None:
            await a.kube.merge_patch(RSIP, "branches", {"spec": patch}, namespace=a.namespace)
        obj = await a.observe.wait(
            RSIP, "branches",
            lambda o: is_false(o) and expected in (condition(o, "Ready") or {}).get("message", ""),
            what=f"Ready=False naming {expected!r}",
        )  # fmt: skip
        message = (condition(obj, "Ready") or {}).get("message", "")
        assert "n0pe-t0ken" not in message and str(api.token) not in message
        assert obj["status"]["exportedInputs"] == before

    await failing({"secretRef": {"name": "wrong"}}, "refused the credentials of spec.secretRef")
    await failing({"secretRef": {"name": "half"}}, "has no 'username' key")
    await failing({"secretRef": None}, "wants credentials (HTTP 401)")
    await failing(
        {"secretRef": {"name": "git-token"}, "url": api.url(f"org/gone-{a.namespace}")},
        "found no repository",
    )
    await a.kube.merge_patch(
        RSIP, "branches", {"spec": {"url": api.url(name)}}, namespace=a.namespace
    )
    await a.observe.wait_ready(RSIP, "branches")
    truncated = Answer(200, {"Content-Type": "application/json"}, b'[{"name": "ma')
    api.answer_next(truncated, times=1000, repo=name)
    try:
        await reconcile_now(a, "branches")
        await failing(None, "not JSON")
    finally:
        api.clear_answers(name)


async def test_a_private_ca_from_cert_secret_ref(
    alone: Alone, git_service_api_tls: GitServiceApi
) -> None:
    a, api = alone, git_service_api_tls
    name = f"org/tls-{a.namespace}"
    repo = api.create_repo(name)
    main = repo.commit("init")
    repo.push()
    assert api.ca_pem is not None
    await make_secret(a.kube, a.namespace, "ca", {"ca.crt": api.ca_pem.decode()})
    await a.create(RSIP, "untrusted", {"type": "GiteaBranch", "url": api.url(name)})
    await a.create(
        RSIP,
        "trusted",
        {"type": "GiteaBranch", "url": api.url(name), "certSecretRef": {"name": "ca"}},
    )
    obj = await a.observe.wait_ready(RSIP, "trusted")
    assert obj["status"]["exportedInputs"] == [{"id": "68878758", "sha": main, "branch": "main"}]
    untrusted = await a.observe.wait(RSIP, "untrusted", is_false, what="Ready=False")
    assert "cannot reach the Gitea API" in (condition(untrusted, "Ready") or {})["message"]
