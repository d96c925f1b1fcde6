"""Charts pushed with `helm push` to the test registry, released from an OCI
HelmRepository (through the HelmChart it makes) and from an OCIRepository
(`spec.chartRef`)."""

from __future__ import annotations

import base64
import re
import urllib.request
from pathlib import Path

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from sluice_api.source import ExternalArtifact
from sluice_envtest.chartrepo import CONFIGMAP_TEMPLATE, helm, write_chart
from sluice_envtest.harness import condition, make_secret
from sluice_envtest.registry import OciRegistry
from sluice_runtime.kube.resources import ResourceType
from source_controller.cosigning import simple_signing_payload

from .conftest import CONFIG_MAP, HELMCHART, HELMRELEASE, HELMREPO, HelmDelivery

OCIREPO = ResourceType("source.toolkit.fluxcd.io", "v1beta2", "ocirepositories", "OCIRepository")
EXTERNAL = ResourceType.of_model(ExternalArtifact)
CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
# A chart version with build metadata (`+`) is no label value: charts write it
# with `_`, as `helm create`'s helpers do.
TEMPLATES = {
    "configmap.yaml": CONFIGMAP_TEMPLATE.replace(
        "{{ .Chart.Version }}\n", '{{ .Chart.Version | replace "+" "_" }}\n', 1
    )
}


def push_chart(
    registry: OciRegistry, repository: str, work: Path, version: str, **chart: object
) -> str:
    """`helm push` chart `app` at `version` to oci://<registry>/<repository>/app."""
    chart.setdefault("templates", TEMPLATES)
    source = write_chart(work / "src" / version, "app", version, **chart)  # type: ignore[arg-type]
    out = work / "packages"
    helm("package", str(source), "--destination", str(out), cwd=work)
    pushed = helm(
        "push",
        str(out / f"app-{version}.tgz"),
        registry.oci_url(repository),
        "--plain-http",
        cwd=work,
    )
    return pushed


def manifest_digest(registry: OciRegistry, repository: str, tag: str) -> str:
    """The digest the registry gives the manifest under `tag` (what cosign signs)."""
    request = urllib.request.Request(
        f"http://{registry.host}/v2/{repository}/manifests/{tag}",
        method="HEAD",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - test registry
        return str(answer.headers["Docker-Content-Digest"])


async def test_a_chart_from_an_oci_helm_repository_is_released(
    helm_delivery: HelmDelivery, oci_registry: OciRegistry, tmp_path: Path
) -> None:
    d = helm_delivery
    ns = d.namespace
    push_chart(oci_registry, f"{ns}/charts", tmp_path, "1.0.0")
    push_chart(oci_registry, f"{ns}/charts", tmp_path, "1.1.0")
    push_chart(oci_registry, f"{ns}/charts", tmp_path, "2.0.0")
    await d.kube.create(
        HELMREPO,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "HelmRepository",
            "metadata": {"name": "charts"},
            "spec": {
                "type": "oci",
                "url": oci_registry.oci_url(f"{ns}/charts"),
                "insecure": True,
                "interval": "1h",
            },
        },
        namespace=ns,
    )
    await d.helm_release("web", version="1.x", values={"greeting": "from-oci"})
    obj = await d.observe.wait_ready(HELMRELEASE, "web", timeout=60)
    assert condition(obj, "Ready")["message"] == (  # type: ignore[index]
        f"Helm install succeeded for release {ns}/web.v1 with chart app@1.1.0"
    )
    chart = await d.kube.get(HELMCHART, f"{ns}-web", ns)
    assert chart["status"]["artifact"]["revision"] == "1.1.0"
    assert condition(chart, "Ready")["message"] == (  # type: ignore[index]
        "stored artifact for revision '1.1.0'"
    )
    [listed] = d.helm("list")
    assert (listed["chart"], listed["status"]) == ("app-1.1.0", "deployed")
    assert (await d.kube.get(CONFIG_MAP, "web-config", ns))["data"] == {
        "greeting": "from-oci",
        "version": "1.1.0",
    }

    # An exact version is a tag; one that is not there names itself.
    await d.helm_release("missing", version="3.0.0")
    # The release may first say only "not ready" (its HelmChart not yet failed); it
    # must then pass on the chart's own failure.
    missing = await d.observe.wait(
        HELMRELEASE,
        "missing",
        lambda o: "not found" in (condition(o, "Ready") or {}).get("message", ""),
        what="Ready naming the chart's failure",
        timeout=60,
    )
    ready = condition(missing, "Ready") or {}
    assert ready.get("reason") == "ArtifactFailed", ready
    message = ready["message"]
    assert f"HelmChart '{ns}/{ns}-missing' is not ready" in message
    assert f"{ns}/charts/app:3.0.0" in message


