"""OCIRepository against a real registry (CNCF distribution) and the real API server."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from sluice_envtest.controlplane import free_port
from sluice_envtest.harness import condition, make_secret
from sluice_envtest.registry import OciRegistry, make_tarball

from .conftest import (
    OCIREPO,
    SourceController,
    ocirepo,
    served,
    served_files,
)

MANIFEST = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n"


async def create(sc: SourceController, obj: dict[str, Any]) -> None:
    await sc.client.create(OCIREPO, obj, namespace=sc.namespace)


async def test_a_tag_is_pulled_extracted_and_stored(
    source_controller: SourceController, oci_registry: OciRegistry
) -> None:
    sc = source_controller
    repo = f"{sc.namespace}/app"
    digest = oci_registry.push_artifact(
        repo,
        "v1",
        files={"app.yaml": MANIFEST, "logo.png": b"png"},
        annotations={"org.opencontainers.image.revision": "main@sha1:abc"},
    )
    await create(sc, ocirepo("app", oci_registry.oci_url(repo), insecure=True, ref={"tag": "v1"}))
    obj = await sc.wait_ready(OCIREPO, "app")
    artifact = obj["status"]["artifact"]
    assert artifact["revision"] == f"v1@{digest}"
    assert (
        artifact["path"]
        == f"ocirepository/{sc.namespace}/app/{digest.removeprefix('sha256:')}.tar.gz"
    )
    assert artifact["metadata"] == {"org.opencontainers.image.revision": "main@sha1:abc"}
    ready = condition(obj, "Ready")
    assert ready is not None and ready["message"] == f"stored artifact for revision 'v1@{digest}'"
    # Re-archived with the default exclusions, like a Git checkout.
    assert sorted(await served_files(obj)) == ["app.yaml"]


async def test_semver_with_filter_and_digest_refs(
    source_controller: SourceController, oci_registry: OciRegistry
) -> None:
    sc = source_controller
    repo = f"{sc.namespace}/versions"
    digests = {
        tag: oci_registry.push_artifact(repo, tag, files={"v.txt": tag})
        for tag in ("1.0.0", "1.2.0", "1.3.0-rc.1", "2.0.0", "1.4.0-prod", "latest")
    }
    url = oci_registry.oci_url(repo)
    await create(sc, ocirepo("semver", url, insecure=True, ref={"semver": "^1.0.0"}))
    await create(
        sc,
        ocirepo(
            "filtered",
            url,
            insecure=True,
            ref={"semver": ">=1.0.0-0", "semverFilter": ".*-prod$"},
        ),
    )
    await create(sc, ocirepo("pinned", url, insecure=True, ref={"digest": digests["2.0.0"]}))
    await create(sc, ocirepo("default", url, insecure=True))
    for name, revision, tag in [
        ("semver", "1.2.0@{}", "1.2.0"),
        ("filtered", "1.4.0-prod@{}", "1.4.0-prod"),
        ("pinned", "{}", "2.0.0"),
        ("default", "latest@{}", "latest"),
    ]:
        obj = await sc.wait_ready(OCIREPO, name)
        assert obj["status"]["artifact"]["revision"] == revision.format(digests[tag]), name
        assert await served_files(obj) == {"v.txt": tag.encode()}, name


@pytest.mark.timeout(300)
async def test_semver_filter_runs_in_linear_time_and_refuses_lookaround(
    source_controller: SourceController, oci_registry: OciRegistry
) -> None:
    sc = source_controller
    repo = f"{sc.namespace}/filters"
    # On a backtracking engine `(a+)+$` would spend years on the last tag,
    # with the whole controller (and this test) blocked behind it.
    digests = {
        tag: oci_registry.push_artifact(repo, tag, files={"v.txt": tag})
        for tag in ("1.0.0", "1.1.0", "a" * 60 + "b")
    }
    url = oci_registry.oci_url(repo)
    await create(
        sc,
        ocirepo(
            "linear", url, insecure=True, ref={"semver": ">=1.0.0", "semverFilter": "(a+)+$|^1.0"}
        ),
    )
    await create(
        sc,
        ocirepo(
            "lookahead", url, insecure=True, ref={"semver": ">=1.0.0", "semverFilter": "^1(?!.1)"}
        ),
    )
    obj = await sc.wait_ready(OCIREPO, "linear")
    assert obj["status"]["artifact"]["revision"] == f"1.0.0@{digests['1.0.0']}"
    stalled = await sc.wait(
        OCIREPO,
        "lookahead",
        lambda o: (condition(o, "Stalled") or {}).get("status") == "True",
        what="Stalled",
    )
    message = condition(stalled, "Stalled")["message"]  # type: ignore[index]
    assert message.startswith("invalid regular expression in spec.ref.semverFilter '^1(?!.1)': ")
    assert "no backreferences or lookaround" in message


async def test_layer_selector_copy_keeps_the_layer_bytes(
    source_controller: SourceController, oci_registry: OciRegistry
) -> None:
    sc = source_controller
    repo = f"{sc.namespace}/chart"
    layer = make_tarball({"chart/Chart.yaml": "name: chart\n"})
    oci_registry.push_artifact(
        repo, "1.0.0", layer=layer, media_type="application/vnd.cncf.helm.chart.content.v1.tar+gzip"
    )
    await create(
        sc,
        ocirepo(
            "copy",
            oci_registry.oci_url(repo),
            insecure=True,
            ref={"tag": "1.0.0"},
            layerSelector={
                "mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
                "operation": "copy",
            },
        ),
    )
    await create(
        sc,
        ocirepo(
            "wrong-type",
            oci_registry.oci_url(repo),
            insecure=True,
            ref={"tag": "1.0.0"},
            layerSelector={"mediaType": "application/x-nothing"},
        ),
    )
    copied = await sc.wait_ready(OCIREPO, "copy")
    assert await served(copied) == layer
    assert copied["status"]["observedLayerSelector"]["operation"] == "copy"
    failed = await sc.wait_failed(OCIREPO, "wrong-type", "OCIArtifactLayerOperationFailed")
    assert (
        "no layer with media type 'application/x-nothing'" in condition(failed, "Ready")["message"]
    )  # type: ignore[index]


async def test_unchanged_digest_is_not_downloaded_again(
    source_controller: SourceController, oci_registry: OciRegistry
) -> None:
    sc = source_controller
    repo = f"{sc.namespace}/steady"
    oci_registry.push_artifact(repo, "v1", files={"a.yaml": MANIFEST})
    await create(
        sc, ocirepo("steady", oci_registry.oci_url(repo), insecure=True, ref={"tag": "v1"})
    )
    first = await sc.wait_ready(OCIREPO, "steady")
    pulled = oci_registry.blob_downloads(repo)
    assert pulled == 1, "the first reconcile downloads the layer, and only it"
    again = await sc.poke(OCIREPO, "steady", "again")
    assert again["status"]["artifact"] == first["status"]["artifact"]
    assert oci_registry.blob_downloads(repo) == pulled, "no blob downloaded for the same digest"

    new_digest = oci_registry.push_artifact(repo, "v1", files={"a.yaml": MANIFEST + "# 2\n"})
    moved = await sc.poke(OCIREPO, "steady", "moved")
    assert moved["status"]["artifact"]["revision"] == f"v1@{new_digest}"
    assert oci_registry.blob_downloads(repo) == pulled + 1
    assert (await served_files(moved))["a.yaml"].decode().endswith("# 2\n")


async def test_registry_credentials_from_a_dockerconfigjson_secret(
    source_controller: SourceController, oci_registry_auth: OciRegistry
) -> None:
    sc = source_controller
    repo = f"{sc.namespace}/private"
    digest = oci_registry_auth.push_artifact(repo, "v1", files={"a.yaml": MANIFEST})
    url = oci_registry_auth.oci_url(repo)
    config = json.dumps(oci_registry_auth.docker_config)
    await make_secret(
        sc.client, sc.namespace, "pull", {".dockerconfigjson": config},
        type_="kubernetes.io/dockerconfigjson",
    )  # fmt: skip
    wrong = json.loads(config)
    wrong["auths"][oci_registry_auth.host]["password"] = "wrong"
    wrong["auths"][oci_registry_auth.host].pop("auth")
    await make_secret(sc.client, sc.namespace, "wrong", {".dockerconfigjson": json.dumps(wrong)})
    await create(
        sc, ocirepo("good", url, insecure=True, ref={"tag": "v1"}, secretRef={"name": "pull"})
    )
    await create(
        sc, ocirepo("bad", url, insecure=True, ref={"tag": "v1"}, secretRef={"name": "wrong"})
    )
    await create(sc, ocirepo("none", url, insecure=True, ref={"tag": "v1"}))
    good = await sc.wait_ready(OCIREPO, "good")
    assert good["status"]["artifact"]["revision"] == f"v1@{digest}"
    assert await served_files(good) == {"a.yaml": MANIFEST.encode()}
    for name in ("bad", "none"):
        failed = await sc.wait_failed(OCIREPO, name, "AuthenticationFailed")
        fetch = condition(failed, "FetchFailed")
        assert fetch is not None and fetch["status"] == "True"
        assert oci_registry_auth.host in fetch["message"]
        assert (oci_registry_auth.password or "?") not in json.dumps(failed["status"])


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        pytest.param({"tag": "missing"}, "not found", id="unknown-tag"),
        pytest.param(
            {"semver": ">=9.0.0"}, "no tag matches semver range '>=9.0.0'", id="semver-no-match"
        ),
    ],
)
async def test_missing_artifacts_fail_with_the_pull_reason(
    source_controller: SourceController,
    oci_registry: OciRegistry,
    ref: dict[str, str],
    message: str,
) -> None:
    sc = source_controller
    repo = f"{sc.namespace}/sparse"
    oci_registry.push_artifact(repo, "1.0.0", files={"a": "b"})
    await create(sc, ocirepo("missing", oci_registry.oci_url(repo), insecure=True, ref=ref))
    failed = await sc.wait_failed(OCIREPO, "missing", "OCIArtifactPullFailed")
    assert message in condition(failed, "Ready")["message"]  # type: ignore[index]


async def test_a_plain_http_registry_needs_insecure(
    source_controller: SourceController, oci_registry: OciRegistry
) -> None:
    sc = source_controller
    repo = f"{sc.namespace}/plain"
    oci_registry.push_artifact(repo, "v1", files={"a": "b"})
    await create(sc, ocirepo("strict", oci_registry.oci_url(repo), ref={"tag": "v1"}, timeout="5s"))
    failed = await sc.wait_failed(OCIREPO, "strict", "OCIArtifactPullFailed")
    assert "insecure" in condition(failed, "Ready")["message"]  # type: ignore[index]


async def test_a_url_with_a_tag_stalls(source_controller: SourceController) -> None:
    sc = source_controller
    await create(sc, ocirepo("tagged", "oci://127.0.0.1:1/app:v1"))
    obj = await sc.wait(
        OCIREPO,
        "tagged",
        lambda o: (condition(o, "Stalled") or {}).get("status") == "True",
        what="Stalled",
    )
    assert condition(obj, "Stalled")["reason"] == "URLInvalid"  # type: ignore[index]


async def test_a_registry_with_a_private_ca(
    source_controller: SourceController, oci_registry_tls: OciRegistry
) -> None:
    sc = source_controller
    repo = f"{sc.namespace}/tls"
    digest = oci_registry_tls.push_artifact(repo, "v1", files={"a.yaml": MANIFEST})
    assert oci_registry_tls.ca_pem is not None
    await make_secret(
        sc.client, sc.namespace, "registry-ca", {"ca.crt": oci_registry_tls.ca_pem.decode()}
    )
    url = oci_registry_tls.oci_url(repo)
    await create(
        sc, ocirepo("trusted", url, ref={"tag": "v1"}, certSecretRef={"name": "registry-ca"})
    )
    await create(sc, ocirepo("untrusted", url, ref={"tag": "v1"}, timeout="10s"))
    trusted = await sc.wait_ready(OCIREPO, "trusted")
    assert trusted["status"]["artifact"]["revision"] == f"v1@{digest}"
    assert await served_files(trusted) == {"a.yaml": MANIFEST.encode()}
    failed = await sc.wait_failed(OCIREPO, "untrusted", "OCIArtifactPullFailed")
    assert "certSecretRef" in condition(failed, "Ready")["message"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("ref", "secret", "key"),
    [
        pytest.param("secretRef", {"config.json": "{}"}, ".dockerconfigjson", id="pull-secret"),
        pytest.param("certSecretRef", {"tls.crt": "x"}, "ca.crt", id="cert-secret"),
    ],
)
async def test_a_secret_missing_its_key_names_the_key(
    source_controller: SourceController,
    oci_registry: OciRegistry,
    ref: str,
    secret: dict[str, str],
    key: str,
) -> None:
    sc = source_controller
    repo = f"{sc.namespace}/keyless"
    oci_registry.push_artifact(repo, "v1", files={"a.yaml": MANIFEST})
    await make_secret(sc.client, sc.namespace, "keyless", secret)
    await create(
        sc,
        ocirepo(
            "keyless",
            oci_registry.oci_url(repo),
            insecure=True,
            ref={"tag": "v1"},
            **{ref: {"name": "keyless"}},
        ),
    )
    failed = await sc.wait_failed(OCIREPO, "keyless", "AuthenticationFailed")
    message = f"secret '{sc.namespace}/keyless' has no '{key}' key"
    assert condition(failed, "Ready")["message"] == message  # type: ignore[index]
    fetch = condition(failed, "FetchFailed")
    assert fetch is not None and (fetch["status"], fetch["message"]) == ("True", message)


@contextlib.asynccontextmanager
async def oversized_registry(size: int) -> AsyncIterator[str]:
    """A registry on loopback whose manifests and tag lists are `size` bytes of
    valid JSON, streamed without a length; yields its host:port."""

    async def oversized(request: web.Request) -> web.StreamResponse:
        is_tags = request.path.endswith("/tags/list")
        head, tail = (b'{"tags":["v1"', b"]}") if is_tags else (b'{"layers":[],"x":"', b'"}')
        filler = (b',"v1"' if is_tags else b"x") * 4096
        response = web.StreamResponse(
            headers={
                "Content-Type": "application/json"
                if is_tags
                else "application/vnd.oci.image.manifest.v1+json"
            }
        )
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(head)
        sent = len(head)
        while sent < size:
            await response.write(filler)
            sent += len(filler)
        await response.write(tail)
        return response

    app = web.Application()
    app.router.add_get("/v2/{repo:.+}/manifests/{ref}", oversized)
    app.router.add_get("/v2/{repo:.+}/tags/list", oversized)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("ref", "expect"),
    [
        pytest.param({"tag": "v1"}, "manifest 'v1' is larger than the limit of 4194304 bytes", id="manifest"),
        pytest.param({"semver": ">=1.0.0"}, "tag list page is larger than the limit of 4194304 bytes", id="tag-list"),
    ],
)  # fmt: skip
async def test_oversized_registry_answers_are_refused(
    source_controller: SourceController, ref: dict[str, str], expect: str
) -> None:
    sc = source_controller
    async with oversized_registry(8 << 20) as host:
        await create(sc, ocirepo("huge", f"oci://{host}/app", insecure=True, ref=ref))
        obj = await sc.wait_failed(OCIREPO, "huge", "OCIArtifactPullFailed")
    failed = condition(obj, "FetchFailed")
    assert failed is not None and failed["status"] == "True"
    assert expect in failed["message"], failed["message"]
    assert "artifact" not in obj["status"]


async def test_credentials_in_an_oci_url_are_refused_without_echoing_them(
    source_controller: SourceController,
) -> None:
    sc = source_controller
    await create(sc, ocirepo("inline", "oci://me:s3cret-token@127.0.0.1:5000/app", insecure=True))
    obj = await sc.wait_failed(OCIREPO, "inline", "URLInvalid")
    ready = condition(obj, "Ready")
    assert ready is not None and "credentials go in spec.secretRef" in ready["message"]
    assert "oci://redacted@127.0.0.1:5000/app" in ready["message"]
    assert "s3cret-token" not in json.dumps(obj["status"])
    events = await sc.wait_events("inline", bool)
    assert "s3cret-token" not in json.dumps(events)
