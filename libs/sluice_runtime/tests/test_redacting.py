from __future__ import annotations

import pytest

from sluice_runtime.redacting import redact_url


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "https://user:token@example.com/repo.git",
            "https://***@example.com/repo.git",
            id="user-and-password",
        ),
        pytest.param("https://token@example.com/r", "https://***@example.com/r", id="token-only"),
        pytest.param(
            "failed to fetch ssh://git:pw@host:22/x: refused by http://a:b@proxy:3128",
            "failed to fetch ssh://***@host:22/x: refused by http://***@proxy:3128",
            id="several-in-a-message",
        ),
        pytest.param("'https://u:p@h/r' not found", "'https://***@h/r' not found", id="quoted"),
        pytest.param(
            "https://example.com/path@v1", "https://example.com/path@v1", id="at-in-path-kept"
        ),
        pytest.param(
            "https://example.com/?q=a@b", "https://example.com/?q=a@b", id="at-in-query-kept"
        ),
        pytest.param("git@github.com:org/repo.git", "git@github.com:org/repo.git", id="scp-like"),
        pytest.param("no url here", "no url here", id="no-url"),
        pytest.param(
            "oci://u:p%40ss@registry:5000/app", "oci://***@registry:5000/app", id="escaped-at"
        ),
    ],
)
def test_redact_url(text: str, expected: str) -> None:
    assert redact_url(text) == expected
