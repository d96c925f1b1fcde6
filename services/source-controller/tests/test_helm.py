"""HelmRepository and HelmChart against a loopback chart repository, Git and a registry."""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from structlog.testing import capture_logs

from sluice_envtest.chartrepo import CONFIGMAP_TEMPLATE, ChartRepository, helm, write_chart
from sluice_envtest.faulty_proxy import Fault, FaultyProxy
from sluice_envtest.gitserver import GitHttpServer
from sluice_envtest.harness import condition, make_secret
from sluice_envtest.registry import OciRegistry
from sluice_runtime import confining
from sluice_runtime.kube.resources import ResourceType
from source_controller.helmrepository import Credentials, FetchError, fetch, index_url

from .conftest import GITREPO, SourceController, gitrepo, served

HELMREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "helmrepositories", "HelmRepository")
HELMCHART = ResourceType("source.toolkit.fluxcd.io", "v1", "helmcharts", "HelmChart")
CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"


@pytest_asyncio.fixture(loop_scope="session")
async def chart_repo(tmp_path: Path) -> AsyncIterator[ChartRepository]:
    repo = ChartRepository(tmp_path / "repo", username="charts", password="s3cret-pw")
    await repo.start()
    try:
        yield repo
    finally:
        await repo.stop()


def helmrepo(name: str, url: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "HelmRepository",
        "metadata": {"name": name},
        "spec": {"url": url, "interval": "10m", **spec},
    }


def helmchart(name: str, chart: str, source: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "HelmChart",
        "metadata": {"name": name},
        "spec": {"chart": chart, "sourceRef": source, "interval": "10m", **spec},
    }


def chart_files(data: bytes) -> dict[str, bytes]:
    files = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for member in archive.getmembers():
            extracted = archive.extractfile(member)
            if extracted is not None:
                files[member.name] = extracted.read()
    return files


async def authenticated_repo(sc: SourceController, chart_repo: ChartRepository) -> dict[str, Any]:
    await make_secret(
        sc.client, sc.namespace, "repo-auth", {"username": "charts", "password": "s3cret-pw"}
    )
    await sc.client.create(
        HELMREPO,
        helmrepo("charts", chart_repo.url, secretRef={"name": "repo-auth"}),
        namespace=sc.namespace,
    )
    return await sc.wait_ready(HELMREPO, "charts")


async def test_an_index_is_stored_by_digest_and_not_written_again_when_unchanged(
    source_controller: SourceController, chart_repo: ChartRepository
) -> None:
    sc = source_controller
    chart_repo.add("podinfo", "1.0.0")
    obj = await authenticated_repo(sc, chart_repo)
    artifact = obj["status"]["artifact"]
    index = (chart_repo.charts / "index.yaml").read_bytes()
    data = await served(obj)
    assert data == index
    assert artifact["revision"] == artifact["digest"]
    hexdigest = artifact["digest"].removeprefix("sha256:")
    assert artifact["path"] == f"helmrepository/{sc.namespace}/charts/index-{hexdigest}.yaml"
    assert obj["status"]["url"].startswith("http://")
    fetches = chart_repo.requests["/index.yaml"]

    again = await sc.poke(HELMREPO, "charts", "again")
    # The server answered 304 to the stored ETag: same artifact, not rewritten.
    assert chart_repo.requests["/index.yaml"] == fetches + 1
    assert again["status"]["artifact"] == artifact

    chart_repo.add("podinfo", "1.1.0")
    changed = await sc.poke(HELMREPO, "charts", "changed")
    assert changed["status"]["artifact"]["revision"] != artifact["revision"]
    assert await served(changed) == (chart_repo.charts / "index.yaml").read_bytes()


