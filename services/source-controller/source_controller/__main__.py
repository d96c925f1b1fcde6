"""source-controller: turns Git repositories and OCI artifacts into tarballs served over HTTP.

Wiring only: flags, the artifact storage and its file server, and one
controller per kind it reconciles (GitRepository, OCIRepository,
HelmRepository, HelmChart, Bucket, and ArtifactGenerator, whose
ExternalArtifacts it writes).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from sluice_api import (
    ArtifactGenerator,
    Bucket,
    ExternalArtifact,
    Gate,
    GitRepository,
    HelmChart,
    HelmRepository,
    OCIRepository,
)
from sluice_api.meta import parse_duration
from sluice_runtime import app, gatekeeping
from sluice_runtime.artifacts.serving import file_server
from sluice_runtime.artifacts.storage import Storage
from sluice_runtime.endpoints import serving
from sluice_runtime.git import client as gitclient
from sluice_runtime.kube.resources import ResourceType
from source_controller import (
    artifactgenerator,
    bucket,
    charts,
    gitcache,
    gitcontexts,
    gitrepository,
    helmchart,
    helmrepository,
    ocirepository,
)
from source_controller.sources import Limits

SERVICE = "source-controller"
KINDS = (
    GitRepository,
    OCIRepository,
    HelmRepository,
    HelmChart,
    Bucket,
    ExternalArtifact,
    ArtifactGenerator,
    Gate,
)
"""Every kind this process reads; startup fails clearly if one is not served."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--storage-path", default="/data", help="where artifacts are stored")
    parser.add_argument("--storage-addr", default=":9090", help="artifact file server address")
    parser.add_argument(
        "--storage-adv-addr",
        default="",
        help="host[:port] written into artifact URLs "
        "(default: source-controller.$RUNTIME_NAMESPACE.svc.cluster.local.)",
    )
    parser.add_argument("--artifact-retention-records", type=int, default=2)
    app.no_cross_namespace_refs(
        parser, help="ArtifactGenerators may read only sources of their own namespace"
    )
    app.switch(
        parser,
        "--allow-controller-level-workload-identity",
        help="let a Bucket with provider 'aws' and no secretRef sign with this controller's "
        "own AWS credentials (environment, IRSA, Pod Identity, instance role); off, such a "
        "Bucket is Stalled: on a multi-tenant cluster any tenant would borrow them",
    )
    parser.add_argument("--artifact-retention-ttl", default="60s")
    defaults = Limits()
    parser.add_argument(
        "--artifact-max-size",
        type=app.size,
        default=defaults.artifact_max_size,
        help="largest artifact stored, e.g. 512Mi (also bounds OCI layers and their content)",
    )
    parser.add_argument(
        "--artifact-max-files",
        type=int,
        default=defaults.artifact_max_files,
        help="most files a Git checkout may have, or an OCI layer or included artifact unpack to",
    )
    parser.add_argument(
        "--git-checkout-max-size",
        type=app.size,
        default=defaults.checkout_max_size,
        help="largest Git checkout (files, submodules included) and fetched pack, in bytes",
    )
    parser.add_argument(
        "--git-cache-max-size",
        type=app.size,
        default=gitcache.DEFAULT_MAX_SIZE,
        help="bytes of finished Git tarballs kept for GitRepositories of the same commit (0: off)",
    )
    parser.add_argument(
        "--helm-index-max-size",
        type=int,
        default=helmrepository.DEFAULT_INDEX_MAX_SIZE,
        help="largest Helm repository index.yaml fetched, in bytes",
    )
    parser.add_argument(
        "--helm-chart-max-size",
        type=int,
        default=helmrepository.DEFAULT_CHART_MAX_SIZE,
        help="largest chart archive downloaded from a Helm repository, in bytes",
    )


