"""A controller process from flags to shutdown, shared by all four services.

Each component is an async context (set up, yield, torn down) entered in
order on one AsyncExitStack: API client, event recorder, probe and metrics
servers, informers, leadership, workers, and whatever the service adds (its
file server, its webhook receiver). SIGTERM or SIGINT unwinds the stack in
reverse, letting reconciles in flight finish within `--shutdown-timeout`.
Startup problems a person can fix (bad kubeconfig, unreachable API server,
CRDs not installed, port in use) end in one line on stderr and exit code 1.

One module per part, every name importable from `sluice_runtime.app`:
`flags` (the command line), `runtime` (the components and the `Runtime` a
service's setup wires), `process` (signals, exit codes, the entry point).
"""

from __future__ import annotations

from sluice_runtime.app.flags import (
    add_tenant_arguments,
    default_service_account,
    duration,
    no_cross_namespace_refs,
    open_tenancy,
    parser,
    runtime_namespace,
    size,
    switch,
    version,
    watched_namespace,
)
from sluice_runtime.app.process import entry_point, main, run
from sluice_runtime.app.runtime import Runtime, Setup, StartupError, require_kinds, running

__all__ = [
    "Runtime",
    "Setup",
    "StartupError",
    "add_tenant_arguments",
    "default_service_account",
    "duration",
    "entry_point",
    "main",
    "no_cross_namespace_refs",
    "open_tenancy",
    "parser",
    "require_kinds",
    "run",
    "running",
    "runtime_namespace",
    "size",
    "switch",
    "version",
    "watched_namespace",
]
