"""Charts pushed with `helm push` to the test registry, released from an OCI
HelmRepository (through the HelmChart it makes) and from an OCIRepository
(`spec.chartRef`)."""

from __future__ import annotations

import re
from pathlib import Path

from sluice_envtest.chartrepo import CONFIGMAP_TEMPLATE, helm, write_chart
from sluice_envtest.harness import condition
from sluice_envtest.registry import OciRegistry
from sluice_runtime.kube.resources import ResourceType

from .conftest import CONFIG_MAP, HELMCHART, HELMRELEASE, HELMREPO, HelmDelivery

OCIREPO = ResourceType("source.toolkit.fluxcd.io", "v1beta2", "ocirepositories", "OCIRepository")
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
    missing = await d.observe.wait_reason(HELMRELEASE, "missing", "ArtifactFailed", timeout=60)
    message = condition(missing, "Ready")["message"]  # type: ignore[index]
    assert f"HelmChart '{ns}/{ns}-missing' is not ready" in message
    assert f"{ns}/charts/app:3.0.0" in message and "not found" in message


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