async def test_a_chart_from_an_oci_repository_chart_ref_is_released_and_repushed(
    helm_delivery: HelmDelivery, oci_registry: OciRegistry, tmp_path: Path
) -> None:
    d = helm_delivery
    ns = d.namespace
    push_chart(oci_registry, f"{ns}/oci", tmp_path, "1.0.0")
    await d.kube.create(
        OCIREPO,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1beta2",
            "kind": "OCIRepository",
            "metadata": {"name": "app"},
            "spec": {
                "url": oci_registry.oci_url(f"{ns}/oci/app"),
                "ref": {"tag": "1.0.0"},
                "insecure": True,
                "interval": "1h",
                "layerSelector": {"mediaType": CHART_LAYER, "operation": "copy"},
            },
        },
        namespace=ns,
    )
    await d.release_by_ref("web", "OCIRepository", "app", values={"greeting": "by-ref"})
    obj = await d.observe.wait_ready(HELMRELEASE, "web", timeout=60)
    source = await d.kube.get(OCIREPO, "app", ns)
    digest = source["status"]["artifact"]["digest"].removeprefix("sha256:")
    version = f"1.0.0+{digest[:12]}"
    assert obj["status"]["history"][0]["chartVersion"] == version
    assert obj["status"]["lastAttemptedRevision"] == version
    assert condition(obj, "Ready")["message"] == (  # type: ignore[index]
        f"Helm install succeeded for release {ns}/web.v1 with chart app@{version}"
    )
    [listed] = d.helm("list")
    assert listed["chart"] == f"app-{version}"
    assert (await d.kube.get(CONFIG_MAP, "web-config", ns))["data"]["greeting"] == "by-ref"

    # The same version pushed again with other content: a new digest, an upgrade.
    push_chart(oci_registry, f"{ns}/oci", tmp_path, "1.0.0", values={"greeting": "new-default"})
    await d.observe.poke(OCIREPO, "app", "repushed")
    obj = await d.observe.wait(
        HELMRELEASE, "web", lambda o: len(o["status"].get("history") or []) == 2, timeout=60
    )
    new_version = obj["status"]["history"][0]["chartVersion"]
    assert re.fullmatch(r"1\.0\.0\+[0-9a-f]{12}", new_version) and new_version != version
    assert [(r["revision"], r["status"]) for r in d.helm("history", "web")] == [
        (1, "superseded"),
        (2, "deployed"),
    ]


