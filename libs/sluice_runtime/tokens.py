"""Bearer tokens kept in files: what controllers present to the event hub.

In a cluster a controller presents its projected service-account token,
which the kubelet rotates in place, so the file is read again whenever it
changes (its mtime, size or inode), never cached for the process's life.
Under `sluice dev` the controllers run with an admin kubeconfig and no
service account; they share one random token in a file instead
(`--events-token-file` on every controller).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
"""Where the kubelet projects a pod's service-account token."""


class TokenFileError(Exception):
    """The token file cannot be read or is empty; the message names the file only."""


@dataclass
class TokenFile:
    """The token in `path`, re-read when the file changes."""

    path: Path
    _stamp: tuple[int, int, int] | None = field(default=None, init=False, repr=False)
    _token: str = field(default="", init=False, repr=False)

    def read(self) -> str:
        try:
            stat = os.stat(self.path)
            stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
            if stamp != self._stamp:
                self._token = self.path.read_text().strip()
                self._stamp = stamp
        except OSError as error:
            raise TokenFileError(f"cannot read token file {self.path}: {error.strerror}") from None
        if not self._token:
            raise TokenFileError(f"token file {self.path} is empty")
        return self._token


def producer_token(path: str | None) -> TokenFile | None:
    """The token a controller sends with its events: `path` when given, else the
    pod's service-account token when there is one, else none (and the hub refuses)."""
    if path:
        return TokenFile(Path(path))
    if SERVICE_ACCOUNT_TOKEN.exists():
        return TokenFile(SERVICE_ACCOUNT_TOKEN)
    return None
