"""What every source kind refuses: API fields accepted but not implemented.

A field that is ignored reads as a promise kept (`spec.verify` ignored puts
unsigned content on the cluster as if verified), so every kind stalls on
such a field, with a message naming it, and produces no artifact.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from sluice_envtest.chartrepo import helm, write_chart
from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.harness import condition, make_secret
from sluice_envtest.registry import OciRegistry
from sluice_envtest.s3server import S3Server
from sluice_runtime.kube.client import JSON
from sluice_runtime.kube.resources import ResourceType
from source_controller.sources import unsupported_identity

from .conftest import GITREPO, MANIFEST, OCIREPO, SourceController, gitrepo, ocirepo, seeded

HELMREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "helmrepositories", "HelmRepository")
HELMCHART = ResourceType("source.toolkit.fluxcd.io", "v1", "helmcharts", "HelmChart")
BUCKET = ResourceType("source.toolkit.fluxcd.io", "v1", "buckets", "Bucket")


async def make_bucket(sc: SourceController, name: str, s3_server: S3Server, **spec: Any) -> None:
    """A Bucket of a real S3 bucket holding one manifest, with its credentials Secret."""
    bucket_name = f"{name}-{sc.namespace}"[:63]
    s3_server.create_bucket(bucket_name, {"app.yaml": MANIFEST})
    await make_secret(sc.client, sc.namespace, f"{name}-creds", s3_server.secret_data())
    bucket_spec = {
        "bucketName": bucket_name,
        "endpoint": s3_server.endpoint,
        "insecure": True,
        "interval": "10m",
        "secretRef": {"name": f"{name}-creds"},
        **spec,
    }
    obj = {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "Bucket",
        "metadata": {"name": name},
        "spec": bucket_spec,
    }
    await sc.client.create(BUCKET, obj, namespace=sc.namespace)


async def make_oci_chart(
    sc: SourceController, name: str, oci_registry: OciRegistry, **spec: Any
) -> ResourceType:
    """A HelmChart of a real chart pushed to an OCI HelmRepository, as `helm push` lays it out."""
    repository = f"{sc.namespace}/charts"
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        chart = write_chart(work, "app", "1.0.0")
        helm("package", str(chart), "--destination", str(work / "out"), cwd=work)
        oci_registry.push_artifact(
            f"{repository}/app",
            "1.0.0",
            layer=(work / "out" / "app-1.0.0.tgz").read_bytes(),
            media_type="application/vnd.cncf.helm.chart.content.v1.tar+gzip",
            config_media_type="application/vnd.cncf.helm.config.v1+json",
        )
    url = oci_registry.oci_url(repository)
    helmrepository = {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "HelmRepository",
        "metadata": {"name": f"{name}-repo"},
        "spec": {"url": url, "type": "oci", "insecure": True, "interval": "10m"},
    }
    await sc.client.create(HELMREPO, helmrepository, namespace=sc.namespace)
    chart_spec = {
        "chart": "app",
        "version": "1.0.0",
        "sourceRef": {"kind": "HelmRepository", "name": f"{name}-repo"},
        "interval": "10m",
        **spec,
    }
    obj = {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "HelmChart",
        "metadata": {"name": name},
        "spec": chart_spec,
    }
    await sc.client.create(HELMCHART, obj, namespace=sc.namespace)
    return HELMCHART


async def make_source(
    sc: SourceController,
    kind: str,
    name: str,
    git_http: GitHttpServer,
    oci_registry: OciRegistry,
    **spec: Any,
) -> ResourceType:
    """A source of `kind` that would become Ready were it not for `spec`."""
    if kind == "HelmChart":
        return await make_oci_chart(sc, name, oci_registry, **spec)
    if kind == "GitRepository":
        seeded(git_http, f"{name}-{sc.namespace}")
        url = git_http.url(f"{name}-{sc.namespace}")
        await sc.client.create(
            GITREPO, gitrepo(name, url, ref={"branch": "main"}, **spec), namespace=sc.namespace
        )
        return GITREPO
    repository = f"{sc.namespace}/{name}"
    oci_registry.push_artifact(repository, "v1", files={"app.yaml": MANIFEST})
    obj = ocirepo(name, oci_registry.oci_url(repository), insecure=True, ref={"tag": "v1"}, **spec)
    await sc.client.create(OCIREPO, obj, namespace=sc.namespace)
    return OCIREPO


def stalled(obj: JSON) -> bool:
    return (condition(obj, "Stalled") or {}).get("status") == "True"


VERIFY = {
    "GitRepository": {"mode": "HEAD", "secretRef": {"name": "keys"}},
    "OCIRepository": {"provider": "cosign"},
    "HelmChart": {"provider": "cosign"},
}


@pytest.mark.parametrize("kind", ["OCIRepository", "HelmChart"])
async def test_a_source_to_verify_stalls_and_stores_nothing(
    source_controller: SourceController,
    git_http: GitHttpServer,
    oci_registry: OciRegistry,
    kind: str,
) -> None:
    sc = source_controller
    rt = await make_source(sc, kind, "signed", git_http, oci_registry, verify=VERIFY[kind])
    obj = await sc.wait(rt, "signed", stalled, what="Stalled")
    ready = condition(obj, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert ready["reason"] == "VerificationError"
    assert "spec.verify" in ready["message"] and "not supported" in ready["message"]
    verified = condition(obj, "SourceVerified")
    assert verified is not None and verified["status"] == "False"
    assert "artifact" not in obj["status"]
    stored = [*sc.storage.rglob("*.tar.gz"), *sc.storage.rglob("*.tgz")]
    assert not stored, "nothing of an unverified source is stored"

    # The refusal is the field's alone: without it the same source goes Ready.
    await sc.client.merge_patch(rt, "signed", {"spec": {"verify": None}}, namespace=sc.namespace)
    obj = await sc.wait_ready(rt, "signed", timeout=60)
    assert condition(obj, "SourceVerified") is None


@pytest.mark.parametrize("kind", ["GitRepository", "OCIRepository", "Bucket"])
async def test_a_source_behind_a_proxy_stalls_instead_of_going_direct(
    source_controller: SourceController,
    git_http: GitHttpServer,
    oci_registry: OciRegistry,
    request: pytest.FixtureRequest,
    kind: str,
) -> None:
    sc = source_controller
    proxy = {"proxySecretRef": {"name": "proxy"}}
    if kind == "Bucket":
        await make_bucket(sc, "proxied", request.getfixturevalue("s3_server"), **proxy)
        rt = BUCKET
    else:
        rt = await make_source(sc, kind, "proxied", git_http, oci_registry, **proxy)
    obj = await sc.wait(rt, "proxied", stalled, what="Stalled")
    ready = condition(obj, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert "spec.proxySecretRef is not supported" in ready["message"]
    assert "artifact" not in obj["status"]


class _Spec:
    def __init__(self, provider: str | None = None, service_account_name: str | None = None):
        self.provider = provider
        self.service_account_name = service_account_name


@pytest.mark.parametrize(
    ("kind", "spec", "problem"),
    [
        pytest.param("GitRepository", _Spec(), None, id="git-plain"),
        pytest.param("GitRepository", _Spec("generic"), None, id="git-generic"),
        pytest.param("GitRepository", _Spec("github"),
                     "spec.provider 'github' (GitHub App authentication)", id="git-github"),
        pytest.param("GitRepository", _Spec("azure"),
                     "spec.provider 'azure' (workload identity authentication)", id="git-azure"),
        pytest.param("GitRepository", _Spec(service_account_name="reader"),
                     "spec.serviceAccountName (the service account's identity or pull secrets)",
                     id="git-service-account"),
        pytest.param("OCIRepository", _Spec("generic"), None, id="oci-generic"),
        pytest.param("OCIRepository", _Spec("aws"),
                     "spec.provider 'aws' (registry login by workload identity)", id="oci-aws"),
        pytest.param("OCIRepository", _Spec("generic", "puller"),
                     "spec.serviceAccountName (the service account's identity or pull secrets)",
                     id="oci-service-account"),
        pytest.param("HelmChart", _Spec(), None, id="other-kinds-have-their-own-checks"),
    ],
)  # fmt: skip
def test_identity_fields_are_named(kind: str, spec: _Spec, problem: str | None) -> None:
    assert unsupported_identity(kind, spec) == problem


@pytest.mark.parametrize(
    ("kind", "spec", "field"),
    [
        pytest.param("GitRepository", {"provider": "github"}, "spec.provider 'github'", id="git"),
        pytest.param("OCIRepository", {"serviceAccountName": "puller"}, "spec.serviceAccountName",
                     id="oci"),
    ],
)  # fmt: skip
async def test_a_source_with_an_identity_it_cannot_use_stalls(
    source_controller: SourceController,
    git_http: GitHttpServer,
    oci_registry: OciRegistry,
    kind: str,
    spec: dict[str, Any],
    field: str,
) -> None:
    sc = source_controller
    rt = await make_source(sc, kind, "identity", git_http, oci_registry, **spec)
    obj = await sc.wait(rt, "identity", stalled, what="Stalled")
    ready = condition(obj, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert ready["message"].startswith(f"{field} ")
    assert "is not supported by this version of Sluice" in ready["message"]
    assert "artifact" not in obj["status"]
