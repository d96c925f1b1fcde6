"""HelmChart spec.verify: charts of an OCI HelmRepository are checked with cosign public keys
before they are stored; a chart from anywhere else cannot be verified and stalls."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from sluice_envtest.chartrepo import helm, write_chart
from sluice_envtest.harness import condition, make_secret
from sluice_envtest.registry import OciRegistry
from sluice_runtime.kube.client import JSON
from sluice_runtime.kube.resources import ResourceType

from .conftest import SourceController
from .cosignfiles import key_pair, sign

HELMREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "helmrepositories", "HelmRepository")
HELMCHART = ResourceType("source.toolkit.fluxcd.io", "v1", "helmcharts", "HelmChart")
CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"


def push_chart(registry: OciRegistry, repository: str, version: str) -> str:
    """Push chart `app` at `version` to `repository/app` as `helm push` lays it out; its digest."""
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        chart = write_chart(work, "app", version)
        helm("package", str(chart), "--destination", str(work / "out"), cwd=work)
        return registry.push_artifact(
            f"{repository}/app",
            version,
            layer=(work / "out" / f"app-{version}.tgz").read_bytes(),
            media_type=CHART_LAYER,
            config_media_type="application/vnd.cncf.helm.config.v1+json",
        )


async def create(sc: SourceController, kind: ResourceType, name: str, spec: JSON) -> None:
    obj = {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": {"name": name},
           "spec": spec}  # fmt: skip
    await sc.client.create(kind, obj, namespace=sc.namespace)


def chart_spec(source: dict[str, str], **spec: Any) -> JSON:
    return {"chart": "app", "version": "1.x", "sourceRef": source, "interval": "10m", **spec}


def has_verified(status: str) -> Any:
    return lambda obj: (condition(obj, "SourceVerified") or {}).get("status") == status


async def test_a_signed_chart_is_verified_and_an_unsigned_one_keeps_the_last(
    source_controller: SourceController, oci_registry: OciRegistry
) -> None:
    sc = source_controller
    private, public = key_pair()
    repository = f"{sc.namespace}/charts"
    digest = push_chart(oci_registry, repository, "1.0.0")
    reference = f"{oci_registry.host}/{repository}/app"
    oci_registry.push_cosign_signature(
        f"{repository}/app", digest, payloads=[sign(private, reference, digest)]
    )
    await make_secret(sc.client, sc.namespace, "keys", {"cosign.pub": public})
    url = oci_registry.oci_url(repository)
    await create(sc, HELMREPO, "oci", {"url": url, "type": "oci", "insecure": True,
                                       "interval": "10m"})  # fmt: skip
    verify = {"provider": "cosign", "secretRef": {"name": "keys"}}
    source = {"kind": "HelmRepository", "name": "oci"}
    await create(sc, HELMCHART, "app", chart_spec(source, verify=verify))
    obj = await sc.wait_ready(HELMCHART, "app", timeout=60)
    assert obj["status"]["artifact"]["revision"] == "1.0.0"
    verified = condition(obj, "SourceVerified")
    assert verified is not None and verified["status"] == "True", verified
    assert "verified signature of revision 1.0.0 with key 'cosign.pub'" in verified["message"]

    # A newer, unsigned version is never stored: the verified one stays.
    unsigned = push_chart(oci_registry, repository, "1.1.0")
    await sc.poke(HELMCHART, "app", "1")
    obj = await sc.wait(HELMCHART, "app", has_verified("False"), what="SourceVerified=False")
    verified = condition(obj, "SourceVerified")
    assert verified is not None and verified["reason"] == "VerificationError"
    assert f"no signature found for '{unsigned}'" in verified["message"], verified
    assert (condition(obj, "Ready") or {}).get("status") == "False"
    assert obj["status"]["artifact"]["revision"] == "1.0.0", "last verified chart kept"
    assert not list(sc.storage.rglob("app-1.1.0*")), "the unsigned chart is not stored"


@pytest.mark.parametrize(
    ("source", "expect"),
    [
        pytest.param(
            {"kind": "GitRepository", "name": "git"},
            "spec.verify is not supported for a chart from a GitRepository",
            id="git",
        ),
        pytest.param(
            {"kind": "HelmRepository", "name": "http"},
            "spec.verify is not supported for a chart from a HelmRepository of type 'default'",
            id="http-repository",
        ),
    ],
)
async def test_a_chart_that_has_no_signature_to_check_stalls(
    source_controller: SourceController, source: dict[str, str], expect: str
) -> None:
    sc = source_controller
    if source["name"] == "http":
        # The refusal comes before the index is read: the URL need not answer.
        await create(sc, HELMREPO, "http", {"url": "http://127.0.0.1:1/charts",
                                            "interval": "10m"})  # fmt: skip
    verify = {"provider": "cosign", "secretRef": {"name": "keys"}}
    await create(sc, HELMCHART, "app", chart_spec(source, verify=verify))
    obj = await sc.wait(HELMCHART, "app", has_verified("False"), what="SourceVerified=False")
    assert (condition(obj, "Stalled") or {}).get("status") == "True"
    assert expect in (condition(obj, "SourceVerified") or {})["message"]
    assert "artifact" not in obj["status"]


async def test_verify_set_on_a_stored_chart_checks_it_before_keeping_it(
    source_controller: SourceController, oci_registry: OciRegistry
) -> None:
    """The chart was stored unverified; setting spec.verify must not pass it as verified
    because its version is already in storage."""
    sc = source_controller
    private, public = key_pair()
    _, other = key_pair()
    repository = f"{sc.namespace}/charts"
    digest = push_chart(oci_registry, repository, "1.0.0")
    reference = f"{oci_registry.host}/{repository}/app"
    oci_registry.push_cosign_signature(
        f"{repository}/app", digest, payloads=[sign(private, reference, digest)]
    )
    await make_secret(sc.client, sc.namespace, "theirs", {"cosign.pub": other})
    await make_secret(sc.client, sc.namespace, "ours", {"cosign.pub": public})
    url = oci_registry.oci_url(repository)
    await create(sc, HELMREPO, "oci", {"url": url, "type": "oci", "insecure": True,
                                       "interval": "10m"})  # fmt: skip
    await create(sc, HELMCHART, "app", chart_spec({"kind": "HelmRepository", "name": "oci"}))
    obj = await sc.wait_ready(HELMCHART, "app", timeout=60)
    assert condition(obj, "SourceVerified") is None

    for secret, status in (("theirs", "False"), ("ours", "True")):
        verify = {"provider": "cosign", "secretRef": {"name": secret}}
        await sc.client.merge_patch(
            HELMCHART, "app", {"spec": {"verify": verify}}, namespace=sc.namespace
        )
        obj = await sc.wait(HELMCHART, "app", has_verified(status), what=f"verified {status}")
    assert "with key 'cosign.pub'" in condition(obj, "SourceVerified")["message"]  # type: ignore[index]
    assert (await sc.wait_ready(HELMCHART, "app"))["status"]["artifact"]["revision"] == "1.0.0"
