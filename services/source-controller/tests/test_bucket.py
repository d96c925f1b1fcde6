"""Bucket against a real S3 implementation (moto's server, checking signatures) and the real
API server."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from sluice_api import ArtifactGenerator, ExternalArtifact
from sluice_envtest.chartrepo import CONFIGMAP_TEMPLATE
from sluice_envtest.harness import condition, is_ready, make_secret
from sluice_envtest.pytest_plugin import Cluster
from sluice_envtest.s3server import S3Server
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import SECRET, ResourceType

from .conftest import (
    SourceController,
    served,
    served_files,
    start_source_controller,
    tar_members,
)

BUCKET = ResourceType("source.toolkit.fluxcd.io", "v1", "buckets", "Bucket")
HELMCHART = ResourceType("source.toolkit.fluxcd.io", "v1", "helmcharts", "HelmChart")
GENERATOR = ResourceType.of_model(ArtifactGenerator)
EXTERNAL = ResourceType.of_model(ExternalArtifact)
MANIFEST = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n"


def bucket(name: str, server: S3Server, bucket_name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "Bucket",
        "metadata": {"name": name},
        "spec": {
            "bucketName": bucket_name,
            "endpoint": server.endpoint,
            "insecure": not server.tls,
            "interval": "10m",
            "secretRef": {"name": "s3-creds"},
            **spec,
        },
    }


async def setup(sc: SourceController, server: S3Server, name: str, files: dict[str, str]) -> str:
    """A bucket named after the test's namespace with `files`, and the credentials Secret."""
    bucket_name = f"{name}-{sc.namespace}"[:63]
    server.create_bucket(bucket_name, dict(files))
    await make_secret(sc.client, sc.namespace, "s3-creds", server.secret_data())
    return bucket_name


def flux_revision(server: S3Server, bucket_name: str, keys: list[str]) -> str:
    """Flux's revision for `keys`, from the ETags the server lists (computed independently)."""
    listed = server.client().list_objects_v2(Bucket=bucket_name)["Contents"]
    etags = {o["Key"]: o["ETag"].strip('"') for o in listed}
    lines = "".join(f"{k} {etags[k]}\n" for k in sorted(keys))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


async def test_a_bucket_goes_ready_and_an_unchanged_one_costs_one_listing(
    source_controller: SourceController, s3_server: S3Server
) -> None:
    sc = source_controller
    name = await setup(
        sc,
        s3_server,
        "ready",
        {
            "deploy/app.yaml": MANIFEST,
            "deploy/logo.png": "png",
            "notes.txt": "ignored by .sourceignore",
            ".sourceignore": "*.txt\n",
        },
    )
    await sc.client.create(BUCKET, bucket("app", s3_server, name), namespace=sc.namespace)
    obj = await sc.wait_ready(BUCKET, "app")
    listings = s3_server.listings(name)
    downloads = s3_server.downloads(name)
    assert listings == 1
    assert sorted(downloads) == [".sourceignore", "deploy/app.yaml", "deploy/logo.png"]
    artifact = obj["status"]["artifact"]
    # The index holds what .sourceignore keeps (the .png too: the default
    # exclusions apply to the archive, not the revision, as in Flux).
    assert artifact["revision"] == flux_revision(
        s3_server, name, ["deploy/app.yaml", "deploy/logo.png"]
    )
    assert sorted(await served_files(obj)) == ["deploy/app.yaml"]
    assert (condition(obj, "Ready") or {})["message"] == (
        f"stored artifact for revision '{artifact['revision']}'"
    )
    listings = s3_server.listings(name)  # and the test's own listing

    again = await sc.poke(BUCKET, "app", "unchanged")
    # One listing, no object fetched, the same artifact.
    assert s3_server.listings(name) == listings + 1
    assert s3_server.downloads(name) == downloads
    assert again["status"]["artifact"] == artifact