async def test_a_chart_from_an_external_artifact_chart_ref_is_released(
    helm_delivery: HelmDelivery, oci_registry: OciRegistry, tmp_path: Path
) -> None:
    """Flux 2.7's `chartRef.kind: ExternalArtifact`: another producer publishes the
    chart; here the test plays that producer, re-publishing what an OCIRepository
    built, and a HelmRelease naming the ExternalArtifact releases it."""
    d = helm_delivery
    ns = d.namespace
    push_chart(oci_registry, f"{ns}/ext", tmp_path, "2.0.0")
    await d.kube.create(
        OCIREPO,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1beta2",
            "kind": "OCIRepository",
            "metadata": {"name": "producer"},
            "spec": {
                "url": oci_registry.oci_url(f"{ns}/ext/app"),
                "ref": {"tag": "2.0.0"},
                "insecure": True,
                "interval": "1h",
                "layerSelector": {"mediaType": CHART_LAYER, "operation": "copy"},
            },
        },
        namespace=ns,
    )
    built = (await d.observe.wait_ready(OCIREPO, "producer", timeout=60))["status"]["artifact"]
    await d.kube.create(
        EXTERNAL,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "ExternalArtifact",
            "metadata": {"name": "chart"},
            "spec": {},
        },
        namespace=ns,
    )
    await d.kube.create(
        HELMRELEASE,
        {
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {"name": "ext"},
            "spec": {
                "interval": "1h",
                "chartRef": {"kind": "ExternalArtifact", "name": "chart"},
                "values": {"greeting": "external"},
            },
        },
        namespace=ns,
    )
    # Named before anything is published: waited for, like any chart source.
    await d.observe.wait(
        HELMRELEASE,
        "ext",
        lambda o: (
            f"ExternalArtifact '{ns}/chart' is not ready"
            in (condition(o, "Ready") or {}).get("message", "")
        ),
        what="waiting for the external artifact",
    )
    await d.kube.merge_patch(
        EXTERNAL, "chart", {"status": {"artifact": built}}, namespace=ns, subresource="status"
    )
    obj = await d.observe.wait_ready(HELMRELEASE, "ext", timeout=60)
    version = f"2.0.0+{built['digest'].removeprefix('sha256:')[:12]}"
    assert obj["status"]["history"][0]["chartVersion"] == version
    assert (await d.kube.get(CONFIG_MAP, "ext-config", ns))["data"]["greeting"] == "external"


async def test_a_release_verifies_its_chart_and_an_unsigned_one_is_never_installed(
    helm_delivery: HelmDelivery, oci_registry: OciRegistry, tmp_path: Path
) -> None:
    """chart.spec.verify reaches the HelmChart: the signed chart is released, the
    unsigned one never stored, and the HelmRelease says why."""
    d = helm_delivery
    ns = d.namespace
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    push_chart(oci_registry, f"{ns}/charts", tmp_path, "1.0.0")
    digest = manifest_digest(oci_registry, f"{ns}/charts/app", "1.0.0")
    # What `cosign sign --key` stores for the chart manifest.
    payload = simple_signing_payload(f"{oci_registry.host}/{ns}/charts/app", digest)
    signature = base64.b64encode(key.sign(payload, ec.ECDSA(hashes.SHA256()))).decode()
    oci_registry.push_cosign_signature(f"{ns}/charts/app", digest, payloads=[(payload, signature)])
    push_chart(oci_registry, f"{ns}/charts", tmp_path, "2.0.0")  # unsigned
    await make_secret(d.kube, ns, "chart-keys", {"cosign.pub": public.decode()})
    await d.kube.create(
        HELMREPO,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "HelmRepository",
            "metadata": {"name": "charts"},
            "spec": {
                "type": "oci",
                "url": oci_registry.oci_url(f"{ns}/charts"),
                "insecure": True,
                "interval": "1h",
            },
        },
        namespace=ns,
    )
    verify = {"provider": "cosign", "secretRef": {"name": "chart-keys"}}
    for name, version in (("signed", "1.0.0"), ("unsigned", "2.0.0")):
        await d.kube.create(
            HELMRELEASE,
            {
                "apiVersion": "helm.toolkit.fluxcd.io/v2",
                "kind": "HelmRelease",
                "metadata": {"name": name},
                "spec": {
                    "interval": "1h",
                    "chart": {
                        "spec": {
                            "chart": "app",
                            "version": version,
                            "sourceRef": {"kind": "HelmRepository", "name": "charts"},
                            "verify": verify,
                        }
                    },
                },
            },
            namespace=ns,
        )
    await d.observe.wait_ready(HELMRELEASE, "signed", timeout=60)
    chart = await d.kube.get(HELMCHART, f"{ns}-signed", ns)
    verified = condition(chart, "SourceVerified")
    assert verified is not None and verified["status"] == "True", verified

    unsigned = await d.observe.wait(
        HELMRELEASE,
        "unsigned",
        lambda o: "no signature found" in ((condition(o, "Ready") or {}).get("message") or ""),
        what="Ready naming the missing signature",
        timeout=60,
    )
    assert (condition(unsigned, "Ready") or {}).get("status") == "False"
    assert [r["name"] for r in d.helm("list")] == ["signed"], "the unsigned chart is not installed"
