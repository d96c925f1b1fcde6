"""Keeping credentials written into URLs out of status, events and logs.

A URL like `https://user:token@host/repo` is a common way to hand a
credential to Git or HTTP clients, and it travels into every error message
that names the URL (ours and the libraries'). Messages become condition
messages, events, alerts and log lines, all readable by far more people
than the secret's owner, so they pass through `redact_url` first.
"""

from __future__ import annotations

import re

# scheme://userinfo@ — userinfo is anything up to the first "@" that does not
# cross the authority's end ("/", "?", "#") or whitespace.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]+@")


def redact_url(text: str) -> str:
    """`text` with the userinfo of every `scheme://user[:pass]@host` replaced by `***`."""
    return _USERINFO.sub(r"\g<scheme>***@", text)