async def test_wrong_credentials_fail_with_authentication_failed_and_no_secret_leaks(
    source_controller: SourceController, chart_repo: ChartRepository
) -> None:
    sc = source_controller
    chart_repo.add("podinfo", "1.0.0")
    await make_secret(sc.client, sc.namespace, "bad", {"username": "charts", "password": "nope-pw"})
    await sc.client.create(
        HELMREPO, helmrepo("bad", chart_repo.url, secretRef={"name": "bad"}), namespace=sc.namespace
    )
    obj = await sc.wait_failed(HELMREPO, "bad", "AuthenticationFailed")
    fetch = condition(obj, "FetchFailed")
    assert fetch is not None and fetch["status"] == "True"
    assert "401" in fetch["message"] and "index.yaml" in fetch["message"]
    assert "nope-pw" not in str(obj["status"])


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        pytest.param("", "", id="fetched"),
        pytest.param("/missing", "IndexationFailed", id="failed"),
    ],
)
async def test_credentials_in_a_helm_repository_url_never_reach_status_events_or_logs(
    source_controller: SourceController, chart_repo: ChartRepository, path: str, reason: str
) -> None:
    sc = source_controller
    chart_repo.add("podinfo", "1.0.0")
    host = chart_repo.url.removeprefix("http://")
    url = f"http://charts:s3cret-pw@{host}{path}"
    with capture_logs() as entries:
        await sc.client.create(HELMREPO, helmrepo("inline", url), namespace=sc.namespace)
        if reason:
            obj = await sc.wait_failed(HELMREPO, "inline", reason)
        else:
            obj = await sc.wait_ready(HELMREPO, "inline")
        # The URL is echoed, redacted: in the failure, or in the "stored" event.
        redacted = f"http://redacted@{host}"
        events = await sc.wait_events(
            "inline", lambda found: any(redacted in e["message"] for e in found)
        )
    if reason:
        assert redacted in condition(obj, "Ready")["message"]  # type: ignore[index]
    for text in (json.dumps(obj["status"]), json.dumps(events), json.dumps(entries, default=str)):
        assert "s3cret-pw" not in text


async def test_an_oversized_index_is_refused(
    source_controller: SourceController, chart_repo: ChartRepository, tmp_path: Path
) -> None:
    sc = source_controller
    chart_repo.add("podinfo", "1.0.0")
    (chart_repo.charts / "index.yaml").write_text(
        (chart_repo.charts / "index.yaml").read_text() + "#" + "x" * (60 << 20)
    )
    await make_secret(
        sc.client, sc.namespace, "auth", {"username": "charts", "password": "s3cret-pw"}
    )
    await sc.client.create(
        HELMREPO,
        helmrepo("big", chart_repo.url, secretRef={"name": "auth"}),
        namespace=sc.namespace,
    )
    obj = await sc.wait_failed(HELMREPO, "big", "IndexationFailed")
    assert "larger than the limit of 52428800 bytes" in condition(obj, "Ready")["message"]  # type: ignore[index]
    assert "artifact" not in obj["status"]


async def test_a_chart_is_the_newest_version_in_range_and_follows_the_index(
    source_controller: SourceController, chart_repo: ChartRepository
) -> None:
    sc = source_controller
    chart_repo.add("podinfo", "1.0.0")
    v12 = chart_repo.add("podinfo", "1.2.0", app_version="6.0.0")
    chart_repo.add("podinfo", "2.0.0")
    await authenticated_repo(sc, chart_repo)
    source = {"kind": "HelmRepository", "name": "charts"}
    await sc.client.create(
        HELMCHART, helmchart("podinfo", "podinfo", source, version="1.x"), namespace=sc.namespace
    )
    obj = await sc.wait_ready(HELMCHART, "podinfo")
    artifact = obj["status"]["artifact"]
    assert artifact["revision"] == "1.2.0"
    assert artifact["path"] == f"helmchart/{sc.namespace}/podinfo/podinfo-1.2.0.tgz"
    assert await served(obj) == v12.read_bytes()
    assert obj["status"]["observedChartName"] == "podinfo"
    ready = condition(obj, "Ready")
    assert ready is not None and ready["message"] == "stored artifact for revision '1.2.0'"

    # A new version in range reaches the chart through the repository's new index.
    chart_repo.add("podinfo", "1.3.0")
    await sc.poke(HELMREPO, "charts", "new-index")
    moved = await sc.wait(
        HELMCHART, "podinfo", lambda o: o["status"].get("artifact", {}).get("revision") == "1.3.0"
    )
    assert chart_files(await served(moved))["podinfo/Chart.yaml"].startswith(b"apiVersion: v2")
    events = await sc.wait_events("podinfo", lambda e: len(e) >= 2, reason="NewArtifact")
    assert [e["message"] for e in events] == [
        "pulled 'podinfo' chart with version '1.2.0'",
        "pulled 'podinfo' chart with version '1.3.0'",
    ]


