"""kustomize-controller: builds artifacts with kustomize and applies them with server-side apply.

Wiring only: flags, the shared runtime, and this controller's kinds.
Until its reconcilers land (see the issues), it watches its kinds so that
its cache, probes and metrics are live.
"""

from __future__ import annotations

from sluice_api import Kustomization
from sluice_runtime import app
from sluice_runtime.kube.resources import ResourceType

SERVICE = "kustomize-controller"
KINDS = (Kustomization,)


async def setup(runtime: app.Runtime) -> None:
    for kind in KINDS:
        runtime.informers.get(ResourceType.of_model(kind), selected=True)


def main() -> None:
    app.main(
        service=SERVICE,
        description=__doc__.splitlines()[0] if __doc__ else SERVICE,
        kinds=KINDS,
        setup=setup,
        concurrency=4,
    )


if __name__ == "__main__":
    main()
