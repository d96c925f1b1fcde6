"""Load structlog without rich: a controller process's first import.

structlog imports rich (and, through it, pygments) whenever rich is
installed, to pretty-print tracebacks' local variables in its console
renderer. Sluice never renders locals (a reconcile's frames hold Secret data,
see `observing.logging`) and formats tracebacks with structlog's plain
formatters, yet the import alone costs every controller about 4.7 MiB
resident. rich stays installed for the `sluice` command, so it is hidden
only while structlog loads: structlog then takes its "rich is not installed"
path, and a later `import rich` (the CLI's) finds the real package.

Each service's package `__init__` imports this module first, before anything
can import structlog; once structlog is loaded, importing it is a no-op.
"""

from __future__ import annotations

import sys

_HIDDEN = ("rich", "better_exceptions")


def load_structlog_without_rich() -> None:
    if "structlog" in sys.modules:
        return
    # A None entry makes `import rich` raise ImportError (PEP 451's rule).
    hidden = [name for name in _HIDDEN if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        import structlog
        import structlog.tracebacks  # noqa: F401
    finally:
        for name in hidden:
            del sys.modules[name]


load_structlog_without_rich()