async def test_a_changed_object_makes_a_new_revision_fetching_only_it(
    source_controller: SourceController, s3_server: S3Server
) -> None:
    sc = source_controller
    name = await setup(sc, s3_server, "change", {"a.yaml": MANIFEST, "b.yaml": MANIFEST})
    await sc.client.create(BUCKET, bucket("app", s3_server, name), namespace=sc.namespace)
    first = (await sc.wait_ready(BUCKET, "app"))["status"]["artifact"]
    fetched = len(s3_server.downloads(name))

    changed = MANIFEST + "data:\n  k: v2\n"
    s3_server.put(name, "b.yaml", changed)
    s3_server.delete(name, "a.yaml")
    obj = await sc.poke(BUCKET, "app", "changed")
    artifact = obj["status"]["artifact"]
    assert artifact["revision"] != first["revision"]
    assert artifact["revision"] == flux_revision(s3_server, name, ["b.yaml"])
    assert s3_server.downloads(name)[fetched:] == ["b.yaml"]
    assert await served_files(obj) == {"b.yaml": changed.encode()}
    await sc.wait_events("app", lambda e: len(e) == 2, reason="NewArtifact")


async def test_a_prefix_limits_the_listing(
    source_controller: SourceController, s3_server: S3Server
) -> None:
    sc = source_controller
    name = await setup(sc, s3_server, "prefix", {"apps/a.yaml": MANIFEST, "other/b.yaml": "x"})
    await sc.client.create(
        BUCKET, bucket("app", s3_server, name, prefix="apps/"), namespace=sc.namespace
    )
    obj = await sc.wait_ready(BUCKET, "app")
    assert sorted(await served_files(obj)) == ["apps/a.yaml"]


async def test_bad_credentials_and_a_missing_bucket_fail_naming_the_problem(
    source_controller: SourceController, s3_server: S3Server
) -> None:
    sc = source_controller
    name = await setup(sc, s3_server, "fail", {"a.yaml": MANIFEST})
    await sc.client.create(BUCKET, bucket("app", s3_server, name), namespace=sc.namespace)
    good = (await sc.wait_ready(BUCKET, "app"))["status"]["artifact"]

    wrong = base64.b64encode(b"not-the-secret-key").decode()
    await sc.client.merge_patch(
        SECRET, "s3-creds", {"data": {"secretkey": wrong}}, namespace=sc.namespace
    )
    await sc.client.merge_patch(
        BUCKET, "app", {"spec": {"interval": "11m"}}, namespace=sc.namespace
    )
    obj = await sc.wait_failed(BUCKET, "app", "BucketOperationFailed")
    message = (condition(obj, "Ready") or {})["message"]
    assert f"bucket '{name}'" in message
    assert "SignatureDoesNotMatch" in message and "spec.secretRef" in message
    assert "not-the-secret-key" not in str(obj)
    assert (condition(obj, "FetchFailed") or {}).get("status") == "True"
    assert obj["status"]["artifact"] == good  # the last artifact stays

    await sc.client.create(
        BUCKET, bucket("missing", s3_server, f"gone-{sc.namespace}"), namespace=sc.namespace
    )
    await make_secret(sc.client, sc.namespace, "right", s3_server.secret_data())
    await sc.client.merge_patch(
        BUCKET, "missing", {"spec": {"secretRef": {"name": "right"}}}, namespace=sc.namespace
    )
    obj = await sc.wait(
        BUCKET,
        "missing",
        lambda o: "does not exist" in ((condition(o, "Ready") or {}).get("message") or ""),
        what="missing bucket reported",
    )
    ready = condition(obj, "Ready") or {}
    assert ready["status"] == "False" and ready["reason"] == "BucketOperationFailed"
    assert f"gone-{sc.namespace}" in ready["message"]


async def test_a_ca_from_cert_secret_ref_is_trusted(
    source_controller: SourceController, s3_server_tls: S3Server
) -> None:
    sc = source_controller
    name = await setup(sc, s3_server_tls, "tls", {"a.yaml": MANIFEST})
    assert s3_server_tls.ca_pem is not None
    await make_secret(sc.client, sc.namespace, "ca", {"ca.crt": s3_server_tls.ca_pem.decode()})
    await sc.client.create(BUCKET, bucket("untrusted", s3_server_tls, name), namespace=sc.namespace)
    await sc.client.create(
        BUCKET,
        bucket("trusted", s3_server_tls, name, certSecretRef={"name": "ca"}),
        namespace=sc.namespace,
    )
    obj = await sc.wait_ready(BUCKET, "trusted")
    assert sorted(await served_files(obj)) == ["a.yaml"]
    failed = await sc.wait_failed(BUCKET, "untrusted", "BucketOperationFailed")
    assert "certificate" in (condition(failed, "Ready") or {})["message"].lower()


