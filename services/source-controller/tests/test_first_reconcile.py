"""A source's first reconcile: the finalizer is added beside the fetch (issue 19).

The OCIRepository reconciler as the controller wires it, run by the runner
on one object against the real API server and registry, so that the object
can be deleted exactly between the cache's copy and the finalizer patch.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from sluice_envtest.registry import OciRegistry
from sluice_runtime.artifacts.storage import Storage
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import EVENT
from sluice_runtime.reconciling.running import Runner
from sluice_runtime.recording import EventRecorder
from source_controller import ocirepository

from .conftest import OCIREPO, ocirepo
from .test_requests import Requests, registry_requests

MANIFEST = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n"


async def test_a_source_deleted_before_its_finalizer_keeps_nothing_in_storage(
    kube: KubeClient, namespace: str, tmp_path: Path, oci_registry: OciRegistry
) -> None:
    """Deleted before the finalizer patch reached the API server: the fetch
    went ahead beside the patch, so the artifact it stored must be removed by
    the reconcile itself (no deletion will come back for an object that never
    had the finalizer), and nothing is written about it."""
    repository = f"{namespace}/deleted"
    oci_registry.push_artifact(repository, "latest", files={"app.yaml": MANIFEST})
    spec = ocirepo("app", oci_registry.oci_url(repository), insecure=True, ref={"tag": "latest"})
    raw = await kube.create(OCIREPO, spec, namespace=namespace)
    await kube.delete(OCIREPO, "app", namespace=namespace)
    try:
        await kube.get(OCIREPO, "app", namespace=namespace)
        raise AssertionError("deleted at once: it has no finalizer")
    except NotFound:
        pass
    storage = Storage(tmp_path / "storage", advertised_addr="127.0.0.1:1")
    recorder = EventRecorder(kube, controller="source-controller")
    runner = Runner(ocirepository.reconciler(storage), client=kube, recorder=recorder)
    counted = Requests(f"{namespace}/app")
    pulled = registry_requests(oci_registry, repository)
    stop = kube.observe(counted)
    try:
        async with recorder.running():
            outcome = await runner.reconcile(raw)
            await recorder.flushed()
    finally:
        stop()
    assert outcome.result == "gone"
    # No NewArtifact event for an artifact already removed.
    events = (await kube.list(EVENT, namespace=namespace)).items
    assert [e["reason"] for e in events if e["involvedObject"]["name"] == "app"] == []
    # The fetch ran beside the finalizer patch (before: the patch's NotFound
    # ended the reconcile before the registry was asked).
    fetched = registry_requests(oci_registry, repository) - pulled
    assert fetched == Counter({"GET manifests": 1, "GET blobs": 1}), fetched
    assert [p for p in (tmp_path / "storage").rglob("*") if p.is_file()] == []
    assert counted.take() == {("runner", "patch", "ocirepositories"): 1}
