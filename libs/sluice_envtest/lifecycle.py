"""What every test server shares: `start()`, `stop()`, and `with` doing both."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Startable:
    """A server a test starts with `start()` or as a context manager."""

    def start(self, *, timeout: float = 30.0) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