async def test_chart_not_found_and_no_matching_version_name_the_problem(
    source_controller: SourceController, chart_repo: ChartRepository
) -> None:
    sc = source_controller
    chart_repo.add("podinfo", "1.0.0")
    await authenticated_repo(sc, chart_repo)
    source = {"kind": "HelmRepository", "name": "charts"}
    await sc.client.create(
        HELMCHART, helmchart("nochart", "absent", source), namespace=sc.namespace
    )
    await sc.client.create(
        HELMCHART, helmchart("nover", "podinfo", source, version=">=5.0.0"), namespace=sc.namespace
    )
    missing = await sc.wait_failed(HELMCHART, "nochart", "ChartPullError")
    assert f"chart 'absent' not found in {chart_repo.url}" in condition(missing, "Ready")["message"]  # type: ignore[index]
    nover = await sc.wait_failed(HELMCHART, "nover", "ChartPullError")
    assert (
        condition(nover, "FetchFailed")["message"]
        == "chart 'podinfo': no chart version matches '>=5.0.0'"
    )  # type: ignore[index]


async def test_values_files_are_merged_into_a_chart_from_a_repository(
    source_controller: SourceController, chart_repo: ChartRepository
) -> None:
    sc = source_controller
    chart_repo.add(
        "podinfo",
        "1.0.0",
        templates={"configmap.yaml": CONFIGMAP_TEMPLATE, "prod.yaml": "# {{ .Values.x }}\n"},
    )
    await authenticated_repo(sc, chart_repo)
    source = {"kind": "HelmRepository", "name": "charts"}
    await sc.client.create(
        HELMCHART,
        helmchart(
            "merged",
            "podinfo",
            source,
            valuesFiles=["values.yaml", "missing.yaml"],
            ignoreMissingValuesFiles=True,
        ),
        namespace=sc.namespace,
    )
    await sc.client.create(
        HELMCHART,
        helmchart("strict", "podinfo", source, valuesFiles=["values.yaml", "missing.yaml"]),
        namespace=sc.namespace,
    )
    obj = await sc.wait_ready(HELMCHART, "merged")
    assert obj["status"]["observedValuesFiles"] == ["values.yaml", "missing.yaml"]
    values = yaml.safe_load(chart_files(await served(obj))["podinfo/values.yaml"])
    assert values == {"greeting": "hello"}
    strict = await sc.wait_failed(HELMCHART, "strict", "ChartPackageError")
    assert condition(strict, "BuildFailed")["message"] == "values file 'missing.yaml' not found"  # type: ignore[index]


