"""An OCI registry on loopback, and Flux-style artifacts pushed to it with oras.

The registry is Debian bookworm's `docker-registry` (CNCF distribution 2.8),
fetched into the cache by debian.py, storing blobs in its work directory.
It can demand htpasswd basic auth (distribution accepts bcrypt hashes only;
libxcrypt, which every Debian system has, makes them) and serve TLS with a
certificate from a fresh test CA.

Artifacts are pushed the way `flux push artifact` lays them out: one
tar.gz layer and a config blob, each with Flux's media type.
"""

from __future__ import annotations

import base64
import ctypes
import gzip
import hashlib
import io
import json
import re
import secrets
import ssl
import tarfile
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import oras.client
import yaml

from sluice_envtest.certificates import make_serving_pki
from sluice_envtest.controlplane import free_port
from sluice_envtest.debian import fetch_packages
from sluice_envtest.processes import ChildServer, spawn
from sluice_runtime.oci.artifacts import CONFIG_MEDIA_TYPE, CONTENT_MEDIA_TYPE

FLUX_CONTENT_MEDIA_TYPE = CONTENT_MEDIA_TYPE
FLUX_CONFIG_MEDIA_TYPE = CONFIG_MEDIA_TYPE
REGISTRY_PACKAGE = "docker-registry"


def make_tarball(files: Mapping[str, str | bytes]) -> bytes:
    """A gzipped tarball of `files`, byte-for-byte the same for the same files."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in sorted(files):
            content = files[name]
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def bcrypt_hash(password: str) -> str:
    """A `$2b$` bcrypt hash, as htpasswd -B makes, from the system's libxcrypt."""
    with _CRYPT_LOCK:
        library = ctypes.CDLL("libcrypt.so.1")
        library.crypt_gensalt.restype = ctypes.c_char_p
        library.crypt_gensalt.argtypes = [
            ctypes.c_char_p,
            ctypes.c_ulong,
            ctypes.c_char_p,
            ctypes.c_int,
        ]
        library.crypt.restype = ctypes.c_char_p
        library.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        salt = library.crypt_gensalt(b"$2b$", 10, None, 0)
        hashed = library.crypt(password.encode(), salt) if salt else None
    if not hashed or not hashed.startswith(b"$2b$"):
        raise RuntimeError("libcrypt could not make a bcrypt hash")
    return str(hashed.decode())


# crypt() answers in a static buffer.
_CRYPT_LOCK = threading.Lock()


