"""application-controller: expands KubeSphere Applications into HelmReleases and Kustomizations.

Wiring only: the Application controller, and the watches that bring a
child's status change (HelmRelease, Kustomization) and a saved template's
arrival (HelmChart) back to the Application concerned.
"""

from __future__ import annotations

import argparse

from application_controller import applications
from sluice_api import Application, HelmChart, HelmRelease, Kustomization
from sluice_runtime import app
from sluice_runtime.kube.resources import ResourceType

SERVICE = "application-controller"
KINDS = (Application, HelmRelease, Kustomization, HelmChart)
"""Every kind this process reads; startup fails clearly if one is not served."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--requeue-not-ready",
        type=app.duration,
        default=60.0,
        help="how long to wait before looking again at an Application whose children are not "
        "all ready (their changes are watched; this is a safety net), or that waits for a "
        "kubeconfig Secret to be created",
    )


async def setup(runtime: app.Runtime) -> None:
    services = applications.Services(requeue_not_ready=runtime.options.requeue_not_ready)
    app_rt = ResourceType.of_model(Application)
    controller = runtime.controller(applications.reconciler(services))
    # argocd Applications are another controller's: they are never reconciled.
    controller.runner = applications.FluxAppsRunner(controller.runner, services)
    children = applications.child_watchers()
    controller.watch(ResourceType.of_model(HelmRelease), children)
    controller.watch(ResourceType.of_model(Kustomization), children)
    apps = runtime.informers.get(app_rt, selected=True).store
    controller.watch(ResourceType.of_model(HelmChart), applications.template_watchers(apps))


main = app.entry_point(
    service=SERVICE,
    doc=__doc__,
    kinds=KINDS,
    setup=setup,
    concurrency=4,
    add_arguments=add_arguments,
)
"""The console script (`[project.scripts]`)."""


if __name__ == "__main__":
    main()