async def test_a_chart_from_git_is_packaged_with_dependencies_and_values_files(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    work = git_http.create_repo(f"{sc.namespace}-charts")
    chart_yaml = (
        "apiVersion: v2\nname: app\nversion: 0.3.0\n"
        "dependencies:\n- name: lib\n  version: 0.1.0\n  repository: file://../lib\n"
    )
    commit = work.commit(
        "chart",
        files={
            "charts/app/Chart.yaml": chart_yaml,
            "charts/app/values.yaml": "greeting: hello\nnested: {a: 1, b: 2}\n",
            "charts/app/values-prod.yaml": "nested: {b: 3}\nreplicas: 2\n",
            "charts/app/templates/configmap.yaml": CONFIGMAP_TEMPLATE,
            "charts/lib/Chart.yaml": "apiVersion: v2\nname: lib\nversion: 0.1.0\n",
            "charts/lib/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: lib}\n",
        },
    )
    work.push()
    await sc.client.create(
        GITREPO,
        gitrepo("charts", git_http.url(f"{sc.namespace}-charts"), ref={"branch": "main"}),
        namespace=sc.namespace,
    )
    await sc.wait_ready(GITREPO, "charts")
    source = {"kind": "GitRepository", "name": "charts"}
    await sc.client.create(
        HELMCHART,
        helmchart(
            "app",
            "charts/app",
            source,
            reconcileStrategy="Revision",
            valuesFiles=["charts/app/values.yaml", "charts/app/values-prod.yaml"],
        ),
        namespace=sc.namespace,
    )
    obj = await sc.wait_ready(HELMCHART, "app", timeout=60)
    version = f"0.3.0+{commit[:12]}"
    assert obj["status"]["artifact"]["revision"] == version
    assert obj["status"]["observedSourceArtifactRevision"] == f"main@sha1:{commit}"
    files = chart_files(await served(obj))
    assert yaml.safe_load(files["app/Chart.yaml"])["version"] == version
    assert yaml.safe_load(files["app/values.yaml"]) == {
        "greeting": "hello",
        "nested": {"a": 1, "b": 3},
        "replicas": 2,
    }
    # helm dependency build vendored the file:// dependency; helm package packs it in.
    assert "app/Chart.lock" in files
    assert "app/charts/lib/templates/cm.yaml" in files

    # Revision strategy: a new commit is a new chart version, even with Chart.yaml unchanged.
    second = work.commit("readme", files={"README.md": "x\n"})
    work.push()
    await sc.poke(GITREPO, "charts", "next")
    await sc.wait(
        HELMCHART,
        "app",
        lambda o: o["status"].get("artifact", {}).get("revision") == f"0.3.0+{second[:12]}",
    )


async def test_a_v1beta1_values_file_is_merged_like_values_files(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    """`valuesFile`, the single values file of v1beta1/v1beta2 HelmCharts, is used as
    the first of `valuesFiles` would be: as in Flux, the listed files alone make the
    chart's values (values.yaml is kept only when listed)."""
    sc = source_controller
    work = git_http.create_repo(f"{sc.namespace}-single")
    work.commit(
        "chart",
        files={
            "charts/app/Chart.yaml": "apiVersion: v2\nname: app\nversion: 0.1.0\n",
            "charts/app/values.yaml": "greeting: hello\nreplicas: 1\n",
            "charts/app/values-prod.yaml": "replicas: 3\n",
            "charts/app/templates/configmap.yaml": CONFIGMAP_TEMPLATE,
        },
    )
    work.push()
    await sc.client.create(
        GITREPO,
        gitrepo("single", git_http.url(f"{sc.namespace}-single"), ref={"branch": "main"}),
        namespace=sc.namespace,
    )
    await sc.wait_ready(GITREPO, "single")
    chart = helmchart(
        "single",
        "charts/app",
        {"kind": "GitRepository", "name": "single"},
        valuesFile="charts/app/values-prod.yaml",
    )
    chart["apiVersion"] = "source.toolkit.fluxcd.io/v1beta1"
    old = ResourceType(HELMCHART.group, "v1beta1", HELMCHART.plural, HELMCHART.kind)
    await sc.client.create(old, chart, namespace=sc.namespace)
    obj = await sc.wait_ready(HELMCHART, "single", timeout=60)
    assert obj["status"]["observedValuesFiles"] == ["charts/app/values-prod.yaml"]
    files = chart_files(await served(obj))
    assert yaml.safe_load(files["app/values.yaml"]) == {"replicas": 3}


async def test_a_broken_chart_in_git_fails_the_build_naming_it(
    source_controller: SourceController, git_http: GitHttpServer
) -> None:
    sc = source_controller
    work = git_http.create_repo(f"{sc.namespace}-broken")
    work.commit("chart", files={"app/Chart.yaml": "apiVersion: v2\nname: app\n"})
    work.push()
    await sc.client.create(
        GITREPO,
        gitrepo("broken", git_http.url(f"{sc.namespace}-broken"), ref={"branch": "main"}),
        namespace=sc.namespace,
    )
    source = {"kind": "GitRepository", "name": "broken"}
    await sc.client.create(HELMCHART, helmchart("app", "app", source), namespace=sc.namespace)
    obj = await sc.wait_failed(HELMCHART, "app", "ChartPackageError")
    build = condition(obj, "BuildFailed")
    assert build is not None and "app/Chart.yaml is invalid" in build["message"]


async def test_an_oci_helm_repository_is_ready_when_the_registry_answers(
    source_controller: SourceController, oci_registry: OciRegistry
) -> None:
    sc = source_controller
    url = oci_registry.oci_url(f"{sc.namespace}/charts")
    await sc.client.create(
        HELMREPO, helmrepo("oci", url, type="oci", insecure=True), namespace=sc.namespace
    )
    obj = await sc.wait_ready(HELMREPO, "oci")
    assert "artifact" not in obj["status"]
    assert condition(obj, "Ready")["message"] == "Helm repository is ready"  # type: ignore[index]
    await sc.client.create(
        HELMREPO,
        helmrepo("down", "oci://127.0.0.1:1/charts", type="oci", insecure=True),
        namespace=sc.namespace,
    )
    down = await sc.wait_failed(HELMREPO, "down", "IndexationFailed")
    assert "127.0.0.1:1" in condition(down, "FetchFailed")["message"]  # type: ignore[index]


@pytest.mark.skipif(
    confining.landlock_abi() < confining.MIN_ABI, reason="needs Landlock ABI 4 (Linux 6.7)"
)
async def test_a_git_chart_cannot_package_files_outside_its_artifact(
    source_controller: SourceController, git_http: GitHttpServer, tmp_path: Path
) -> None:
    sc = source_controller
    # A chart on the controller's disk, outside any artifact: a file:// dependency
    # must not pull it in (helm runs confined to the chart's work directory).
    outside = tmp_path / "controller-files" / "secretchart"
    (outside / "templates").mkdir(parents=True)
    (outside / "Chart.yaml").write_text("apiVersion: v2\nname: secretchart\nversion: 0.1.0\n")
    (outside / "templates" / "cm.yaml").write_text("# controller secret\n")
    work = git_http.create_repo(f"{sc.namespace}-escape")
    work.commit(
        "chart",
        files={
            "app/Chart.yaml": "apiVersion: v2\nname: app\nversion: 0.1.0\ndependencies:\n"
            f"- name: secretchart\n  version: 0.1.0\n  repository: file://{outside}\n",
            "app/templates/cm.yaml": CONFIGMAP_TEMPLATE,
        },
    )
    work.push()
    await sc.client.create(
        GITREPO,
        gitrepo("escape", git_http.url(f"{sc.namespace}-escape"), ref={"branch": "main"}),
        namespace=sc.namespace,
    )
    source = {"kind": "GitRepository", "name": "escape"}
    await sc.client.create(HELMCHART, helmchart("app", "app", source), namespace=sc.namespace)
    obj = await sc.wait_failed(HELMCHART, "app", "ChartPackageError", timeout=60)
    build = condition(obj, "BuildFailed")
    assert build is not None and "dependency build of 'app' failed" in build["message"]
    assert "artifact" not in obj["status"]


async def test_a_helmchart_from_an_oci_helm_repository_with_basic_auth_and_values_files(
    source_controller: SourceController, oci_registry_auth: OciRegistry, tmp_path: Path
) -> None:
    sc = source_controller
    registry = oci_registry_auth
    repository = f"{sc.namespace}/charts"
    for version, greeting in (("1.0.0", "one"), ("1.2.0", "two"), ("2.0.0", "three")):
        chart = write_chart(
            tmp_path / version,
            "app",
            version,
            values={"greeting": greeting},
            templates={"configmap.yaml": CONFIGMAP_TEMPLATE, "extra.yaml": ""},
        )
        (chart / "prod.yaml").write_text("replicas: 3\n")
        helm("package", str(chart), "--destination", str(tmp_path / "out"), cwd=tmp_path)
        # As `helm push` lays a chart out: its config and one chart layer.
        registry.push_artifact(
            f"{repository}/app",
            version,
            layer=(tmp_path / "out" / f"app-{version}.tgz").read_bytes(),
            media_type=CHART_LAYER,
            config_media_type="application/vnd.cncf.helm.config.v1+json",
        )
    assert registry.username is not None and registry.password is not None
    await make_secret(
        sc.client,
        sc.namespace,
        "oci-auth",
        {"username": registry.username, "password": registry.password},
    )
    url = registry.oci_url(repository)
    await sc.client.create(
        HELMREPO,
        helmrepo("oci", url, type="oci", insecure=True, secretRef={"name": "oci-auth"}),
        namespace=sc.namespace,
    )
    source = {"kind": "HelmRepository", "name": "oci"}
    await sc.client.create(
        HELMCHART,
        helmchart("app", "app", source, version="1.x", valuesFiles=["values.yaml", "prod.yaml"]),
        namespace=sc.namespace,
    )
    obj = await sc.wait_ready(HELMCHART, "app", timeout=60)
    assert obj["status"]["artifact"]["revision"] == "1.2.0"
    files = chart_files(await served(obj))
    assert yaml.safe_load(files["app/values.yaml"]) == {"greeting": "two", "replicas": 3}

    # Without the credentials the registry refuses, and the condition says so.
    await sc.client.create(
        HELMREPO, helmrepo("anonymous", url, type="oci", insecure=True), namespace=sc.namespace
    )
    await sc.client.create(
        HELMCHART,
        helmchart(
            "denied", "app", {"kind": "HelmRepository", "name": "anonymous"}, version="1.0.0"
        ),
        namespace=sc.namespace,
    )
    denied = await sc.wait_failed(HELMCHART, "denied", "AuthenticationFailed", timeout=60)
    assert "artifact" not in denied["status"]


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        pytest.param(Fault.TRUNCATE, "the download broke off after", id="truncated"),
        pytest.param(Fault.RESET, "connection reset by the server", id="reset"),
        pytest.param(Fault.ERROR, "500 Internal Server Error", id="server-error"),
        pytest.param(Fault.HANG, "timed out", id="hang"),
        pytest.param(
            Fault.TRUNCATE,
            "the connection ended before the length the server announced",
            id="truncated",
        ),
    ],
)
async def test_a_failing_chart_server_is_a_fetch_error_in_words(
    tmp_path: Path, fault: Fault, message: str
) -> None:
    repo = ChartRepository(tmp_path / "repo", chart_urls="charts")
    await repo.start()
    repo.add("podinfo", "1.0.0")
    try:
        with FaultyProxy(repo.url) as proxy:
            proxy.set(fault)
            url = index_url(proxy.url)
            with pytest.raises(FetchError) as raised:
                await fetch(url, creds=Credentials(), max_size=1 << 20, timeout=1.0)
            assert str(raised.value).startswith(f"failed to fetch {url}: ")
            assert message in str(raised.value), str(raised.value)
            # Words, not a library's repr of its exception.
            assert not re.search(r"<|\w+Error\(", str(raised.value)), str(raised.value)
            proxy.set(Fault.NONE)
            fetched = await fetch(url, creds=Credentials(), max_size=1 << 20, timeout=1.0)
            assert fetched.body == (repo.charts / "index.yaml").read_bytes()
    finally:
        await repo.stop()
