"""An OCI layer from download to storage (pulling.py), against a real registry."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from sluice_envtest.harness import condition
from sluice_envtest.registry import OciRegistry

from .conftest import OCIREPO, SourceController, ocirepo, served_files

MANIFEST = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n"


async def test_a_layer_that_cannot_be_unpacked_keeps_the_last_artifact_and_no_work_dir(
    source_controller: SourceController,
    oci_registry: OciRegistry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The work directory of a pull is gone once the reconcile has written status,
    whether the layer was stored or refused; a refused layer names the layer and
    keeps the last artifact served."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(work))
    sc = source_controller
    repo = f"{sc.namespace}/unpack"
    good = oci_registry.push_artifact(repo, "v1", files={"app.yaml": MANIFEST, "x/b.yaml": "b\n"})
    await sc.client.create(
        OCIREPO, ocirepo("unpack", oci_registry.oci_url(repo), insecure=True, ref={"tag": "v1"}),
        namespace=sc.namespace,
    )  # fmt: skip
    stored = await sc.wait_ready(OCIREPO, "unpack")
    assert stored["status"]["artifact"]["revision"] == f"v1@{good}"
    assert await served_files(stored) == {"app.yaml": MANIFEST.encode(), "x/b.yaml": b"b\n"}
    assert list(work.iterdir()) == []

    bad = oci_registry.push_artifact(repo, "v1", layer=b"not a gzip tarball")
    await sc.poke(OCIREPO, "unpack", "bad")
    failed = await sc.wait_failed(OCIREPO, "unpack", "OCIArtifactLayerOperationFailed")
    built = condition(failed, "BuildFailed")
    assert built is not None and built["status"] == "True"
    layer = oci_registry.manifest(repo, bad)["layers"][0]["digest"]
    assert f"layer {layer} cannot be extracted" in built["message"]
    assert failed["status"]["artifact"] == stored["status"]["artifact"]
    assert await served_files(failed) == await served_files(stored)
    assert list(work.iterdir()) == []
