"""URL credentials are redacted wherever a URL is echoed."""

from __future__ import annotations

import pytest

from sluice_runtime.redacting import redact_url, redact_urls


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        pytest.param("https://hooks.example.com/x", "https://hooks.example.com/x", id="no-creds"),
        pytest.param(
            "https://u:p@h.example/x?q=1", "https://redacted@h.example/x?q=1", id="user-pass"
        ),
        pytest.param(
            "https://ghp_token@github.com/o/r", "https://redacted@github.com/o/r", id="token-user"
        ),
        pytest.param("http://u:p@h:8080/", "http://redacted@h:8080/", id="port-kept"),
        pytest.param("https://u:p%40ss@h/", "https://redacted@h/", id="encoded-at"),
        pytest.param("https://u:p@ss@h/", "https://redacted@h/", id="raw-at-in-password"),
        pytest.param("not a url", "not a url", id="not-a-url"),
        pytest.param("https://[::1:bad/", "https://[::1:bad/", id="unparseable"),
    ],
)
def test_redact_url(url: str, redacted: str) -> None:
    assert redact_url(url) == redacted


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        pytest.param(
            "dial https://u:s3cret@git.example/r.git: refused",
            "dial https://redacted@git.example/r.git: refused",
            id="in-a-message",
        ),
        pytest.param(
            "a http://a:b@x/ and ssh://git:pw@y:22/z",
            "a http://redacted@x/ and ssh://redacted@y:22/z",
            id="two-urls",
        ),
        pytest.param("mail me at ops@example.com", "mail me at ops@example.com", id="email-kept"),
        pytest.param("https://x/?to=a@b", "https://x/?to=a@b", id="at-in-query-kept"),
    ],
)
def test_redact_urls(text: str, redacted: str) -> None:
    assert redact_urls(text) == redacted


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        pytest.param(
            "failed to fetch ssh://git:pw@host:22/x: refused by http://a:b@proxy:3128",
            "failed to fetch ssh://redacted@host:22/x: refused by http://redacted@proxy:3128",
            id="several-in-a-message",
        ),
        pytest.param(
            "'https://u:p@h/r' not found", "'https://redacted@h/r' not found", id="quoted"
        ),
        pytest.param("https://example.com/path@v1", "https://example.com/path@v1", id="at-in-path"),
        pytest.param("git@github.com:org/repo.git", "git@github.com:org/repo.git", id="scp-like"),
        pytest.param(
            "oci://u:p%40ss@registry:5000/app", "oci://redacted@registry:5000/app", id="oci"
        ),
    ],
)
def test_redact_url_given_a_message_redacts_every_url_in_it(text: str, redacted: str) -> None:
    assert redact_url(text) == redacted
