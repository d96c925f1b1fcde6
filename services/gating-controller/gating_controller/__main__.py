"""gating-controller: opens and closes Gates for approvals, maintenance windows and freezes.

Wiring only: the Gate controller, with the clock it reads (a test can hand
it another through `components["clock"]`).
"""

from __future__ import annotations

from gating_controller import gating
from sluice_api import Gate
from sluice_runtime import app

SERVICE = "gating-controller"
KINDS = (Gate,)
"""Every kind this process reads; startup fails clearly if one is not served."""


async def setup(runtime: app.Runtime) -> None:
    """Wire the Gate controller."""
    clock = runtime.components.get("clock", gating.system_clock)
    runtime.controller(gating.reconciler(clock))


def main() -> None:
    app.main(
        service=SERVICE,
        description=__doc__.splitlines()[0] if __doc__ else SERVICE,
        kinds=KINDS,
        setup=setup,
        concurrency=2,
    )


if __name__ == "__main__":
    main()
