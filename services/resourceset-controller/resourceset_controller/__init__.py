# First, before anything imports structlog: see sluice_runtime.lean_imports.
import sluice_runtime.lean_imports  # noqa: F401
