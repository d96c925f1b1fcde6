"""resourceset-controller: Flux Operator's ResourceSet and ResourceSetInputProvider.

Wiring only: the provider controller (exports input sets), the ResourceSet
controller (renders and applies them), and the watch that makes a
ResourceSet react within seconds to a provider exporting a new revision.
"""

from __future__ import annotations

import argparse

import aiohttp

from resourceset_controller import contexts, providers, resourceset
from sluice_api import ResourceSet, ResourceSetInputProvider
from sluice_runtime import app, gotemplate, resolving
from sluice_runtime.git import client as gitclient
from sluice_runtime.kube.discovery import RestMapper
from sluice_runtime.kube.resources import ResourceType

SERVICE = "resourceset-controller"
KINDS = (ResourceSet, ResourceSetInputProvider)
"""Every kind this process reads; startup fails clearly if one is not served."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--requeue-dependency",
        type=app.duration,
        default=5.0,
        help="how long to wait before looking again at a dependency that is not ready",
    )
    app.no_cross_namespace_refs(parser, help="refuse dependsOn objects in other namespaces")
    app.default_service_account(parser, kind="ResourceSet")
    parser.add_argument(
        "--template-max-steps",
        type=int,
        default=gotemplate.DEFAULT_MAX_STEPS,
        help="the step budget of one ResourceSet's template renders together (nodes "
        "executed, range iterations, calls and what they read); past it the ResourceSet "
        "is Stalled naming the budget",
    )


async def setup(runtime: app.Runtime) -> None:
    """Wire both controllers; ResourceSets also watch providers."""
    session = aiohttp.ClientSession(connector=resolving.connector())  # provider APIs
    runtime.stack.push_async_callback(session.close)
    runtime.stack.push_async_callback(gitclient.close)  # warm git workers, listing connections
    rset_rt = ResourceType.of_model(ResourceSet)
    provider_rt = ResourceType.of_model(ResourceSetInputProvider)
    runtime.controller(providers.reconciler(providers.Services(session=session)))
    rsets = runtime.informers.get(rset_rt, selected=True).store
    services = contexts.Services(
        client=runtime.client,
        providers=runtime.informers.get(provider_rt).store,
        mapper=RestMapper(runtime.client),
        requeue_dependency=runtime.options.requeue_dependency,
        default_service_account=runtime.options.default_service_account or None,
        no_cross_namespace_refs=runtime.options.no_cross_namespace_refs,
        template_max_steps=runtime.options.template_max_steps,
    )
    controller = runtime.controller(resourceset.reconciler(services))
    controller.watch(provider_rt, resourceset.provider_watchers(rsets))


def main() -> None:
    app.main(
        service=SERVICE,
        description=__doc__.splitlines()[0] if __doc__ else SERVICE,
        kinds=KINDS,
        setup=setup,
        concurrency=4,
        add_arguments=add_arguments,
    )


if __name__ == "__main__":
    main()
