"""Helm's release Secrets (`sh.helm.release.v1.<name>.v<N>`), decoded within limits.

A release is base64 of gzipped JSON, inside the Secret's own base64. The
Secrets sit in the release's namespace, where a tenant may write them: a
725 kB Secret can hold a gzip bomb of gigabytes. So a release is inflated in
bounded chunks and refused past `MAX_RELEASE_SIZE` (StorageError, whose
message the caller prefixes with the Secret's name). The helm-controller
reads its release history this way, and the CLI a release's manifest.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import zlib
from typing import Any

from sluice_runtime import yamlloading

RELEASE_NAME_MAX = 53


def release_name(name: str, target_namespace: str | None, release: str | None) -> str:
    """`spec.releaseName`, else `[<targetNamespace>-]<name>`, shortened as Flux does:
    past 53 characters, the first 40 and 12 hex digits of its SHA-256."""
    if release:
        return release
    full = f"{target_namespace}-{name}" if target_namespace else name
    if len(full) <= RELEASE_NAME_MAX:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:12]
    return f"{full[:40]}-{digest}"


MAX_RELEASE_SIZE = 16 << 20
"""Bytes a stored release may inflate to. The API server keeps a Secret under
1 MiB, so a real release's gzipped JSON is under 768 KiB and its JSON a few
MiB (text compresses 4-8x); Helm's own storage sets no limit, a 725 kB bomb
inflates to gigabytes."""
_CHUNK = 1 << 16


class StorageError(ValueError):
    """A release Secret cannot be read, or its snapshot cannot go into status;
    the message names the Secret and what is wrong."""


def inflate(raw: bytes, *, limit: int = MAX_RELEASE_SIZE) -> bytes:
    """`raw` gunzipped, refusing (StorageError) once the output passes `limit` bytes.

    Inflated in chunks of at most 64 KiB of output, so a bomb costs at most
    `limit` plus one chunk of memory before it is refused.
    """
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = bytearray()
    pending = raw
    try:
        while pending and not inflater.eof:
            out += inflater.decompress(pending, _CHUNK)
            if len(out) > limit:
                raise StorageError(f"inflates to more than {limit >> 20} MiB")
            pending = inflater.unconsumed_tail
    except zlib.error as error:
        raise StorageError(f"is not valid gzip: {error}") from None
    if not inflater.eof:
        raise StorageError("is truncated gzip")
    return bytes(out)


def decode_release(encoded: str, *, limit: int = MAX_RELEASE_SIZE) -> dict[str, Any]:
    """The release JSON held in a Secret's `data.release` (still base64 from the API)."""
    try:
        raw = base64.b64decode(base64.b64decode(encoded, validate=True), validate=True)
    except (binascii.Error, ValueError):
        raise StorageError("is not base64") from None
    if raw[:2] == b"\x1f\x8b":
        raw = inflate(raw, limit=limit)
    elif len(raw) > limit:
        raise StorageError(f"is larger than {limit >> 20} MiB")
    try:
        release = json.loads(raw)
    except (ValueError, RecursionError) as error:
        raise StorageError(f"is not a release: {error}") from None
    if not isinstance(release, dict):
        raise StorageError("is not a release: not a JSON object")
    return release


def stored_version(secret: dict[str, Any]) -> int:
    """The release version a storage Secret holds: Helm's `version` label, else its name's
    `.v<N>`; 0 when neither is a number."""
    meta = secret.get("metadata") or {}
    label = str((meta.get("labels") or {}).get("version") or "")
    if not label.isdigit():
        label = str(meta.get("name") or "").rpartition(".v")[2]
    return int(label) if label.isdigit() and len(label) < 19 else 0


MANIFEST_LIMITS = yamlloading.YamlLimits(max_bytes=MAX_RELEASE_SIZE, max_nodes=2_000_000)
"""A release's manifest is at most what its release inflates to."""


def release_objects(release: dict[str, Any]) -> list[dict[str, Any]]:
    """The objects of a decoded release's `manifest`, as helm applied them.

    Raises StorageError when the manifest is not YAML (or over its limits).
    """
    try:
        documents = yamlloading.load_all(str(release.get("manifest") or ""), limits=MANIFEST_LIMITS)
    except yamlloading.YAMLError as error:
        raise StorageError(f"has a manifest that is not YAML: {error}") from None
    return [d for d in documents if isinstance(d, dict) and d.get("kind")]
