"""A controller starts without the dependencies only some features need (issue 19).

Each module below costs a controller several MiB resident from the moment
it is imported, and is needed only by a feature a process may never use
(Bucket sources, cosign verification, CEL expressions, non-ASCII slugs) or
by nothing a controller does (rich, the CLI's). Each controller's entry
module is imported in a fresh interpreter, as `python -m <controller>`
does, and what it loaded is compared with what it must not load.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from sluice_envtest.measuring import Started, run_fresh

CONTROLLERS = (
    "source_controller",
    "kustomize_controller",
    "helm_controller",
    "notification_controller",
    "gating_controller",
    "resourceset_controller",
    "application_controller",
)

NEVER = (
    "rich",  # structlog's pretty tracebacks; see sluice_runtime.lean_imports
    "pygments",  # through rich
    "kubernetes_asyncio.client.api",  # the generated API classes; see kube.transport
    "hypothesis",  # test-only
    "pytest",
    "moto",
)
"""Modules no controller may load at startup."""

ON_FIRST_USE = (
    "botocore",  # Bucket sources
    "aiobotocore",
    "cryptography",  # OCIRepository spec.verify
    "celpy",  # healthCheckExprs, ResourceSet readyExpr
    "lark",  # through celpy
    "text_unidecode",  # slugify of non-ASCII text
    "oras",  # the first OCI registry call; see oci.registry
    "requests",  # through oras
)
"""Modules a controller loads when a feature is first used, not at startup."""


@pytest.fixture(scope="module")
def loaded_at_startup() -> dict[str, Started]:
    """Per controller, what importing `<controller>.__main__` loads.

    One fresh interpreter each, started together so that they import side by side.
    """
    runs = [["-c", f"import {controller}.__main__"] for controller in CONTROLLERS]
    return dict(zip(CONTROLLERS, run_fresh(*runs), strict=True))


@pytest.mark.parametrize("controller", [pytest.param(c, id=c) for c in CONTROLLERS])
def test_a_controller_starts_without_heavy_optional_modules(
    controller: str, loaded_at_startup: dict[str, Started]
) -> None:
    started = loaded_at_startup[controller]
    assert started.returncode == 0, f"importing {controller}.__main__ failed: {started.stderr}"
    # The entry module itself loaded: the subprocess imported what it should.
    assert f"{controller}.__main__" in started.modules
    assert "structlog" in started.modules
    assert started.among((*NEVER, *ON_FIRST_USE)) == []


def test_structlog_loaded_without_rich_leaves_rich_importable() -> None:
    """The `sluice` command still has rich after the runtime has loaded structlog."""
    script = (
        "import sys, sluice_runtime.lean_imports, structlog.dev; "
        "assert structlog.dev.rich is None, 'structlog saw rich'; "
        "assert 'rich' not in sys.modules; "
        "import rich.console; print(rich.console.Console.__name__)"
    )
    answer = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert answer.stdout.strip() == "Console"
