"""Every version Sluice serves, against the fixture corpus in `corpus/`.

The corpus is the project's own: one manifest per kind and version, using
every field that version had (the old-only ones too). Every version of a kind
is served with conversion `None` over one superset schema, so an object
written in one version must read back identically in every other, and the
models the controllers parse must keep every field of every version.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from sluice_api import ALL_KINDS
from sluice_api.meta import Resource
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import ResourceType

CORPUS = Path(__file__).parent / "corpus"
MODELS = {(m.GROUP, m.KIND): m for m in ALL_KINDS}


def corpus() -> list[Any]:
    params = []
    for path in sorted(CORPUS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            version = doc["apiVersion"].split("/")[1]
            params.append(
                pytest.param(doc, id=f"{doc['kind']}-{version}-{doc['metadata']['name']}")
            )
    return params


CORPUS_PARAMS = corpus()


def model_of(doc: dict[str, Any]) -> type[Resource[Any, Any]]:
    return MODELS[(doc["apiVersion"].split("/")[0], doc["kind"])]


def resource(model: type[Resource[Any, Any]], version: str) -> ResourceType:
    return ResourceType(model.GROUP, version, model.PLURAL, model.KIND, model.NAMESPACED)


def is_subset(small: Any, large: Any) -> bool:
    if isinstance(small, dict):
        return isinstance(large, dict) and all(
            key in large and is_subset(value, large[key]) for key, value in small.items()
        )
    if isinstance(small, list):
        return (
            isinstance(large, list)
            and len(small) == len(large)
            and all(is_subset(a, b) for a, b in zip(small, large, strict=True))
        )
    return bool(small == large)


OWN_TESTS = {"Gate", "HelmRelease", "ResourceSet", "ResourceSetInputProvider", "Application"}
"""Kinds whose every version is exercised by their own controller's tests (Sluice's
Gate, and the kinds Flux's source, kustomize and notification APIs do not hold)."""


def test_corpus_covers_every_served_version() -> None:
    """Every version of every Flux kind, the storage version included."""
    served = {
        (m.KIND, v)
        for m in ALL_KINDS
        if m.KIND not in OWN_TESTS
        for v in (m.VERSION, *m.EXTRA_VERSIONS)
    }
    written = {
        (p.values[0]["kind"], p.values[0]["apiVersion"].split("/")[1]) for p in CORPUS_PARAMS
    }
    assert served - written == set()


@pytest.mark.parametrize("doc", CORPUS_PARAMS)
def test_the_models_keep_every_field_of_every_version(doc: dict[str, Any]) -> None:
    """What the controllers parse (the storage model) holds every field of the
    manifest, whichever version it was written in."""
    parsed = model_of(doc).from_obj(doc)
    assert is_subset(doc["spec"], parsed.to_obj()["spec"])


@pytest.mark.parametrize("doc", CORPUS_PARAMS)
async def test_the_api_server_accepts_every_field(
    kube: KubeClient, namespace: str, doc: dict[str, Any]
) -> None:
    """A server-side dry-run create keeps every field: nothing is refused, nothing
    pruned as unknown (1.20 has no strict field validation, so compare)."""
    model = model_of(doc)
    rt = resource(model, doc["apiVersion"].split("/")[1])
    answer = await kube.request(
        "POST", rt.path(namespace=namespace), query=[("dryRun", "All")], body=doc
    )
    assert is_subset(doc["spec"], answer["spec"]), f"fields dropped: {doc['spec']} {answer['spec']}"


@pytest.mark.parametrize("doc", CORPUS_PARAMS)
async def test_round_trips_between_every_version_are_lossless(
    kube: KubeClient, namespace: str, doc: dict[str, Any]
) -> None:
    model = model_of(doc)
    written = doc["apiVersion"].split("/")[1]
    versions = [model.VERSION, *model.EXTRA_VERSIONS]
    name = doc["metadata"]["name"]
    created = await kube.create(resource(model, written), copy.deepcopy(doc), namespace=namespace)
    assert is_subset(doc["spec"], created["spec"])

    # Read in every version: the same spec (server defaults included).
    reads = {v: await kube.get(resource(model, v), name, namespace) for v in versions}
    for version, obj in reads.items():
        assert obj["apiVersion"] == f"{model.GROUP}/{version}"
        assert obj["spec"] == created["spec"], f"read as {version}"

    # Write through every other version and back: still nothing lost.
    for version in versions:
        current = await kube.get(resource(model, version), name, namespace)
        current["metadata"].setdefault("labels", {})["written-as"] = version
        await kube.replace(resource(model, version), current)
        back = await kube.get(resource(model, written), name, namespace)
        assert back["spec"] == created["spec"], f"written as {version}, read as {written}"
        assert back["metadata"]["labels"]["written-as"] == version
