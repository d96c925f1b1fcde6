"""What an OCI URL or reference may be, for an OCIRepository and for the `sluice` command."""

from __future__ import annotations

import re

import pytest

from sluice_runtime.oci.registry import OCIURL, Reference

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("url", "message"),
    [
        pytest.param("oci://u:tok@reg/app", "'oci://redacted@reg/app' is not valid: credentials", id="userinfo"),
        pytest.param("oci://reg", "expected oci://<host>/<repository>", id="no-repository"),
        pytest.param("oci://reg/app:v1", "the tag goes in spec.ref", id="tag-in-url"),
    ],
)  # fmt: skip
def test_invalid_oci_urls(url: str, message: str) -> None:
    with pytest.raises(ValueError, match="URL") as raised:
        OCIURL.parse(url)
    assert message in str(raised.value)
    assert "tok" not in str(raised.value)


@pytest.mark.parametrize(
    ("text", "host", "repository", "tag", "digest"),
    [
        pytest.param("oci://reg/app", "reg", "app", None, None, id="bare"),
        pytest.param("oci://127.0.0.1:5000/team/app:v1.2", "127.0.0.1:5000", "team/app", "v1.2", None, id="port-and-tag"),
        pytest.param(f"oci://reg/app@{DIGEST}", "reg", "app", None, DIGEST, id="digest"),
    ],
)  # fmt: skip
def test_references(
    text: str, host: str, repository: str, tag: str | None, digest: str | None
) -> None:
    ref = Reference.parse(text)
    assert (ref.url.host, ref.url.repository, ref.tag, ref.digest) == (
        host,
        repository,
        tag,
        digest,
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("reg/app:v1", "expected oci://", id="no-scheme"),
        pytest.param("oci://reg/app@sha256:12", "not a sha256 digest", id="short-digest"),
        pytest.param("oci://reg/app:-v1", "'-v1' is not a tag", id="bad-tag"),
        pytest.param("oci://reg:5000", "expected oci://<host>/<repository>", id="no-repository"),
        pytest.param("oci://u:tok@reg/app:v1", "'oci://redacted@reg/app:v1' is not valid: credentials do not go in the URL", id="userinfo"),
    ],
)  # fmt: skip
def test_invalid_references(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Reference.parse(text)