class OciRegistry(ChildServer):
    name = "docker-registry"

    """docker-registry on http(s)://127.0.0.1:PORT; `host` is what references start with.

    Use as a context manager or call `start()` and `stop()`. With `username`
    and `password`, every request needs them (htpasswd basic auth).
    """

    def __init__(
        self,
        *,
        workdir: Path | None = None,
        port: int | None = None,
        username: str | None = None,
        password: str | None = None,
        tls: bool = False,
    ) -> None:
        if (username is None) != (password is None):
            raise ValueError("username and password go together")
        super().__init__(workdir, prefix="sluice-registry-", log_name="registry.log")
        self.port = port or free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.tls = tls
        self.url = f"{'https' if tls else 'http'}://{self.host}"
        self.username = username
        self.password = password
        self.ca_pem: bytes | None = None
        self.ca_file: Path | None = None

    def reference(self, repository: str, tag: str | None = None) -> str:
        """`127.0.0.1:PORT/<repository>[:tag]`, as oras and docker write it."""
        return f"{self.host}/{repository}" + (f":{tag}" if tag else "")

    def oci_url(self, repository: str) -> str:
        """`oci://127.0.0.1:PORT/<repository>`, an OCIRepository's spec.url."""
        return f"oci://{self.host}/{repository}"

    @property
    def docker_config(self) -> dict[str, Any]:
        """The `.dockerconfigjson` of a kubernetes.io/dockerconfigjson Secret for this registry."""
        if self.username is None or self.password is None:
            return {"auths": {}}
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return {
            "auths": {
                self.host: {"username": self.username, "password": self.password, "auth": token}
            }
        }

    def client(self) -> oras.client.OrasClient:
        """An oras client for this registry, trusting its CA and logged in if need be."""
        client = oras.client.OrasClient(
            hostname=self.host,
            insecure=not self.tls,
            tls_verify=str(self.ca_file) if self.ca_file else True,
            auth_backend="basic" if self.username else "token",
        )
        if self.username is not None and self.password is not None:
            client.auth.set_basic_auth(self.username, self.password)
        return client

    def push_artifact(
        self,
        repository: str,
        tag: str,
        *,
        files: Mapping[str, str | bytes] | None = None,
        layer: bytes | None = None,
        media_type: str = FLUX_CONTENT_MEDIA_TYPE,
        config_media_type: str = FLUX_CONFIG_MEDIA_TYPE,
        annotations: Mapping[str, str] | None = None,
    ) -> str:
        """Push one layer (`layer` as given, or a tarball of `files`); the manifest digest."""
        if (files is None) == (layer is None):
            raise ValueError("give either files or layer")
        blob = layer if layer is not None else make_tarball(files or {})
        with tempfile.TemporaryDirectory(prefix="sluice-oras-") as tmp:
            layer_path = Path(tmp) / "artifact.tar.gz"
            layer_path.write_bytes(blob)
            config_path = Path(tmp) / "config.json"
            config_path.write_text("{}")
            response = self.client().push(
                target=self.reference(repository, tag),
                files=[f"{layer_path}:{media_type}"],
                manifest_config=f"{config_path}:{config_media_type}",
                manifest_annotations=dict(annotations or {}),
                disable_path_validation=True,
                quiet=True,
            )
        digest = response.headers.get("Docker-Content-Digest")
        if not digest:
            raise RuntimeError(f"the registry returned no digest for {repository}:{tag}")
        return str(digest)

    def push_cosign_signature(
        self, repository: str, digest: str, *, payloads: list[tuple[bytes, str]]
    ) -> None:
        """Store signatures of manifest `digest` as cosign does: the manifest tagged
        `sha256-<hex>.sig`, one simple-signing layer per (payload, base64 signature)."""
        config = b"{}"
        layers = []
        for payload, signature in payloads:
            layers.append(
                {
                    "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
                    "size": len(payload),
                    "digest": self._upload_blob(repository, payload),
                    "annotations": {"dev.cosignproject.cosign/signature": signature},
                }
            )
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "size": len(config),
                "digest": self._upload_blob(repository, config),
            },
            "layers": layers,
        }
        tag = digest.replace(":", "-") + ".sig"
        answer = self.client().do_request(
            f"{self.url}/v2/{repository}/manifests/{tag}",
            "PUT",
            data=json.dumps(manifest).encode(),
            headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
        )
        if answer.status_code != 201:
            raise RuntimeError(f"pushing {repository}:{tag}: {answer.status_code} {answer.text}")

    def _upload_blob(self, repository: str, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        client = self.client()
        started = client.do_request(f"{self.url}/v2/{repository}/blobs/uploads/", "POST")
        if started.status_code != 202:
            raise RuntimeError(f"starting a blob upload to {repository}: {started.status_code}")
        location = urljoin(f"{self.url}/", started.headers["Location"])
        separator = "&" if "?" in location else "?"
        done = client.do_request(
            f"{location}{separator}digest={digest}",
            "PUT",
            data=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        if done.status_code != 201:
            raise RuntimeError(f"uploading a blob to {repository}: {done.status_code}")
        return digest

    def tags(self, repository: str) -> list[str]:
        return list(self.client().get_tags(self.reference(repository)))

    def manifest(self, repository: str, reference: str) -> dict[str, Any]:
        """The manifest under a tag or digest."""
        separator = "@" if reference.startswith("sha256:") else ":"
        found: dict[str, Any] = self.client().get_manifest(
            f"{self.host}/{repository}{separator}{reference}"
        )
        return found

    def delete(self, repository: str, what: str, digest: str) -> None:
        """DELETE a manifest or blob (`what` is `manifests` or `blobs`) by digest."""
        scheme = "https" if self.tls else "http"
        answer = self.client().do_request(
            f"{scheme}://{self.host}/v2/{repository}/{what}/{digest}", "DELETE"
        )
        if answer.status_code != 202:
            raise RuntimeError(f"deleting {repository}/{what}/{digest}: {answer.status_code}")

    def blob_file(self, digest: str) -> Path:
        """Where the registry keeps a blob (layers and manifests alike) on disk.

        distribution's filesystem driver serves this file as it finds it, so a
        test that rewrites it plays a registry, or a path to it, that hands out
        other bytes than the digest names.
        """
        algorithm, _, hex_digest = digest.partition(":")
        return (
            self.workdir / "storage" / "docker" / "registry" / "v2" / "blobs"
            / algorithm / hex_digest[:2] / hex_digest / "data"
        )  # fmt: skip

    def blob_downloads(self, repository: str) -> int:
        """How many GETs of `repository`'s blobs the registry has answered (its access log)."""
        request = re.compile(rf'"GET /v2/{re.escape(repository)}/blobs/sha256:[0-9a-f]{{64}} HTTP/')
        return len(request.findall(self.log_file.read_text(errors="replace")))

    def pull(self, repository: str, tag: str, *, outdir: Path) -> list[Path]:
        """Download the artifact's layers into `outdir`, named by their title annotation."""
        pulled = self.client().pull(target=self.reference(repository, tag), outdir=str(outdir))
        return [Path(p) for p in pulled]

    def start(self, *, timeout: float = 30.0) -> None:
        packages = fetch_packages([REGISTRY_PACKAGE], binaries=["usr/bin/docker-registry"])
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        process = spawn(
            [str(packages.path("usr/bin/docker-registry")), "serve", str(config)],
            log=self.log_file,
            env=packages.environ(),
            cwd=self.workdir,
        )
        self._launched(process, self._answers, timeout=timeout)

    def _write_config(self) -> Path:
        http: dict[str, Any] = {
            "addr": self.host,
            "secret": secrets.token_hex(16),
            "headers": {"X-Content-Type-Options": ["nosniff"]},
        }
        if self.tls:
            pki = make_serving_pki()
            tls_dir = self.workdir / "tls"
            tls_dir.mkdir(exist_ok=True)
            files = pki.write(tls_dir)
            self.ca_pem = pki.ca.cert
            self.ca_file = files["ca.crt"]
            http["tls"] = {"certificate": str(files["tls.crt"]), "key": str(files["tls.key"])}
        config: dict[str, Any] = {
            "version": 0.1,
            "log": {"level": "info", "formatter": "text", "fields": {"service": "registry"}},
            "storage": {
                "filesystem": {"rootdirectory": str(self.workdir / "storage")},
                "delete": {"enabled": True},
                "cache": {"blobdescriptor": "inmemory"},
            },
            "http": http,
            "health": {"storagedriver": {"enabled": False}},
        }
        if self.username is not None and self.password is not None:
            htpasswd = self.workdir / "htpasswd"
            htpasswd.write_text(f"{self.username}:{bcrypt_hash(self.password)}\n")
            config["auth"] = {"htpasswd": {"realm": "sluice-test-registry", "path": str(htpasswd)}}
        path = self.workdir / "config.yml"
        path.write_text(yaml.safe_dump(config))
        return path

    def _answers(self) -> bool:
        context = None
        if self.ca_file is not None:
            context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(  # noqa: S310 - our own URL
                f"{self.url}/v2/", context=context, timeout=1
            ) as answer:
                return bool(answer.status == 200)
        except urllib.error.HTTPError as error:
            return error.code == 401  # up, and asking for credentials
        except (urllib.error.URLError, OSError):
            return False
