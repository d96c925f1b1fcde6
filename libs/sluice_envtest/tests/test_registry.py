"""The registry stores Flux-style artifacts pushed with oras, behind auth and TLS when asked."""

from __future__ import annotations

import base64
import hashlib
import io
import ssl
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import oras.client
import pytest

from sluice_envtest.registry import (
    FLUX_CONFIG_MEDIA_TYPE,
    FLUX_CONTENT_MEDIA_TYPE,
    OciRegistry,
    make_tarball,
)

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def raw_manifest(
    registry: OciRegistry, repository: str, tag: str, context: ssl.SSLContext | None = None
) -> bytes:
    request = urllib.request.Request(  # noqa: S310 - our loopback registry
        f"{registry.url}/v2/{repository}/manifests/{tag}", headers={"Accept": OCI_MANIFEST}
    )
    if registry.username:
        token = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, context=context) as answer:  # noqa: S310
        return bytes(answer.read())


def test_tarballs_are_reproducible() -> None:
    files = {"b.yaml": "b: 1\n", "a/deploy.yaml": b"kind: Pod\n"}
    assert make_tarball(files) == make_tarball(dict(reversed(files.items())))
    with tarfile.open(fileobj=io.BytesIO(make_tarball(files))) as archive:
        assert archive.getnames() == ["a/deploy.yaml", "b.yaml"]
        assert all(member.mtime == 0 for member in archive.getmembers())


def test_push_two_tags_and_pull_one_back(oci_registry: OciRegistry, tmp_path: Path) -> None:
    first = oci_registry.push_artifact(
        "flux/podinfo",
        "6.0.0",
        files={"deploy.yaml": "replicas: 1\n"},
        annotations={
            "org.opencontainers.image.source": "https://github.com/stefanprodan/podinfo",
            "org.opencontainers.image.revision": "6.0.0@sha1:abc",
        },
    )
    second = oci_registry.push_artifact(
        "flux/podinfo", "6.0.1", files={"deploy.yaml": "replicas: 2\n"}
    )
    assert first != second
    assert first.startswith("sha256:")
    assert sorted(oci_registry.tags("flux/podinfo")) == ["6.0.0", "6.0.1"]

    stored = raw_manifest(oci_registry, "flux/podinfo", "6.0.0")
    assert "sha256:" + hashlib.sha256(stored).hexdigest() == first
    manifest = oci_registry.manifest("flux/podinfo", "6.0.0")
    assert manifest == oci_registry.manifest("flux/podinfo", first)
    assert manifest["config"]["mediaType"] == FLUX_CONFIG_MEDIA_TYPE
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == FLUX_CONTENT_MEDIA_TYPE
    revision = manifest["annotations"]["org.opencontainers.image.revision"]
    assert revision == "6.0.0@sha1:abc"

    client = oras.client.OrasClient(hostname=oci_registry.host, insecure=True)
    (pulled,) = client.pull(
        target=oci_registry.reference("flux/podinfo", "6.0.0"), outdir=str(tmp_path)
    )
    content = Path(pulled).read_bytes()
    assert "sha256:" + hashlib.sha256(content).hexdigest() == layer["digest"]
    assert content == make_tarball({"deploy.yaml": "replicas: 1\n"})
    assert (
        oci_registry.oci_url("flux/podinfo") == f"oci://127.0.0.1:{oci_registry.port}/flux/podinfo"
    )


def test_a_layer_can_be_pushed_as_given(oci_registry: OciRegistry) -> None:
    digest = oci_registry.push_artifact(
        "raw/layer", "latest", layer=b"not a tarball", media_type="application/octet-stream"
    )
    manifest = oci_registry.manifest("raw/layer", digest)
    assert manifest["layers"][0]["size"] == len(b"not a tarball")


def test_htpasswd_auth(oci_registry_auth: OciRegistry) -> None:
    registry = oci_registry_auth
    digest = registry.push_artifact("private/app", "v1", files={"a": "b"})
    for path in ("/v2/", "/v2/private/app/tags/list", "/v2/private/app/manifests/v1"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{registry.url}{path}")  # noqa: S310 - our loopback registry
        assert refused.value.code == 401
        challenge = refused.value.headers["WWW-Authenticate"]
        assert challenge == 'Basic realm="sluice-test-registry"'

    assert registry.tags("private/app") == ["v1"]
    stored = raw_manifest(registry, "private/app", "v1")
    assert "sha256:" + hashlib.sha256(stored).hexdigest() == digest

    config = registry.docker_config
    entry = config["auths"][registry.host]
    assert entry["username"] == registry.username
    assert entry["password"] == registry.password
    assert base64.b64decode(entry["auth"]).decode() == f"{registry.username}:{registry.password}"


def test_tls_with_the_test_ca(tmp_path: Path) -> None:
    with OciRegistry(tls=True) as registry:
        assert registry.ca_file is not None
        assert registry.url.startswith("https://")
        digest = registry.push_artifact("secure/app", "v1", files={"a": "b"})
        trusted = ssl.create_default_context(cafile=str(registry.ca_file))
        stored = raw_manifest(registry, "secure/app", "v1", context=trusted)
        assert "sha256:" + hashlib.sha256(stored).hexdigest() == digest
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            raw_manifest(registry, "secure/app", "v1", context=ssl.create_default_context())
