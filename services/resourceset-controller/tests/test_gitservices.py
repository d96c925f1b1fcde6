"""The Git services' wire formats, as a table: addresses, pages, rate limits, items."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from resourceset_controller import gitservices
from resourceset_controller.gitservices import Item, Listing, Repository, Service, ServiceError

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("service", "url", "listing", "expected"),
    [
        pytest.param(Service.GITHUB, "https://github.com/org/app", Listing.REQUESTS,
                     "https://api.github.com/repos/org/app/pulls?state=open&per_page=100",
                     id="github-com-pulls"),
        pytest.param(Service.GITHUB, "https://ghe.example.com/org/app.git", Listing.BRANCHES,
                     "https://ghe.example.com/api/v3/repos/org/app/branches?per_page=100",
                     id="github-enterprise-branches"),
        pytest.param(Service.GITLAB, "https://gitlab.com/group/sub/app", Listing.REQUESTS,
                     "https://gitlab.com/api/v4/projects/group%2Fsub%2Fapp/merge_requests"
                     "?state=opened&labels=preview%2Cok&per_page=100", id="gitlab-subgroup-mrs"),
        pytest.param(Service.GITLAB, "http://127.0.0.1:8080/g/app", Listing.TAGS,
                     "http://127.0.0.1:8080/api/v4/projects/g%2Fapp/repository/tags?per_page=100",
                     id="gitlab-tags"),
        pytest.param(Service.GITEA, "https://gitea.example.com/org/app/", Listing.REQUESTS,
                     "https://gitea.example.com/api/v1/repos/org/app/pulls?state=open&limit=50",
                     id="gitea-pulls"),
    ],
)  # fmt: skip
def test_first_page(service: Service, url: str, listing: Listing, expected: str) -> None:
    repo = Repository.parse(service, url)
    assert gitservices.first_page(repo, listing, labels=["preview", "ok"]) == expected


@pytest.mark.parametrize(
    ("service", "url", "message"),
    [
        pytest.param(Service.GITHUB, "https://github.com/org", "owner/repo", id="no-repo"),
        pytest.param(Service.GITEA, "https://h/a/b/c", "owner/repo", id="too-deep"),
        pytest.param(Service.GITLAB, "https://gitlab.com/app", "group/project", id="no-group"),
        pytest.param(Service.GITHUB, "https://u:t@github.com/o/r", "credentials", id="userinfo"),
        pytest.param(Service.GITHUB, "ssh://github.com/o/r", "http", id="not-http"),
    ],
)
def test_bad_addresses_are_refused(service: Service, url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Repository.parse(service, url)


@pytest.mark.parametrize(
    ("service", "token", "expected"),
    [
        pytest.param(Service.GITHUB, "t0k", {"Authorization": "Bearer t0k"}, id="github"),
        pytest.param(Service.GITLAB, "t0k", {"PRIVATE-TOKEN": "t0k"}, id="gitlab"),
        pytest.param(Service.GITEA, "t0k", {"Authorization": "token t0k"}, id="gitea"),
        pytest.param(Service.GITEA, None, {}, id="anonymous"),
    ],
)
def test_auth_headers(service: Service, token: str | None, expected: dict[str, str]) -> None:
    headers = gitservices.auth_headers(service, token)
    assert {k: v for k, v in headers.items() if k in ("Authorization", "PRIVATE-TOKEN")} == expected


GH = Repository.parse(Service.GITHUB, "https://ghe.example.com/o/r")
GL = Repository.parse(Service.GITLAB, "https://gl.example.com/g/r")
GL_PAGE1 = "https://gl.example.com/api/v4/projects/g%2Fr/merge_requests?state=opened&per_page=100"


@pytest.mark.parametrize(
    ("repo", "headers", "expected"),
    [
        pytest.param(GH, {"Link": '<https://ghe.example.com/api/v3/x?page=2>; rel="next", '
                                  '<https://ghe.example.com/api/v3/x?page=5>; rel="last"'},
                     "https://ghe.example.com/api/v3/x?page=2", id="link-next"),
        pytest.param(GH, {"Link": '<https://ghe.example.com/api/v3/x?page=1>; rel="prev", '
                                  '<https://ghe.example.com/api/v3/x?page=1>; rel="first"'},
                     None, id="last-page"),
        pytest.param(GH, {}, None, id="no-link"),
        pytest.param(GH, {"Link": '</api/v3/x?page=3>; rel="next"'},
                     "https://ghe.example.com/api/v3/x?page=3", id="relative"),
        pytest.param(GL, {"X-Next-Page": "2"}, GL_PAGE1 + "&page=2", id="gitlab-x-next-page"),
        pytest.param(GL, {"X-Next-Page": ""}, None, id="gitlab-last"),
    ],
)  # fmt: skip
def test_next_page(repo: Repository, headers: dict[str, str], expected: str | None) -> None:
    assert gitservices.next_page(repo, GL_PAGE1, headers) == expected


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({"Link": '<https://evil.example.com/x?page=2>; rel="next"'}, id="other-host"),
        pytest.param({"Link": '<http://ghe.example.com/x?page=2>; rel="next"'}, id="downgrade"),
    ],
)
def test_next_page_on_another_origin_is_not_followed(headers: dict[str, str]) -> None:
    with pytest.raises(ServiceError, match="another host"):
        gitservices.next_page(GH, "https://ghe.example.com/api/v3/x", headers)


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        pytest.param(200, {"X-RateLimit-Remaining": "0"}, None, id="ok-is-not-limited"),
        pytest.param(403, {}, None, id="plain-forbidden"),
        pytest.param(403, {"X-RateLimit-Remaining": "0",
                           "X-RateLimit-Reset": str(int(NOW.timestamp()) + 900)}, 900.0,
                     id="github-primary-reset"),
        pytest.param(403, {"Retry-After": "120"}, 120.0, id="github-secondary-retry-after"),
        pytest.param(429, {"RateLimit-Reset": str(int(NOW.timestamp()) + 30)}, 30.0,
                     id="gitlab-reset"),
        pytest.param(429, {"Retry-After": "Sun, 01 Jun 2025 12:05:00 GMT"}, 300.0,
                     id="retry-after-date"),
        pytest.param(429, {}, gitservices.DEFAULT_RATE_LIMIT_WAIT, id="no-time-named"),
        pytest.param(429, {"Retry-After": "999999"}, gitservices.MAX_RATE_LIMIT_WAIT,
                     id="far-reset-capped"),
        pytest.param(429, {"X-RateLimit-Reset": str(int(NOW.timestamp()) - 50)}, 1.0,
                     id="reset-passed"),
    ],
)  # fmt: skip
def test_rate_limit_wait(status: int, headers: dict[str, str], expected: float | None) -> None:
    assert gitservices.rate_limit_wait(status, headers, now=NOW) == expected


def _body(items: object) -> bytes:
    return json.dumps(items).encode()


@pytest.mark.parametrize(
    ("service", "listing", "raw", "expected"),
    [
        pytest.param(Service.GITHUB, Listing.REQUESTS,
                     [{"number": 4, "title": "t", "user": {"login": "ann"},
                       "labels": [{"name": "preview"}], "head": {"ref": "feat", "sha": "abc"}}],
                     Item("4", "abc", "feat", "t", "ann", ("preview",)), id="github-pull"),
        pytest.param(Service.GITLAB, Listing.REQUESTS,
                     [{"iid": 7, "id": 1007, "title": "t", "author": {"username": "bo"},
                       "labels": ["a"], "source_branch": "feat", "sha": "def"}],
                     Item("7", "def", "feat", "t", "bo", ("a",)), id="gitlab-mr"),
        pytest.param(Service.GITEA, Listing.REQUESTS,
                     [{"number": 2, "title": "t", "user": {"login": "cy"}, "labels": [],
                       "head": {"ref": "fix", "sha": "123"}}],
                     Item("2", "123", "fix", "t", "cy"), id="gitea-pull"),
        pytest.param(Service.GITHUB, Listing.BRANCHES, [{"name": "main", "commit": {"sha": "s"}}],
                     Item("main", "s"), id="github-branch"),
        pytest.param(Service.GITLAB, Listing.TAGS, [{"name": "v1", "commit": {"id": "s"}}],
                     Item("v1", "s"), id="gitlab-tag"),
        pytest.param(Service.GITEA, Listing.BRANCHES, [{"name": "main", "commit": {"id": "s"}}],
                     Item("main", "s"), id="gitea-branch"),
        pytest.param(Service.GITEA, Listing.TAGS,
                     [{"name": "v1", "id": "tagobj", "commit": {"sha": "s"}}],
                     Item("v1", "s"), id="gitea-tag-is-its-commit"),
    ],
)  # fmt: skip
def test_parse_items(service: Service, listing: Listing, raw: object, expected: Item) -> None:
    assert gitservices.parse_items(service, listing, _body(raw)) == [expected]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"<html>", "not JSON", id="html"),
        pytest.param(b'[{"number": 1', "not JSON", id="truncated"),
        pytest.param(b'{"message": "x"}', "list of requests", id="object"),
        pytest.param(b'[{"number": 1, "head": {}}]', "lacking a name or sha", id="no-sha"),
    ],
)
def test_unusable_answers_are_refused(body: bytes, message: str) -> None:
    with pytest.raises(ServiceError, match=message):
        gitservices.parse_items(Service.GITHUB, Listing.REQUESTS, body)