async def setup(runtime: app.Runtime) -> None:
    """Wire storage, its file server, and the source controllers."""
    options = runtime.options
    adv_addr = options.storage_adv_addr or (
        f"source-controller.{app.runtime_namespace()}.svc.cluster.local."
    )
    root = Path(options.storage_path)
    root.mkdir(parents=True, exist_ok=True)
    storage = Storage(
        root,
        advertised_addr=adv_addr,
        retention_records=options.artifact_retention_records,
        retention_ttl=parse_duration(options.artifact_retention_ttl).total_seconds(),
    )
    limits = Limits(
        artifact_max_size=options.artifact_max_size,
        artifact_max_files=options.artifact_max_files,
        checkout_max_size=options.git_checkout_max_size,
    )
    # Only the leader serves: a standby's storage is empty or stale (each
    # replica has its own), and it stays NotReady, so the Service sends
    # downloads to the leader alone (Flux starts its file server the same way).
    runtime.when_leading(serving(file_server(root), options.storage_addr))

    runtime.stack.push_async_callback(gitclient.close)
    gate_rt = ResourceType.of_model(Gate)
    gate_store = runtime.informers.get(gate_rt).store
    git_rt = ResourceType.of_model(GitRepository)
    repositories = runtime.informers.get(git_rt, selected=True).store
    git = runtime.controller(
        gitrepository.reconciler(
            gitcontexts.GitServices(
                storage=storage,
                repositories=repositories,
                gates=gate_store,
                limits=limits,
                cache=gitcache.CommitCache(
                    storage.root / ".cache" / "git", max_size=options.git_cache_max_size
                ),
            )
        )
    )
    git.watch(git_rt, gitrepository.includers_of(repositories), selected=True)
    git.watch(gate_rt, gatekeeping.consumers_of(repositories))

    oci_rt = ResourceType.of_model(OCIRepository)
    oci_repos = runtime.informers.get(oci_rt, selected=True).store
    oci = runtime.controller(ocirepository.reconciler(storage, gates=gate_store, limits=limits))
    oci.watch(gate_rt, gatekeeping.consumers_of(oci_repos))

    helm_repo_rt = ResourceType.of_model(HelmRepository)
    helm_repos = runtime.informers.get(helm_repo_rt, selected=True).store
    helm_repo = runtime.controller(
        helmrepository.reconciler(
            storage,
            gates=gate_store,
            limits=limits,
            index_max_size=options.helm_index_max_size,
        )
    )
    helm_repo.watch(gate_rt, gatekeeping.consumers_of(helm_repos))

    bucket_rt = ResourceType.of_model(Bucket)
    buckets = runtime.informers.get(bucket_rt, selected=True).store
    # The process's copies of buckets (for fetching only changed objects)
    # stay out of the served storage; they are rebuilt after a restart.
    cache_root = Path(tempfile.mkdtemp(prefix="sluice-buckets-"))
    runtime.stack.callback(shutil.rmtree, cache_root, ignore_errors=True)
    bucket_controller = runtime.controller(
        bucket.reconciler(
            storage,
            cache_root=cache_root,
            gates=gate_store,
            limits=limits,
            controller_identity=options.allow_controller_level_workload_identity,
        )
    )
    bucket_controller.watch(gate_rt, gatekeeping.consumers_of(buckets))

    chart_rt = ResourceType.of_model(HelmChart)
    chart_store = runtime.informers.get(chart_rt, selected=True).store
    chart = runtime.controller(
        helmchart.reconciler(
            storage,
            stores=charts.ChartStores(
                helm_repositories=helm_repos, git_repositories=repositories, buckets=buckets
            ),
            gates=gate_store,
            limits=limits,
            chart_max_size=options.helm_chart_max_size,
            index_max_size=options.helm_index_max_size,
        )
    )
    chart.watch(gate_rt, gatekeeping.consumers_of(chart_store))
    chart.watch(helm_repo_rt, helmchart.charts_of(chart_store, "HelmRepository"), selected=True)
    chart.watch(git_rt, helmchart.charts_of(chart_store, "GitRepository"), selected=True)
    chart.watch(bucket_rt, helmchart.charts_of(chart_store, "Bucket"), selected=True)

    external_rt = ResourceType.of_model(ExternalArtifact)
    source_types = {
        "GitRepository": git_rt,
        "OCIRepository": oci_rt,
        "Bucket": bucket_rt,
        "ExternalArtifact": external_rt,
    }
    generator_rt = ResourceType.of_model(ArtifactGenerator)
    generators = runtime.informers.get(generator_rt, selected=True).store
    generator = runtime.controller(
        artifactgenerator.reconciler(
            storage,
            stores={
                kind: runtime.informers.get(rt, selected=kind != "ExternalArtifact").store
                for kind, rt in source_types.items()
            },
            limits=limits,
            no_cross_namespace_refs=options.no_cross_namespace_refs,
        )
    )
    for kind, rt in source_types.items():
        generator.watch(
            rt,
            artifactgenerator.generators_of(generators, kind),
            selected=kind != "ExternalArtifact",
        )
    generator.watch(external_rt, artifactgenerator.owners_of, selected=False)


main = app.entry_point(
    service=SERVICE,
    doc=__doc__,
    kinds=KINDS,
    setup=setup,
    # Fetches wait on registries, Git servers and the API, not on the CPU: on two
    # cores, 10 workers fetched 300 OCI sources 3x faster than 2 (e2e.bench mttp).
    # At 1000 OCI sources three quarters of a reconcile's wall time is its two
    # writes (finalizer, status) waiting on a busy API server; 20 workers had
    # them all Ready in 60% of the time 10 took, at the same CPU and peak
    # memory and with answers no slower (e2e.bench mttp --concurrent 20 20 on a
    # machine loaded by other benchmarks: to be confirmed on a quiet one).
    concurrency=20,
    add_arguments=add_arguments,
)
"""The console script (`[project.scripts]`)."""


if __name__ == "__main__":
    main()
