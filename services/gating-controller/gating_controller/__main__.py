"""gating-controller: opens and closes Gates for approvals, maintenance windows and freezes.

Wiring only: the Gate controller, with the clock it reads (a test wires it
with another through `setup_with`).
"""

from __future__ import annotations

from gating_controller import gate
from sluice_api import Gate
from sluice_runtime import app

SERVICE = "gating-controller"
KINDS = (Gate,)
"""Every kind this process reads; startup fails clearly if one is not served."""


def setup_with(clock: gate.Clock) -> app.Setup:
    """The wiring, with the clock the Gate controller reads."""

    async def setup(runtime: app.Runtime) -> None:
        runtime.controller(gate.reconciler(clock))

    return setup


setup = setup_with(gate.system_clock)


main = app.entry_point(service=SERVICE, doc=__doc__, kinds=KINDS, setup=setup, concurrency=2)
"""The console script (`[project.scripts]`)."""


if __name__ == "__main__":
    main()
