"""What clients asked of the git HTTP server: one record per request, and the
counts a test compares before and after a step (a fetch that found nothing new
downloaded no objects).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

GIT_SERVICES = ("git-upload-pack", "git-receive-pack")
"""The smart-protocol services; any other request is for a dumb-protocol file."""


@dataclass(frozen=True)
class GitRequest:
    """One request the HTTP server answered."""

    method: str
    repo: str
    """The repository's name as in `url(name)`, without `.git`."""
    service: str
    """`git-upload-pack`, `git-receive-pack`, or "" for dumb-protocol files."""
    advertisement: bool
    """A GET of info/refs (the ref advertisement), not a POST to the service."""
    status: int
    git_protocol: str
    """The Git-Protocol header: "version=2" for v2, "" for v0."""
    command: str
    """The protocol v2 command of a POST (`ls-refs`, `fetch`); "" before v2."""
    request_encoding: str
    request_chunked: bool
    response_bytes: int
    """Bytes of the response body, as git http-backend wrote them."""
    user: str
    """Who authenticated: the basic-auth username, "bearer", or ""."""
    offered: str = ""
    """The credentials the client sent, accepted or not: `basic:<username>`
    (never the password), "bearer", or "" for none; shows where a client
    sends a secret it should not."""


@dataclass(frozen=True)
class GitStats:
    """What clients asked of git; subtract an earlier snapshot for what one step did."""

    upload_pack_advertisements: int = 0
    upload_pack_posts: int = 0
    receive_pack_advertisements: int = 0
    receive_pack_posts: int = 0
    upload_pack_bytes: int = 0
    """Response bytes of upload-pack POSTs that negotiate a pack (not v2's ls-refs)."""

    @classmethod
    def of(cls, requests: Iterable[GitRequest]) -> GitStats:
        counts = dict.fromkeys((f.name for f in fields(cls)), 0)
        for request in requests:
            if request.status == 401 or request.service not in GIT_SERVICES:
                continue
            prefix = request.service.removeprefix("git-").replace("-", "_")
            kind = "advertisements" if request.advertisement else "posts"
            counts[f"{prefix}_{kind}"] += 1
            if (
                request.service == "git-upload-pack"
                and not request.advertisement
                and request.command != "ls-refs"
            ):
                counts["upload_pack_bytes"] += request.response_bytes
        return cls(**counts)

    def __sub__(self, other: GitStats) -> GitStats:
        return GitStats(
            **{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)}
        )
