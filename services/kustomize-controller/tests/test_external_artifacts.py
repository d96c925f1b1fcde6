"""ExternalArtifact (Flux 2.7, RFC-0012) as a Kustomization's source.

Another controller produces the artifact and writes it into the
ExternalArtifact's status; here the test plays that producer, re-publishing
what the source-controller built from a Git repository.
"""

from __future__ import annotations

from typing import Any

from sluice_api.source import ExternalArtifact
from sluice_envtest.harness import condition
from sluice_runtime.kube.resources import ResourceType

from .conftest import CONFIG_MAP, GITREPO, KUSTOMIZATION, TEST_LABEL, Delivery, config_map

EXTERNAL = ResourceType.of_model(ExternalArtifact)


async def publish(d: Delivery, name: str, artifact: dict[str, Any]) -> None:
    """Write `artifact` into the ExternalArtifact's status, as its producer would."""
    await d.kube.merge_patch(
        EXTERNAL,
        name,
        {
            "status": {
                "artifact": artifact,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "Succeeded",
                        "message": f"stored artifact for revision {artifact['revision']}",
                        "lastTransitionTime": artifact["lastUpdateTime"],
                    }
                ],
            }
        },
        namespace=d.namespace,
        subresource="status",
    )


async def test_a_kustomization_applies_an_external_artifact(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    repo = d.repo("producer")
    repo.commit("v1", files={"cm.yaml": config_map("external", ns, k="1")})
    repo.push()
    await d.git_repository("producer")
    built = await d.observe.wait_ready(GITREPO, "producer")

    await d.kube.create(
        EXTERNAL,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "ExternalArtifact",
            "metadata": {"name": "generated", "labels": {TEST_LABEL: ns}},
            "spec": {
                "sourceRef": {
                    "apiVersion": "source.extensions.fluxcd.io/v1beta1",
                    "kind": "ArtifactGenerator",
                    "name": "apps",
                }
            },
        },
        namespace=ns,
    )
    # Referenced before anything is published: waited for, like any source.
    await d.kustomization(
        "app", source="generated", sourceRef={"kind": "ExternalArtifact", "name": "generated"}
    )
    await d.observe.wait(
        KUSTOMIZATION,
        "app",
        lambda o: "has no artifact yet" in (condition(o, "Ready") or {}).get("message", ""),
        what="waiting for the external artifact",
    )
    await publish(d, "generated", built["status"]["artifact"])
    ready = await d.observe.wait_ready(KUSTOMIZATION, "app")
    assert ready["status"]["lastAppliedRevision"] == built["status"]["artifact"]["revision"]
    assert (await d.kube.get(CONFIG_MAP, "external", ns))["data"] == {"k": "1"}

    # A new artifact published by the producer is applied without being asked.
    repo.commit("v2", files={"cm.yaml": config_map("external", ns, k="2")})
    repo.push()
    await d.observe.poke(GITREPO, "producer", "v2")
    rebuilt = await d.observe.wait(
        GITREPO,
        "producer",
        lambda o: o["status"]["artifact"]["revision"] == f"main@sha1:{repo.head}",
    )
    await publish(d, "generated", rebuilt["status"]["artifact"])
    await d.observe.wait(
        KUSTOMIZATION,
        "app",
        lambda o: o["status"].get("lastAppliedRevision") == f"main@sha1:{repo.head}",
        what="the new external artifact applied",
    )
    assert (await d.kube.get(CONFIG_MAP, "external", ns))["data"] == {"k": "2"}