async def test_unsupported_providers_sts_and_a_bad_endpoint_are_refused(
    source_controller: SourceController, s3_server: S3Server
) -> None:
    sc = source_controller
    await make_secret(sc.client, sc.namespace, "s3-creds", s3_server.secret_data())
    cases = {
        "gcp": ({"provider": "gcp"}, "spec.provider 'gcp'"),
        "azure": ({"provider": "azure"}, "spec.provider 'azure'"),
        "sts": (
            {"provider": "aws", "sts": {"provider": "aws", "endpoint": "https://sts.example"}},
            "spec.sts",
        ),
        "endpoint": ({"endpoint": "bad endpoint"}, "spec.endpoint 'bad endpoint' is invalid"),
    }
    for name, (spec, _) in cases.items():
        await sc.client.create(
            BUCKET, bucket(name, s3_server, "any-bucket", **spec), namespace=sc.namespace
        )
    for name, (_, named) in cases.items():
        obj = await sc.wait(
            BUCKET,
            name,
            lambda o: (condition(o, "Stalled") or {}).get("status") == "True",
            what="Stalled",
        )
        assert named in (condition(obj, "Ready") or {})["message"]
        assert obj["status"].get("artifact") is None


async def test_a_helm_chart_is_packaged_from_a_chart_directory_in_a_bucket(
    source_controller: SourceController, s3_server: S3Server
) -> None:
    sc = source_controller
    name = await setup(
        sc,
        s3_server,
        "chart",
        {
            "charts/app/Chart.yaml": "apiVersion: v2\nname: app\nversion: 1.2.0\n",
            "charts/app/values.yaml": "greeting: hello\n",
            "charts/app/templates/configmap.yaml": CONFIGMAP_TEMPLATE,
        },
    )
    await sc.client.create(BUCKET, bucket("charts", s3_server, name), namespace=sc.namespace)
    source = (await sc.wait_ready(BUCKET, "charts"))["status"]["artifact"]
    await sc.client.create(
        HELMCHART,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "HelmChart",
            "metadata": {"name": "app"},
            "spec": {
                "chart": "charts/app",
                "sourceRef": {"kind": "Bucket", "name": "charts"},
                "interval": "10m",
                "reconcileStrategy": "Revision",
            },
        },
        namespace=sc.namespace,
    )
    obj = await sc.wait_ready(HELMCHART, "app", timeout=60)
    digest = source["revision"].removeprefix("sha256:")
    assert obj["status"]["artifact"]["revision"] == f"1.2.0+{digest[:12]}"
    assert obj["status"]["observedSourceArtifactRevision"] == source["revision"]
    files = tar_members(await served(obj))
    assert yaml.safe_load(files["app/values.yaml"]) == {"greeting": "hello"}

    # A new object in the bucket is a new source revision, so a new chart version.
    s3_server.put(name, "charts/app/values.yaml", "greeting: hi\n")
    changed = (await sc.poke(BUCKET, "charts", "changed"))["status"]["artifact"]["revision"]
    obj = await sc.wait(
        HELMCHART,
        "app",
        lambda o: (
            o["status"].get("artifact", {}).get("revision")
            == f"1.2.0+{changed.removeprefix('sha256:')[:12]}"
        ),
        what="chart rebuilt from the new bucket revision",
    )
    files = tar_members(await served(obj))
    assert yaml.safe_load(files["app/values.yaml"]) == {"greeting": "hi"}


async def test_spec_ignore_leaves_objects_out_without_fetching_again(
    source_controller: SourceController, s3_server: S3Server
) -> None:
    sc = source_controller
    name = await setup(sc, s3_server, "ignore", {"a.yaml": MANIFEST, "notes.txt": "n"})
    await sc.client.create(BUCKET, bucket("app", s3_server, name), namespace=sc.namespace)
    first = await sc.wait_ready(BUCKET, "app")
    assert sorted(await served_files(first)) == ["a.yaml", "notes.txt"]
    fetched = s3_server.downloads(name)

    await sc.client.merge_patch(
        BUCKET, "app", {"spec": {"ignore": "*.txt\n"}}, namespace=sc.namespace
    )
    obj = await sc.wait(
        BUCKET,
        "app",
        lambda o: (o.get("status") or {}).get("observedIgnore") == "*.txt\n" and is_ready(o),
        what="artifact without notes.txt",
    )
    assert obj["status"]["artifact"]["revision"] == flux_revision(s3_server, name, ["a.yaml"])
    assert sorted(await served_files(obj)) == ["a.yaml"]
    assert s3_server.downloads(name) == fetched


