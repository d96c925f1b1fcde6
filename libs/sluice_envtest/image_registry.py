"""Push an image layout to a registry and pull one back into a root filesystem,
through the registry client of the `sluice` artifact verbs (oras-py's, with
token and basic auth)."""

from __future__ import annotations

import json
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from sluice_cli import artifacts
from sluice_envtest.image_layout import MANIFEST_TYPE, ImageError, Layout
from sluice_runtime.oci.registry import Reference, RegistryError


def split_reference(reference: str) -> tuple[str, str, str]:
    """`host/repo:tag` → (host, repo, tag)."""
    host, _, rest = reference.partition("/")
    repository, _, tag = rest.rpartition(":")
    if not repository or not tag or not host:
        raise ImageError(f"{reference}: expected HOST/REPOSITORY:TAG")
    return host, repository, tag


def push(
    layout: Layout,
    reference: str,
    *,
    plain_http: bool = False,
    creds: str | None = None,
    docker_config: Path | None = None,
) -> str:
    """Push the layout's image to `reference`; the manifest's digest.

    Through the registry client the `sluice` artifact verbs use (oras-py's,
    with token and basic auth), logged in with `creds` (`user:password`) or
    else what `docker login` left in the Docker config, so a real registry
    such as ghcr.io takes the push, not only an anonymous one.
    """
    host, repository, tag = split_reference(reference)
    try:
        ref = Reference.parse(f"oci://{host}/{repository}:{tag}")
        registry = artifacts.connect(
            ref,
            artifacts.Connection(
                insecure=plain_http, creds=creds, docker_config=docker_config, timeout=300
            ),
        )
        manifest = layout.manifest()
        for descriptor in [manifest["config"], *manifest["layers"]]:
            digest = descriptor["digest"]
            registry.upload_blob(layout.blob(digest).read_bytes(), digest)
        raw = layout.blob(layout.manifest_digest).read_bytes()
        registry.put_manifest(tag, raw, MANIFEST_TYPE)
    except (ValueError, RegistryError, artifacts.ArtifactCommandError) as error:
        raise ImageError(f"pushing {reference}: {error}") from None
    return layout.manifest_digest


def pull_rootfs(
    reference: str, target: Path, *, plain_http: bool = False, creds: str | None = None
) -> dict[str, Any]:
    """Fetch `reference`, check every digest, unpack its layers into `target`; its config."""
    host, repository, tag = split_reference(reference)
    try:
        registry = artifacts.connect(
            Reference.parse(f"oci://{host}/{repository}:{tag}"),
            artifacts.Connection(insecure=plain_http, creds=creds, timeout=300),
        )
        manifest = registry.manifest(tag).body
        config: dict[str, Any] = json.loads(
            registry.read_blob(manifest["config"]["digest"], max_size=1 << 20)
        )
        target.mkdir(parents=True, exist_ok=True)
        for layer in manifest["layers"]:
            with tempfile.TemporaryDirectory(prefix="sluice-image-layer-") as scratch:
                path = Path(scratch) / "layer"
                registry.download(layer["digest"], path, max_size=int(layer["size"]))
                with tarfile.open(path, mode="r:gz") as tar:
                    tar.extractall(target, filter="tar")
    except (ValueError, RegistryError, artifacts.ArtifactCommandError) as error:
        raise ImageError(f"pulling {reference}: {error}") from None
    return config
