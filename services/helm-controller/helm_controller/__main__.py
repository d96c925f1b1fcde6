"""helm-controller: releases HelmRelease charts with the real helm.

Wiring only: flags, the helm binary check, the caches a HelmRelease reads
(HelmCharts, other HelmReleases for dependsOn, Gates), and the watches that
make it react to a new chart artifact, a dependency becoming ready or a gate
opening.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import aiohttp
import structlog
from opentelemetry.metrics import CallbackOptions, Observation

from helm_controller import contexts, helmrelease, watching
from sluice_api import ExternalArtifact, Gate, HelmChart, HelmRelease, OCIRepository
from sluice_runtime import app, gatekeeping, resolving
from sluice_runtime.helming import HelmMissing, KubeCache, helm_binary, running
from sluice_runtime.kube.connecting import kubeconfig_path
from sluice_runtime.kube.impersonation import TargetClusters
from sluice_runtime.kube.resources import ResourceType
from sluice_runtime.observing.metrics import meter

log = structlog.get_logger(__name__)

SERVICE = "helm-controller"
KINDS = (HelmRelease, HelmChart, OCIRepository, ExternalArtifact, Gate)
"""Every kind this process reads; startup fails clearly if one is not served."""


_observing_helm = False


def observe_helm_runs() -> None:
    """`sluice_helm_runs_total` and `sluice_helm_seconds_total` by command: how many
    helm processes the releases took, and how long they ran (the benchmark's profile).
    Once per process: tests start the controller several times in one."""
    global _observing_helm
    if _observing_helm:
        return
    _observing_helm = True

    def runs(_: CallbackOptions) -> Iterable[Observation]:
        for command, count in list(running.RUNS.items()):
            yield Observation(count, {"command": command})

    def seconds(_: CallbackOptions) -> Iterable[Observation]:
        for command, total in list(running.SECONDS.items()):
            yield Observation(total, {"command": command})

    helm_meter = meter(SERVICE)
    helm_meter.create_observable_counter(
        "sluice_helm_runs_total", callbacks=[runs], description="helm processes run, by command."
    )
    helm_meter.create_observable_counter(
        "sluice_helm_seconds_total",
        callbacks=[seconds],
        unit="s",
        description="Wall time of helm processes, start to exit, by command.",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    app.add_tenant_arguments(parser, kind="HelmRelease", remote="remote releases")


async def setup(runtime: app.Runtime) -> None:
    """Wire the HelmRelease controller; it also watches HelmCharts, OCIRepositories and Gates."""
    options = runtime.options
    try:
        helm = helm_binary()
    except HelmMissing as error:
        raise app.StartupError(str(error)) from None
    log.info("helm", binary=str(helm))
    observe_helm_runs()
    session = aiohttp.ClientSession(connector=resolving.connector())  # chart hosts
    runtime.stack.push_async_callback(session.close)

    # No default identity here: the HelmRelease steps impersonate per call.
    targets = TargetClusters(
        runtime.client,
        allow_kubeconfig_exec=options.insecure_kubeconfig_exec,
        allow_kubeconfig_insecure_tls=options.insecure_kubeconfig_tls,
    )
    runtime.stack.push_async_callback(targets.close)

    cache_root = Path(tempfile.mkdtemp(prefix="helm-kube-cache-"))
    runtime.stack.callback(shutil.rmtree, cache_root, ignore_errors=True)

    hr_rt = ResourceType.of_model(HelmRelease)
    chart_rt = ResourceType.of_model(HelmChart)
    gate_rt = ResourceType.of_model(Gate)
    oci_rt = ResourceType.of_model(OCIRepository)
    external_rt = ResourceType.of_model(ExternalArtifact)
    hrs = runtime.informers.get(hr_rt, selected=True).store
    services = contexts.Services(
        session=session,
        releases=hrs,
        charts=runtime.informers.get(chart_rt).store,
        gates=runtime.informers.get(gate_rt).store,
        oci_repositories=runtime.informers.get(oci_rt).store,
        external_artifacts=runtime.informers.get(external_rt).store,
        # The file the controller's own client loaded (--kubeconfig, $KUBECONFIG,
        # ~/.kube/config), or None in a pod: helm reaches the same cluster as it.
        kubeconfig=kubeconfig_path(options.kubeconfig),
        default_service_account=options.default_service_account or None,
        requeue_dependency=options.requeue_dependency,
        no_cross_namespace_refs=options.no_cross_namespace_refs,
        targets=targets,
        kube_cache=KubeCache(cache_root),
    )
    controller = runtime.controller(helmrelease.reconciler(services))
    controller.watch(chart_rt, watching.chart_watchers(hrs))
    controller.watch(oci_rt, watching.chart_watchers(hrs, "OCIRepository"))
    controller.watch(external_rt, watching.chart_watchers(hrs, "ExternalArtifact"))
    controller.watch(hr_rt, watching.dependent_watchers(hrs), selected=True)
    controller.watch(gate_rt, gatekeeping.consumers_of(hrs))


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
