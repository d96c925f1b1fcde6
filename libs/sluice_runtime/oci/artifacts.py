"""Flux's OCI artifact layout: media types, annotations, and the manifest.

`flux push artifact` stores a directory as an OCI image manifest with one
config blob (`application/vnd.cncf.flux.config.v1+json`) and one layer, a
gzip tarball (`application/vnd.cncf.flux.content.v1.tar+gzip`); the
manifest's OpenContainers annotations say where the content came from
(`source`, `revision`) and when it was packed (`created`). Consumers
(Flux's source-controller and ours) select the layer by media type and
never read the config, so its content is only a placeholder: `{}`.

The manifest is serialized canonically (sorted keys, no spaces), so its
digest depends only on its content: the same layer and annotations give
the same digest, which is what makes `--reproducible` pushes reproducible.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST_MEDIA_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_TYPES = (MANIFEST_MEDIA_TYPE, DOCKER_MANIFEST_MEDIA_TYPE)
CONFIG_MEDIA_TYPE = "application/vnd.cncf.flux.config.v1+json"
CONTENT_MEDIA_TYPE = "application/vnd.cncf.flux.content.v1.tar+gzip"

SOURCE_ANNOTATION = "org.opencontainers.image.source"
REVISION_ANNOTATION = "org.opencontainers.image.revision"
CREATED_ANNOTATION = "org.opencontainers.image.created"
REPRODUCIBLE_CREATED = "1970-01-01T00:00:00Z"
"""What `flux push artifact --reproducible` writes as the creation time."""

EMPTY_CONFIG = b"{}"


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int

    @classmethod
    def of(cls, data: bytes, media_type: str) -> Descriptor:
        return cls(media_type, "sha256:" + hashlib.sha256(data).hexdigest(), len(data))

    def as_json(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


def manifest_annotations(
    *, source: str, revision: str, created: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The manifest's annotations; `extra` cannot override the three Flux sets."""
    found = dict(extra or {})
    found[CREATED_ANNOTATION] = created
    if source:
        found[SOURCE_ANNOTATION] = source
    if revision:
        found[REVISION_ANNOTATION] = revision
    return found


def manifest(*, config: Descriptor, layer: Descriptor, annotations: Mapping[str, str]) -> bytes:
    """The canonical bytes of a one-layer Flux artifact manifest."""
    body: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": config.as_json(),
        "layers": [layer.as_json()],
    }
    if annotations:
        body["annotations"] = dict(annotations)
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def content_layer(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The layer holding the content: Flux's media type first, else the only layer."""
    layers = [layer for layer in body.get("layers") or [] if isinstance(layer, dict)]
    for layer in layers:
        if layer.get("mediaType") == CONTENT_MEDIA_TYPE:
            return layer
    return layers[0] if len(layers) == 1 else None
