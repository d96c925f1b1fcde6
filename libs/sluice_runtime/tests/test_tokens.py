"""File-backed tokens: read again when the kubelet rotates them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sluice_runtime.tokens import TokenFile, TokenFileError


def test_a_rotated_token_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    tokens = TokenFile(path)
    assert tokens.read() == "first"
    # The kubelet swaps a new file in (a symlink flip, so a new inode).
    rotated = tmp_path / "token.new"
    rotated.write_text("second")
    os.replace(rotated, path)
    assert tokens.read() == "second"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "cannot read token file", id="missing"),
        pytest.param("  \n", "is empty", id="empty"),
    ],
)
def test_an_unusable_token_file_is_an_error_naming_the_file(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    with pytest.raises(TokenFileError, match=message) as raised:
        TokenFile(path).read()
    assert str(path) in str(raised.value)
