"""Structured logs: JSON lines, one logger per module, context bound per reconcile.

Only `__main__` calls `configure`; library modules just ask structlog for a
logger. The worker binds kind, namespace, name and a reconcile id through
contextvars, so every line a reconcile writes, in any module, carries them.

Tracebacks never carry local variables: structlog's `dict_tracebacks`
would print every frame's locals, and a reconcile's frames hold decoded
Secret data (tokens, keys, passwords). The type, message and frames
(file, line, function) are what a person debugging needs.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal, TextIO

import structlog
from structlog.tracebacks import ExceptionDictTransformer

Encoding = Literal["json", "console"]

_DICT_TRACEBACKS = structlog.processors.ExceptionRenderer(
    ExceptionDictTransformer(show_locals=False)
)


def configure(
    *, level: str = "info", encoding: Encoding = "json", stream: TextIO | None = None
) -> None:
    numeric = logging.getLevelNamesMapping().get(level.upper())
    if numeric is None:
        raise ValueError(f"unknown log level {level!r} (debug, info, warning, error)")
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if encoding == "json"
        # plain_traceback: a rich or better-exceptions formatter, when one is
        # installed, would render locals.
        else structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback
        )
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
            structlog.processors.StackInfoRenderer(),
            _DICT_TRACEBACKS if encoding == "json" else structlog.processors.format_exc_info,
            structlog.processors.EventRenamer("msg"),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stderr),
        # Not cached: reconfiguring (tests, a changed level) must reach every logger.
        cache_logger_on_first_use=False,
    )
    # Libraries that log through the stdlib (aiohttp, asyncio) go to stderr too.
    logging.basicConfig(level=max(numeric, logging.WARNING), stream=sys.stderr)
