"""GitBranch and GitTag providers over plain Git (Sluice's, beyond Flux Operator):
one ls-remote with the GitRepository's authentication handling."""

from __future__ import annotations

from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.harness import condition, make_secret

from .conftest import CONFIG_MAP, RSET, RSIP, Alone


async def test_branches_and_tags_become_inputs(alone: Alone, git_http_auth: GitHttpServer) -> None:
    a = alone
    git = git_http_auth
    repo = git.create_repo(f"app-{a.namespace}")
    main = repo.commit("init", files={"README": "x"})
    repo.checkout("feature/Login", create=True)
    login = repo.commit("login")
    repo.checkout("feature/search", create=True)
    search = repo.commit("search")
    repo.checkout("main")
    repo.tag("v1.0.0")
    v11 = repo.tag("v1.1.0", message="annotated", ref=login)
    repo.tag("v2.0.0-rc.1", ref=search)
    repo.push()
    assert git.username is not None and git.password is not None
    await make_secret(
        a.kube, a.namespace, "git-auth", {"username": git.username, "password": git.password}
    )
    url = git.url(f"app-{a.namespace}")
    await a.create(
        RSIP,
        "branches",
        {"type": "GitBranch", "url": url, "secretRef": {"name": "git-auth"},
         "filter": {"includeBranch": "^feature/"}},
    )  # fmt: skip
    await a.create(
        RSIP,
        "tags",
        {"type": "GitTag", "url": url, "secretRef": {"name": "git-auth"},
         "filter": {"semver": ">=1.0.0"}},
    )  # fmt: skip
    branches = (await a.observe.wait_ready(RSIP, "branches"))["status"]["exportedInputs"]
    assert [(i["branch"], i["sha"]) for i in branches] == [
        ("feature/search", search),
        ("feature/Login", login),
    ]
    tags = (await a.observe.wait_ready(RSIP, "tags"))["status"]["exportedInputs"]
    assert [(i["tag"], i["sha"]) for i in tags] == [("v1.1.0", v11), ("v1.0.0", main)]

    await a.create(
        RSET,
        "previews",
        {
            "inputsFrom": [{"kind": "ResourceSetInputProvider", "name": "branches"}],
            "resources": [
                {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "preview-<< inputs.branch | slugify >>"},
                 "data": {"sha": "<< inputs.sha >>"}}
            ],
        },
    )  # fmt: skip
    await a.observe.wait_ready(RSET, "previews")
    cm = await a.observe.get(CONFIG_MAP, "preview-feature-login")
    assert cm["data"] == {"sha": login}

    # Wrong credentials: the provider fails, naming the remote, and keeps its inputs.
    await a.kube.merge_patch(
        RSIP, "branches", {"spec": {"secretRef": {"name": "missing"}}}, namespace=a.namespace
    )
    obj = await a.observe.wait(
        RSIP,
        "branches",
        lambda o: (condition(o, "Ready") or {}).get("status") == "False",
        what="Ready=False",
    )
    assert "missing" in condition(obj, "Ready")["message"]  # type: ignore[index]
    assert obj["status"]["exportedInputs"] == branches
