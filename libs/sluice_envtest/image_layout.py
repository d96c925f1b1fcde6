"""The OCI image layout on disk: deterministic gzip'd tar layers, the config,
manifest and index blobs (sluice_envtest.image fills it, image_registry
pushes and pulls it)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"


class ImageError(RuntimeError):
    """A build or push step failed; the message names it."""


@dataclass(frozen=True)
class Layout:
    """An OCI image layout on disk holding one image."""

    path: Path
    manifest_digest: str

    def blob(self, digest: str) -> Path:
        return self.path / "blobs" / "sha256" / digest.removeprefix("sha256:")

    def manifest(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.blob(self.manifest_digest).read_bytes())
        return loaded


def _entries(tree: Path, *, prefix: str = "") -> Iterator[tuple[str, Path]]:
    for path in sorted(tree.rglob("*")):
        yield prefix + path.relative_to(tree).as_posix(), path


def write_layer(
    out: Path,
    trees: Sequence[Path],
    *,
    files: dict[str, tuple[bytes, int]] | None = None,
    dirs: dict[str, int] | None = None,
) -> tuple[str, str, int]:
    """A gzip'd tar of `trees` (and `files`, `dirs`); its digest, diff_id and size.

    Deterministic: sorted entries, zero times, root ownership.
    """
    raw = hashlib.sha256()
    packed = hashlib.sha256()

    class _Tee(io.RawIOBase):
        def __init__(self, sink: Any) -> None:
            self.sink = sink

        def writable(self) -> bool:
            return True

        def write(self, data: Any) -> int:
            raw.update(data)
            self.sink.write(data)
            return len(data)

    class _Hashing(io.RawIOBase):
        def __init__(self, sink: Any) -> None:
            self.sink = sink
            self.size = 0

        def writable(self) -> bool:
            return True

        def write(self, data: Any) -> int:
            packed.update(data)
            self.size += len(data)
            self.sink.write(data)
            return len(data)

    def normalized(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        return info

    with out.open("wb") as sink:
        hashing = _Hashing(sink)
        with (
            gzip.GzipFile(fileobj=hashing, mode="wb", compresslevel=1, mtime=0) as gz,
            tarfile.open(fileobj=_Tee(gz), mode="w|", format=tarfile.PAX_FORMAT) as tar,
        ):
            for name, mode in sorted((dirs or {}).items()):
                info = tarfile.TarInfo(name)
                info.type, info.mode = tarfile.DIRTYPE, mode
                tar.addfile(normalized(info))
            for tree in trees:
                for name, path in _entries(tree):
                    info = normalized(tar.gettarinfo(str(path), arcname=name))
                    if info.isreg():
                        with path.open("rb") as f:
                            tar.addfile(info, f)
                    else:
                        tar.addfile(info)
            for name, (content, mode) in sorted((files or {}).items()):
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(content), mode
                tar.addfile(normalized(info), io.BytesIO(content))
    digest = f"sha256:{packed.hexdigest()}"
    final = out.parent / packed.hexdigest()
    os.replace(out, final)
    return digest, f"sha256:{raw.hexdigest()}", hashing.size


def write_layout(
    out: Path, *, layers: Sequence[tuple[str, str, int]], config: dict[str, Any], tag: str
) -> Layout:
    """The manifest, index and oci-layout of an image whose layers `write_layer`
    already wrote into `out`'s blobs; `config` is the image config to store."""
    blobs = out / "blobs" / "sha256"
    config_digest, config_size = _write_json_blob(blobs, config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": config_digest, "size": config_size},
        "layers": [
            {"mediaType": LAYER_TYPE, "digest": digest, "size": size} for digest, _, size in layers
        ],
        "annotations": {"org.opencontainers.image.version": tag},
    }
    manifest_digest, manifest_size = _write_json_blob(blobs, manifest)
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": MANIFEST_TYPE,
                "digest": manifest_digest,
                "size": manifest_size,
                "annotations": {"org.opencontainers.image.ref.name": tag},
            }
        ],
    }
    (out / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    (out / "index.json").write_text(json.dumps(index))
    return Layout(out, manifest_digest)


def _write_json_blob(blobs: Path, document: dict[str, Any]) -> tuple[str, int]:
    data = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return f"sha256:{digest}", len(data)
