"""Submodule URL policy: which URLs are fetched, and which get the parent's credentials."""

from __future__ import annotations

import pytest

from sluice_runtime.git.worker import WorkerError, same_host, submodule_url

PARENT = "https://git.example.com/org/app.git"


@pytest.mark.parametrize(
    ("url", "parent", "expected"),
    [
        pytest.param("https://other.example/lib.git", PARENT, "https://other.example/lib.git", id="https"),
        pytest.param("http://h:8080/lib.git", PARENT, "http://h:8080/lib.git", id="http-with-port"),
        pytest.param("ssh://git@h/lib.git", PARENT, "ssh://git@h/lib.git", id="ssh"),
        pytest.param("git@h:org/lib.git", PARENT, "git@h:org/lib.git", id="scp-like"),
        pytest.param("../lib.git", PARENT, "https://git.example.com/org/lib.git", id="sibling"),
        pytest.param("./lib.git", PARENT, "https://git.example.com/org/app.git/lib.git", id="below"),
        pytest.param("../../x/lib.git", PARENT, "https://git.example.com/x/lib.git", id="up-two"),
        pytest.param("../lib.git", "git@h:org/app.git", "git@h:org/lib.git", id="relative-to-scp"),
    ],
)  # fmt: skip
def test_allowed_submodule_urls(url: str, parent: str, expected: str) -> None:
    assert submodule_url(url, parent) == expected


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("file:///srv/git/secret.git", id="file-url"),
        pytest.param("/srv/git/secret.git", id="absolute-path"),
        pytest.param("secret", id="bare-path"),
        pytest.param("git://h/lib.git", id="git-protocol"),
        pytest.param("ext::sh -c touch% /tmp/pwned", id="ext-transport"),
        pytest.param("https:///no-host", id="no-host"),
        pytest.param("", id="empty"),
    ],
)
def test_refused_submodule_urls(url: str) -> None:
    with pytest.raises(WorkerError, match="is not allowed"):
        submodule_url(url, PARENT)


@pytest.mark.parametrize(
    ("url", "other", "same"),
    [
        pytest.param(PARENT, "https://git.example.com/org/lib.git", True, id="same-host"),
        pytest.param(PARENT, "https://GIT.example.com:443/x.git", True, id="default-port-and-case"),
        pytest.param(PARENT, "https://git.example.com:8443/x.git", False, id="other-port"),
        pytest.param(PARENT, "http://git.example.com/x.git", False, id="other-scheme-port"),
        pytest.param(PARENT, "https://evil.example/x.git", False, id="other-host"),
        pytest.param("ssh://git@h/x.git", "git@h:y.git", True, id="ssh-and-scp-like"),
        pytest.param(PARENT, "https://git.example.com.evil/x.git", False, id="suffix"),
    ],
)  # fmt: skip
def test_credentials_follow_the_host(url: str, other: str, same: bool) -> None:
    assert same_host(url, other) is same
