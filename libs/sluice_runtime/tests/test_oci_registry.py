"""What an OCI URL or reference may be, for an OCIRepository and for the `sluice` command."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sluice_envtest.faulty_proxy import Fault, FaultyProxy
from sluice_envtest.registry import OciRegistry
from sluice_runtime.oci.registry import OCIURL, Hints, Reference, Registry, RegistryError

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("url", "message"),
    [
        pytest.param("oci://u:tok@reg/app", "'oci://redacted@reg/app' is not valid: credentials", id="userinfo"),
        pytest.param("oci://reg", "expected oci://<host>/<repository>", id="no-repository"),
        pytest.param("oci://reg/app:v1", "the tag goes in spec.ref", id="tag-in-url"),
    ],
)  # fmt: skip
def test_invalid_oci_urls(url: str, message: str) -> None:
    with pytest.raises(ValueError, match="URL") as raised:
        OCIURL.parse(url)
    assert message in str(raised.value)
    assert "tok" not in str(raised.value)


@pytest.mark.parametrize(
    ("text", "host", "repository", "tag", "digest"),
    [
        pytest.param("oci://reg/app", "reg", "app", None, None, id="bare"),
        pytest.param("oci://127.0.0.1:5000/team/app:v1.2", "127.0.0.1:5000", "team/app", "v1.2", None, id="port-and-tag"),
        pytest.param(f"oci://reg/app@{DIGEST}", "reg", "app", None, DIGEST, id="digest"),
    ],
)  # fmt: skip
def test_references(
    text: str, host: str, repository: str, tag: str | None, digest: str | None
) -> None:
    ref = Reference.parse(text)
    assert (ref.url.host, ref.url.repository, ref.tag, ref.digest) == (
        host,
        repository,
        tag,
        digest,
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("reg/app:v1", "expected oci://", id="no-scheme"),
        pytest.param("oci://reg/app@sha256:12", "not a sha256 digest", id="short-digest"),
        pytest.param("oci://reg/app:-v1", "'-v1' is not a tag", id="bad-tag"),
        pytest.param("oci://reg:5000", "expected oci://<host>/<repository>", id="no-repository"),
        pytest.param("oci://u:tok@reg/app:v1", "'oci://redacted@reg/app:v1' is not valid: credentials do not go in the URL", id="userinfo"),
    ],
)  # fmt: skip
def test_invalid_references(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Reference.parse(text)


@pytest.fixture
def proxied_blob(oci_registry: OciRegistry) -> Iterator[tuple[FaultyProxy, str]]:
    """A real registry behind a fault proxy, holding one artifact; the proxy and its layer."""
    repository = f"faults/{secrets.token_hex(4)}"
    digest = oci_registry.push_artifact(repository, "v1", files={"a.yaml": "a: 1\n" * 4000})
    layer = oci_registry.manifest(repository, digest)["layers"][0]["digest"]
    with FaultyProxy(oci_registry.url) as proxy:
        yield proxy, f"oci://{proxy.host}/{repository}|{layer}"


@pytest.mark.parametrize(
    ("fault", "only", "message"),
    [
        pytest.param(Fault.TRUNCATE, "/blobs/", "the download broke off after", id="truncated-blob"),
        pytest.param(Fault.TRUNCATE, "/manifests/", "the download broke off after", id="truncated-manifest"),
        pytest.param(Fault.TRUNCATE, "/tags/list", "the download broke off after", id="truncated-tags"),
        pytest.param(Fault.RESET, "/blobs/", "connection reset by the server", id="reset"),
        pytest.param(Fault.ERROR, "/blobs/", "the server failed", id="server-error"),
        pytest.param(Fault.HANG, "/blobs/", "timed out", id="hang"),
    ],
)  # fmt: skip
def test_a_failing_registry_read_is_a_registry_error_naming_the_host(
    proxied_blob: tuple[FaultyProxy, str], fault: Fault, only: str, message: str, tmp_path: Path
) -> None:
    proxy, target = proxied_blob
    url, layer = target.split("|")
    registry = Registry(
        OCIURL.parse(url), insecure=True, ca_file=None, username=None, password=None,
        timeout=1.0, hints=Hints(tls="spec.insecure", credentials="spec.secretRef"),
    )  # fmt: skip

    def read() -> None:
        registry.list_tags()
        registry.manifest("v1")
        registry.download(layer, tmp_path / "layer", max_size=1 << 20)

    # Only one kind of request fails: the registry answers the others.
    proxy.set(fault, only=only)
    try:
        with pytest.raises(RegistryError) as raised:
            read()
    finally:
        proxy.set(Fault.NONE)
    assert proxy.host in str(raised.value) and message in str(raised.value), str(raised.value)
    read()
    assert "sha256:" + hashlib.sha256((tmp_path / "layer").read_bytes()).hexdigest() == layer


def test_registries_of_one_process_share_kept_alive_connections(
    proxied_blob: tuple[FaultyProxy, str], tmp_path: Path
) -> None:
    """A Registry per reconcile (its own credentials and token), but not a
    connection per reconcile: 24 pulls on 4 threads, as the source-controller's
    registry pool runs them, open at most one connection per thread, and every
    layer still arrives whole (before: 24 connections, a handshake each)."""
    proxy, target = proxied_blob
    url, layer = target.split("|")

    def pull(i: int) -> str:
        registry = Registry(
            OCIURL.parse(url), insecure=True, ca_file=None, username=None, password=None,
            timeout=10.0, hints=Hints(tls="spec.insecure", credentials="spec.secretRef"),
        )  # fmt: skip
        registry.manifest("v1")
        registry.download(layer, tmp_path / f"layer-{i}", max_size=1 << 20)
        return "sha256:" + hashlib.sha256((tmp_path / f"layer-{i}").read_bytes()).hexdigest()

    with ThreadPoolExecutor(max_workers=4) as threads:
        digests = list(threads.map(pull, range(24)))
    assert digests == [layer] * 24
    seen = proxy.seen()
    assert len(seen) == 48
    assert 1 <= len({s.peer for s in seen}) <= 4, sorted({s.peer for s in seen})


@pytest.mark.parametrize(
    ("authenticated", "first", "later"),
    [
        pytest.param(False, ["GET manifests", "GET blobs"], ["GET manifests", "GET blobs"], id="anonymous"),
        # The htpasswd registry's 401 is answered once per process, not once per pull.
        pytest.param(
            True,
            ["GET manifests", "GET manifests", "GET blobs"],
            ["GET manifests", "GET blobs"],
            id="basic-auth",
        ),
    ],
)  # fmt: skip
def test_a_pull_is_a_manifest_and_a_blob_request(
    oci_registry: OciRegistry,
    oci_registry_auth: OciRegistry,
    authenticated: bool,
    first: list[str],
    later: list[str],
    tmp_path: Path,
) -> None:
    """What a source reconcile's pull costs the registry, counted by a proxy in front of
    the real one: a Registry per pull (as per reconcile), and no HEAD, ping or token
    request beside the manifest and the layer. Before: each pull from the htpasswd
    registry began with a request answered 401."""
    registry = oci_registry_auth if authenticated else oci_registry
    repository = f"counted/{secrets.token_hex(4)}"
    digest = registry.push_artifact(repository, "v1", files={"a.yaml": "a: 1\n"})
    layer = registry.manifest(repository, digest)["layers"][0]["digest"]
    with FaultyProxy(registry.url) as proxy:
        kinds: list[list[str]] = []
        for i in range(3):
            since = proxy.seen()[-1].at if proxy.seen() else 0.0
            pull = Registry(
                OCIURL.parse(f"oci://{proxy.host}/{repository}"), insecure=True, ca_file=None,
                username=registry.username, password=registry.password, timeout=10.0,
                hints=Hints(tls="spec.insecure", credentials="spec.secretRef"),
            )  # fmt: skip
            assert pull.manifest("v1").digest == digest
            pull.download(layer, tmp_path / f"layer-{i}", max_size=1 << 20)
            assert (
                "sha256:" + hashlib.sha256((tmp_path / f"layer-{i}").read_bytes()).hexdigest()
                == layer
            )
            kinds.append(
                [f"{s.method} {s.path.split('/')[-2]}" for s in proxy.seen() if s.at > since]
            )
    assert kinds == [first, later, later]
