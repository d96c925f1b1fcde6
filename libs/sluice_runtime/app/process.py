"""A controller process from its command line to its exit: flags parsed, logging
and allocator set up, the runtime run until SIGTERM or SIGINT, and startup
problems a person can fix ended in one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from sluice_runtime import failpoints
from sluice_runtime.allocating import smaller_tls_buffers, tune_malloc
from sluice_runtime.app.flags import parser
from sluice_runtime.app.runtime import Setup, StartupError, running
from sluice_runtime.kube.errors import ConfigError, KubeError, one_line
from sluice_runtime.observing import logging as sluice_logging
from sluice_runtime.observing import tracing
from sluice_runtime.observing.heaptracing import start_from_env


async def run(
    *,
    service: str,
    options: argparse.Namespace,
    kinds: Sequence[Any],
    setup: Setup,
    forward_events: bool = True,
) -> None:
    """Run until SIGTERM/SIGINT (or lost leadership), then unwind in order."""
    stop = asyncio.Event()
    started = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    tracing.configure(service)

    async def serve() -> None:
        async with running(
            service=service,
            options=options,
            kinds=kinds,
            setup=setup,
            on_lost_leadership=stop.set,
            forward_events=forward_events,
        ):
            started.set()
            await stop.wait()

    server = loop.create_task(serve(), name=f"{service}-main")
    stopping = loop.create_task(stop.wait(), name="signal-wait")
    try:
        await asyncio.wait({server, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not started.is_set() and not server.done():
            # Stopped while still starting (e.g. waiting for leadership).
            server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server
    finally:
        stopping.cancel()
        tracing.shutdown()


def entry_point(
    *,
    service: str,
    doc: str | None,
    kinds: Sequence[Any],
    setup: Setup,
    concurrency: int = 4,
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    forward_events: bool = True,
) -> Callable[[], None]:
    """A service's console-script `main`: `main(...)` with the first line of the
    service's module docstring (`doc`) as the description `--help` shows."""
    description = doc.splitlines()[0] if doc else service

    def entry() -> None:
        main(
            service=service,
            description=description,
            kinds=kinds,
            setup=setup,
            concurrency=concurrency,
            add_arguments=add_arguments,
            forward_events=forward_events,
        )

    return entry


def main(
    *,
    service: str,
    description: str,
    kinds: Sequence[Any],
    setup: Setup,
    concurrency: int = 4,
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    argv: Sequence[str] | None = None,
    forward_events: bool = True,
) -> None:
    """Parse flags, configure logging, run until signalled; exit 1 on startup errors."""
    arg_parser = parser(service=service, description=description, concurrency=concurrency)
    if add_arguments is not None:
        add_arguments(arg_parser)
    options = arg_parser.parse_args(argv)
    sluice_logging.configure(level=options.log_level, encoding=options.log_encoding)
    tune_malloc()  # before any thread allocates: see allocating
    try:
        start_from_env()  # SLUICE_TRACEMALLOC: before the allocations it should see
        # SLUICE_FAILPOINTS (tests only): a typo stops the process here rather
        # than leaving the test it arms without its kill.
        if failpoints.arm_from_env():
            print(f"{service}: failpoints armed: {os.environ[failpoints.ENV]}", file=sys.stderr)
    except ValueError as error:
        print(f"{service}: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    smaller_tls_buffers()  # before the first connection
    try:
        asyncio.run(
            run(
                service=service,
                options=options,
                kinds=kinds,
                setup=setup,
                forward_events=forward_events,
            )
        )
    except (StartupError, ConfigError, KubeError, OSError, ValueError) as error:
        print(f"{service}: {one_line(error)}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        pass
