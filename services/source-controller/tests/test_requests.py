"""API and registry requests per OCIRepository, counted (a count, not a timing, so it can be
asserted).

The MTTP benchmark's source (issue 19): one OCIRepository of a tag, reconciled
once from scratch and once with nothing changed. Every request the
source-controller sends to the API server on its behalf (the finalizer, the
steps, the status patch, its Events) is counted by phase and verb through the
client's request observer, and the registry's answers from its access log.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter

from sluice_envtest.registry import OciRegistry
from sluice_runtime.kube.attributing import Request

from .conftest import OCIREPO, SourceController, ocirepo

MANIFEST = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n"


class Requests:
    """Requests sent for one object, by (phase, verb, resource)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.counts: Counter[tuple[str, str, str]] = Counter()

    def requested(self, request: Request) -> None:
        if request.key != self.key:
            return
        parts = request.path.split("?")[0].strip("/").split("/")
        # .../namespaces/<ns>/<resource>[/<name>[/<subresource>]]
        resource = parts[parts.index("namespaces") + 2] if "namespaces" in parts else parts[-1]
        self.counts[(request.phase, request.verb, resource)] += 1

    def take(self) -> dict[tuple[str, str, str], int]:
        taken = dict(self.counts)
        self.counts.clear()
        return taken


def registry_requests(registry: OciRegistry, repository: str) -> Counter[str]:
    """The registry's answers about `repository`, by method and manifests/blobs/tags."""
    line = re.compile(rf'"(GET|HEAD) /v2/{re.escape(repository)}/(manifests|blobs|tags)/')
    return Counter(
        f"{method} {what}"
        for method, what in line.findall(registry.log_file.read_text(errors="replace"))
    )


async def reconciled(sc: SourceController, key: str, count: int, timeout: float = 30.0) -> None:
    """Until `count` reconciles of `key` ran and the Events they recorded were written."""
    deadline = time.monotonic() + timeout
    while sc.reconciles.counts[key] < count:
        assert time.monotonic() < deadline, f"{key}: {sc.reconciles.counts[key]} reconciles"
        await asyncio.sleep(0.05)
    await asyncio.wait_for(sc.runtime.recorder.flushed(), timeout)


async def test_a_first_reconcile_and_a_no_change_one_cost_few_requests(
    source_controller: SourceController, oci_registry: OciRegistry
) -> None:
    sc = source_controller
    repository = f"{sc.namespace}/counted"
    oci_registry.push_artifact(repository, "latest", files={"app.yaml": MANIFEST})
    key = f"{sc.namespace}/app"
    counted = Requests(key)
    stop = sc.runtime.client.observe(counted)
    try:
        pulled = registry_requests(oci_registry, repository)
        await sc.client.create(
            OCIREPO,
            ocirepo("app", oci_registry.oci_url(repository), insecure=True, ref={"tag": "latest"}),
            namespace=sc.namespace,
        )
        await sc.wait_ready(OCIREPO, "app")
        await reconciled(sc, key, 1)
        first = counted.take()
        first_pulls = registry_requests(oci_registry, repository) - pulled
        events = await sc.wait_events("app", bool)

        pulled = registry_requests(oci_registry, repository)
        await sc.poke(OCIREPO, "app", "again")
        await reconciled(sc, key, 2)
        again = counted.take()
        again_pulls = registry_requests(oci_registry, repository) - pulled
    finally:
        stop()
    # First: the finalizer, one status patch, and one Event (NewArtifact, which
    # says what Ready would: Flux sends that one alone). No read: the cache
    # holds the object. Before: 4 (a second Event for Ready).
    assert first == {
        ("runner", "patch", "ocirepositories"): 1,
        ("status", "patch", "ocirepositories"): 1,
        ("events", "create", "events"): 1,
    }, first
    assert [(e["reason"], e["count"]) for e in events] == [("NewArtifact", 1)], events
    # The registry: the tag's manifest and the one layer.
    assert first_pulls == Counter({"GET manifests": 1, "GET blobs": 1}), first_pulls
    # Nothing changed: the status patch that records the handled request, and
    # only the manifest asked of the registry (its digest is the stored one).
    assert again == {("status", "patch", "ocirepositories"): 1}, again
    assert again_pulls == Counter({"GET manifests": 1}), again_pulls