async def test_an_artifact_generator_reads_a_bucket(
    source_controller: SourceController, s3_server: S3Server
) -> None:
    sc = source_controller
    name = await setup(
        sc, s3_server, "gen", {"envs/prod/cm.yaml": MANIFEST, "envs/dev/cm.yaml": "dev"}
    )
    await sc.client.create(BUCKET, bucket("configs", s3_server, name), namespace=sc.namespace)
    source = (await sc.wait_ready(BUCKET, "configs"))["status"]["artifact"]
    await sc.client.create(
        GENERATOR,
        {
            "apiVersion": "source.extensions.fluxcd.io/v1beta1",
            "kind": "ArtifactGenerator",
            "metadata": {"name": "from-bucket"},
            "spec": {
                "sources": [{"alias": "config", "kind": "Bucket", "name": "configs"}],
                "artifacts": [
                    {
                        "name": "prod",
                        "revision": "@config",
                        "copy": [{"from": "@config/envs/prod/cm.yaml", "to": "@artifact/env.yaml"}],
                    }
                ],
            },
        },
        namespace=sc.namespace,
    )
    await sc.wait_ready(GENERATOR, "from-bucket")
    prod = await sc.get(EXTERNAL, "prod")
    assert prod["status"]["artifact"]["revision"] == source["revision"]
    assert await served_files(prod) == {"env.yaml": MANIFEST.encode()}


async def test_an_empty_bucket_gives_an_empty_artifact(
    source_controller: SourceController, s3_server: S3Server
) -> None:
    sc = source_controller
    name = await setup(sc, s3_server, "empty", {})
    await sc.client.create(BUCKET, bucket("empty", s3_server, name), namespace=sc.namespace)
    obj = await sc.wait_ready(BUCKET, "empty")
    artifact = obj["status"]["artifact"]
    # Flux's revision of an empty index: the sha256 of no lines at all.
    assert artifact["revision"] == "sha256:" + hashlib.sha256(b"").hexdigest()
    assert not await served_files(obj)


def borrowed_identity(name: str, server: S3Server, bucket_name: str) -> dict[str, Any]:
    """`provider: aws` with no secretRef: signed with whatever the controller holds."""
    obj = bucket(name, server, bucket_name, provider="aws")
    del obj["spec"]["secretRef"]
    return obj


@pytest.fixture
def controller_aws_credentials(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller's own AWS identity, in its environment (as IRSA or a node role would
    give it one): the S3 server's valid keys, so a borrowed signature would succeed."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.mark.usefixtures("controller_aws_credentials")
async def test_a_bucket_cannot_borrow_the_controllers_aws_identity(
    source_controller: SourceController, s3_server: S3Server
) -> None:
    sc = source_controller
    name = await setup(sc, s3_server, "borrow", {"deploy/app.yaml": MANIFEST})
    listings = s3_server.listings(name)
    await sc.client.create(
        BUCKET, borrowed_identity("borrow", s3_server, name), namespace=sc.namespace
    )
    obj = await sc.wait(
        BUCKET,
        "borrow",
        lambda o: (condition(o, "Stalled") or {}).get("status") == "True",
        what="Stalled",
    )
    message = (condition(obj, "Ready") or {})["message"]
    assert message.startswith("spec.provider 'aws' without spec.secretRef would sign requests")
    assert "--allow-controller-level-workload-identity" in message
    assert obj["status"].get("artifact") is None
    # Refused before any request: nothing was signed with the controller's keys.
    assert s3_server.listings(name) == listings


@pytest.mark.usefixtures("controller_aws_credentials")
async def test_controller_level_identity_is_lent_when_the_operator_enables_it(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path, s3_server: S3Server
) -> None:
    async with start_source_controller(
        cluster, kube, namespace, tmp_path, "--allow-controller-level-workload-identity"
    ) as sc:
        name = await setup(sc, s3_server, "lent", {"deploy/app.yaml": MANIFEST})
        await sc.client.create(
            BUCKET, borrowed_identity("lent", s3_server, name), namespace=sc.namespace
        )
        obj = await sc.wait_ready(BUCKET, "lent")
        assert sorted(await served_files(obj)) == ["deploy/app.yaml"]
