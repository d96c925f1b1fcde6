"""Talking to an OCI registry with oras, bounded and typed.

The source-controller pulls with it and the `sluice` command pushes, pulls,
tags and lists with it; both need the same two things oras-py lacks on its
own: bounded waits (its requests have no timeout and retry for minutes) and
failures that can be named in one line (a status condition, a CLI error).
`Registry` keeps oras's protocol and auth code (basic or bearer-token
challenges) and replaces only its request loop: one timeout-bounded
request, one authentication round, then a typed error. Every body is read
with a bound (a manifest as registries bound them, 4 MiB; a page of the tag
list likewise, and the whole list by its number of tags): a registry is not
trusted to send only what was asked for.

What a failure message suggests (a field of the object, a flag of the
command) is the caller's `Hints`: the client does not know who uses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice_runtime.oci.hosts import credentials_for as credentials_for
from sluice_runtime.redacting import redact_url

if TYPE_CHECKING:
    # Re-exported for the type checker; at run time `__getattr__` below loads it.
    from sluice_runtime.oci.client import Registry as Registry

MAX_MANIFEST_SIZE = 4 << 20
"""What distribution and most registries accept for a manifest."""
MAX_TAGS_PAGE_SIZE = 4 << 20
MAX_TAGS = 100_000
_NEXT_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
"""The distribution spec's tag grammar."""


class RegistryError(Exception):
    """A registry request failed; `auth` tells credentials problems from the rest."""

    def __init__(self, message: str, *, auth: bool = False, not_found: bool = False) -> None:
        super().__init__(message)
        self.auth = auth
        self.not_found = not_found


@dataclass(frozen=True)
class Hints:
    """Where a user fixes a TLS or credentials failure, in their own terms."""

    tls: str
    """For a failed TLS handshake, e.g. "a plain-HTTP registry needs spec.insecure: true"."""
    credentials: str
    """Where credentials go, e.g. "spec.secretRef"."""


@dataclass(frozen=True)
class OCIURL:
    host: str
    repository: str

    @classmethod
    def parse(cls, url: str) -> OCIURL:
        rest = url.removeprefix("oci://")
        host, _, repository = rest.partition("/")
        shown = redact_url(url)
        if "@" in host:
            # Credentials in the URL would be echoed wherever the URL is.
            raise ValueError(
                f"URL '{shown}' is not valid: credentials go in spec.secretRef, not the URL"
            )
        if not url.startswith("oci://") or not host or not repository or "@" in repository:
            raise ValueError(f"URL '{shown}' is not valid: expected oci://<host>/<repository>")
        if ":" in repository.rsplit("/", 1)[-1]:
            raise ValueError(f"URL '{shown}' is not valid: the tag goes in spec.ref, not the URL")
        return cls(host, repository)


@dataclass(frozen=True)
class Reference:
    """`oci://host/repository[:tag|@digest]`, as the `sluice` command takes it."""

    url: OCIURL
    tag: str | None = None
    digest: str | None = None

    @property
    def name(self) -> str:
        """`host/repository:tag` or `host/repository@digest`, as docker writes it."""
        base = f"{self.url.host}/{self.url.repository}"
        if self.digest:
            return f"{base}@{self.digest}"
        return f"{base}:{self.tag}" if self.tag else base

    @classmethod
    def parse(cls, text: str) -> Reference:
        shown = redact_url(text)
        if not text.startswith("oci://"):
            raise ValueError(
                f"'{shown}' is not an OCI reference: expected oci://<host>/<repository>"
            )
        if "@" in text.removeprefix("oci://").split("/", 1)[0]:
            raise ValueError(f"'{shown}' is not valid: credentials do not go in the URL")
        head, _, last = text.rpartition("/")
        tag = digest = None
        if "@" in last:
            last, _, digest = last.partition("@")
            if not _DIGEST.match(digest):
                raise ValueError(f"'{shown}' is not valid: '{digest}' is not a sha256 digest")
        elif ":" in last:
            last, _, tag = last.partition(":")
            if not _TAG.fullmatch(tag):
                raise ValueError(f"'{shown}' is not valid: '{tag}' is not a tag")
        url = OCIURL.parse(f"{head}/{last}")
        return cls(url, tag, digest)


@dataclass(frozen=True)
class Manifest:
    digest: str
    body: dict[str, Any]
    raw: bytes = b""
    """The bytes the digest is of, to copy the manifest under another tag unchanged."""
    media_type: str = ""

    def layers(self) -> list[dict[str, Any]]:
        return list(self.body.get("layers") or [])


def __getattr__(name: str) -> Any:
    """`Registry`, from `oci.client`, imported on first use.

    oras, requests and jsonschema cost a process about 6.6 MiB resident once
    loaded; a source-controller or resourceset-controller that never talks to
    an OCI registry should not carry them. Everything else here is light.
    """
    if name == "Registry":
        from sluice_runtime.oci.client import Registry

        return Registry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
