"""The HelmRelease benchmark's ceilings (helm installs from a script, SSA of what helm
stored) and its count of requests at the API server."""

from __future__ import annotations

import json
import secrets
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from e2e.bench import helm_ceilings
from e2e.bench.test_ceilings import sent_by
from sluice_envtest.chartrepo import write_chart
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.kube.resources import NAMESPACE, SECRET, ResourceType

CONFIG_MAP = ResourceType("", "v1", "configmaps", "ConfigMap")


@pytest.mark.parametrize(
    ("uri", "discovery"),
    [
        pytest.param("/version?timeout=32s", True, id="version"),
        pytest.param("/api", True, id="core-groups"),
        pytest.param("/api/v1?timeout=32s", True, id="core-resources"),
        pytest.param("/apis", True, id="groups"),
        pytest.param("/apis/apps/v1", True, id="group-resources"),
        pytest.param("/openapi/v2?timeout=32s", True, id="openapi"),
        pytest.param("/api/v1/namespaces/a/secrets?labelSelector=owner%3Dhelm", False, id="list"),
        pytest.param("/api/v1/namespaces", False, id="cluster-scoped-list"),
        pytest.param("/apis/apps/v1/namespaces/a/deployments/web", False, id="object"),
    ],
)
def test_discovery_is_told_apart_from_a_release_s_requests(uri: str, discovery: bool) -> None:
    assert helm_ceilings.is_discovery(uri) is discovery


def _event(agent: str, uri: str, at: datetime, *, verb: str = "get", took: float = 0.5) -> str:
    def stamp(t: datetime) -> str:
        return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    return json.dumps({
        "userAgent": agent, "requestURI": uri, "verb": verb,
        "requestReceivedTimestamp": stamp(at),
        "stageTimestamp": stamp(at + timedelta(seconds=took)),
    })  # fmt: skip


def test_the_audit_count_keeps_the_window_and_splits_helm_s_requests() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    lines = [
        _event("Helm/3.17.3", "/apis/apps/v1", t0 - timedelta(seconds=1)),  # before
        _event("Helm/3.17.3", "/apis/apps/v1", t0),
        _event("Helm/3.17.3", "/openapi/v2", t0, took=1.0),
        _event("Helm/3.17.3", "/api/v1/namespaces/a/secrets", t0, verb="create", took=0.25),
        _event("sluice", "/api/v1/namespaces/a/secrets", t0, verb="list"),
        _event("kube-apiserver/v1.20.2 (linux/amd64)", "/api/v1/namespaces", t0),
        "",
        _event("Helm/3.17.3", "/api", t0 + timedelta(seconds=11)),  # after
    ]
    counts = helm_ceilings.count_audit(lines, since=t0, until=t0 + timedelta(seconds=10))
    assert counts.by_agent == Counter({"helm": 3, "sluice": 1, "kube-apiserver": 1})
    assert counts.total == 5
    assert counts.helm_discovery == 2
    assert counts.helm_by_verb == Counter({"create": 1})
    assert (counts.helm_discovery_seconds, counts.helm_other_seconds) == (1.5, 0.25)


async def test_the_ceilings_install_with_helm_and_apply_what_it_stored(
    kube: Any, cluster: Cluster, tmp_path: Path
) -> None:
    chart = write_chart(tmp_path / "charts", "podinfo", "6.5.3")
    installed, applied = (f"t-helm-ceiling-{secrets.token_hex(3)}" for _ in range(2))
    for ns in (installed, applied):
        await kube.create(
            NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        )
    try:
        seconds = await helm_ceilings.helm_ceiling(
            str(cluster.kubeconfig), chart, namespace=installed, releases=2,
            concurrency=2, workdir=tmp_path / "ceiling",
        )  # fmt: skip
        assert seconds > 0
        stored = await helm_ceilings.stored_releases(kube, installed)
        assert sorted(s["metadata"]["name"] for s in stored) == [
            "sh.helm.release.v1.podinfo-0.v1",
            "sh.helm.release.v1.podinfo-1.v1",
        ]
        made = await kube.get(CONFIG_MAP, "podinfo-1-config", installed)
        assert made["data"]["greeting"] == "app-1"  # the release's own values

        seconds, sent = await sent_by(
            kube, helm_ceilings.ssa_ceiling(kube, stored, namespace=applied, concurrency=2)
        )
        assert seconds > 0
        writes = Counter((verb, path.rsplit("/", 2)[-2]) for verb, path in sent if verb != "get")
        # Per release: its one object and its release Secret, each one apply.
        assert writes == Counter({("apply", "configmaps"): 2, ("apply", "secrets"): 2}), writes
        copied = await kube.get(SECRET, "sh.helm.release.v1.podinfo-0.v1", applied)
        original = next(s for s in stored if s["metadata"]["name"] == copied["metadata"]["name"])
        assert copied["data"] == original["data"]
        assert copied["metadata"]["labels"]["owner"] == "helm"
        assert (await kube.get(CONFIG_MAP, "podinfo-0-config", applied))["data"]["greeting"] == (
            "app-0"
        )
    finally:
        for ns in (installed, applied):
            await kube.delete(NAMESPACE, ns)
