"""Credentials in URLs never reach status, events, alerts or logs.

Users put `https://user:token@host/...` in fields meant for addresses (a
Provider's `address`, a repository URL, a proxy); anything that echoes such
a URL, or a message that may contain one (an error from a library that
quotes the URL it failed on), goes through `redact_url` or `redact_urls`
first. The whole userinfo is replaced, user name included: a token is often
sent as the user name, and telling the two apart is guesswork.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

REDACTED = "redacted"

# scheme://userinfo@ — userinfo runs up to the last '@' before the path.
_USERINFO = re.compile(
    r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/?#\s@]*(?:@[^/?#\s@]*)*)@"
)


def redact_url(url: str) -> str:
    """`url` with any `user:password@` (or `token@`) replaced by `redacted@`.

    Given a message rather than one URL (an error quoting the URL it failed
    on), every URL in it is redacted, so a caller can never pass the wrong
    shape and leak.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_urls(url)
    if not parts.scheme or any(c.isspace() for c in url) or url.count("://") > 1:
        return redact_urls(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{REDACTED}@{host}"))


def redact_urls(text: str) -> str:
    """`text` with the userinfo of every `scheme://userinfo@` URL in it redacted."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)
