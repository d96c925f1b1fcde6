"""What `sluice push|pull|tag artifact` and `sluice list|diff artifacts` do, without argparse.

The content layer is the source-controller's own tarball (`archiving`):
same tree, same bytes, so with `--reproducible` the same tree gives the
same manifest digest, and `diff` can compare a tree with a pushed artifact
by packing both the same way. Pulls unpack with the controllers' checked
extractor (`fetching.extract_tarball`), bounded in bytes and entries.

Ignore rules are `.sourceignore` files in the tree plus `--ignore-paths`
(gitignore syntax), as for a GitRepository whose `spec.ignore` is set.
Without `--ignore-paths`, media and archives are left out, the default
`flux push|diff artifact` give that flag (Flux's `ExcludeExt`; giving the
flag replaces it, as there): a tree holding a logo packs as Flux packs it,
and `diff` against an artifact Flux pushed finds no change. Flux's CI
exclusions are not applied (`flux push` does not apply them), and the VCS
files (`.git/`, `.gitignore`, ...) are never packed, whatever the flag says.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sluice_api.meta import format_time
from sluice_runtime.artifacts.archiving import write_tarball
from sluice_runtime.artifacts.fetching import extract_tarball
from sluice_runtime.artifacts.ignoring import MEDIA_PATTERNS, IgnoreRules
from sluice_runtime.oci import artifacts as layout
from sluice_runtime.oci.hosts import login_server
from sluice_runtime.oci.registry import (
    Hints,
    Manifest,
    Reference,
    Registry,
    RegistryError,
    credentials_for,
)
from sluice_runtime.versions import matching_tags, parse_range

DEFAULT_TAG = "latest"
DEFAULT_MAX_SIZE = 512 << 20
"""As the source-controller's --artifact-max-size."""
DEFAULT_MAX_FILES = 100_000
"""As the source-controller's --artifact-max-files."""

DEFAULT_IGNORE_PATHS = MEDIA_PATTERNS
"""What `--ignore-paths` is when not given, as in `flux push|diff artifact`."""

HINTS = Hints(
    tls="a plain-HTTP registry needs --insecure-registry, a private CA --ca-file",
    credentials="--creds, or `docker login` for the Docker config file",
)


class ArtifactCommandError(Exception):
    """A problem the user can fix, in one line."""


@dataclass(frozen=True, kw_only=True)
class Connection:
    """How to reach and log in to the registry."""

    insecure: bool = False
    ca_file: str | None = None
    creds: str | None = None
    """`user[:password]`, as Flux's --creds; else the Docker config file's."""
    docker_config: Path | None = None
    timeout: float = 60.0


def docker_config_path() -> Path:
    """`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`, as docker reads it."""
    base = os.environ.get("DOCKER_CONFIG")
    return Path(base) / "config.json" if base else Path.home() / ".docker" / "config.json"


def connect(ref: Reference, conn: Connection) -> Registry:
    username = password = None
    if conn.creds:
        username, _, password = conn.creds.partition(":")
    else:
        username, password = docker_credentials(conn.docker_config or docker_config_path(), ref)
    if conn.ca_file is not None and not Path(conn.ca_file).is_file():
        raise ArtifactCommandError(f"CA file '{conn.ca_file}' does not exist")
    return Registry(
        ref.url,
        insecure=conn.insecure,
        ca_file=conn.ca_file,
        username=username,
        password=password,
        timeout=conn.timeout,
        hints=HINTS,
    )


def docker_credentials(path: Path, ref: Reference) -> tuple[str | None, str | None]:
    """What `docker login` left for the registry: inline in the file, else from its helper.

    None, None (anonymous) when the file or an entry for the host is absent,
    so public registries work without a login.
    """
    try:
        text = path.read_text()
        config = json.loads(text)
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as error:
        raise ArtifactCommandError(f"cannot read Docker config {path}: {error}") from None
    try:
        username, password = credentials_for(text, ref.url.host)
    except (ValueError, UnicodeError) as error:
        raise ArtifactCommandError(f"Docker config {path}: {error}") from None
    if username is not None:
        return username, password
    helpers = config.get("credHelpers") or {}
    server = login_server(ref.url.host)
    helper = helpers.get(ref.url.host) or helpers.get(server) or config.get("credsStore")
    return _from_helper(str(helper), server) if helper else (None, None)


def _from_helper(helper: str, host: str) -> tuple[str | None, str | None]:
    """Ask `docker-credential-<helper> get`, docker's credential helper protocol."""
    program = f"docker-credential-{helper}"
    try:
        done = subprocess.run(
            [program, "get"], input=host, capture_output=True, text=True, timeout=30, check=False
        )
    except FileNotFoundError:
        raise ArtifactCommandError(
            f"the Docker config names credential helper '{helper}' but {program} is not on PATH"
        ) from None
    except subprocess.TimeoutExpired:
        raise ArtifactCommandError(f"{program} did not answer within 30s") from None
    if done.returncode != 0:
        if "credentials not found" in done.stdout + done.stderr:
            return None, None
        raise ArtifactCommandError(f"{program} failed with exit code {done.returncode}")
    try:
        answer = json.loads(done.stdout)
        return str(answer["Username"]), str(answer["Secret"])
    except (ValueError, KeyError, TypeError):
        raise ArtifactCommandError(f"{program} answered something other than credentials") from None


def ignore_paths(values: Sequence[str] | None) -> list[str]:
    """The patterns of every `--ignore-paths` given (repeated or comma-separated),
    or the default when the flag was not given at all."""
    if values is None:
        return list(DEFAULT_IGNORE_PATHS)
    return [p.strip() for value in values for p in value.split(",") if p.strip()]


def pack(path: Path, *, ignore_paths: Sequence[str]) -> bytes:
    """The content layer of `path` (a directory, or one file put at the archive's root)."""
    if not path.exists():
        raise ArtifactCommandError(f"path '{path}' does not exist")
    out = io.BytesIO()
    if path.is_dir():
        try:
            rules = IgnoreRules.load(path, spec_ignore="\n".join(ignore_paths))
        except ValueError as error:
            raise ArtifactCommandError(f"--ignore-paths: {error}") from None
        write_tarball(path, out, ignore=rules)
        return out.getvalue()
    if not path.is_file():
        raise ArtifactCommandError(f"path '{path}' is neither a directory nor a file")
    with tempfile.TemporaryDirectory(prefix="sluice-pack-") as tmp:
        shutil.copy(path, Path(tmp) / path.name)
        write_tarball(Path(tmp), out, ignore=None)
    return out.getvalue()


def created_now() -> str:
    return format_time(datetime.now(UTC), fraction="none")


@dataclass(frozen=True)
class Pushed:
    reference: Reference
    digest: str

    @property
    def url(self) -> str:
        return f"{self.reference.url.host}/{self.reference.url.repository}@{self.digest}"


def push(
    ref: Reference,
    path: Path,
    *,
    source: str,
    revision: str,
    annotations: Mapping[str, str],
    ignore_paths: Sequence[str],
    reproducible: bool,
    conn: Connection,
) -> Pushed:
    if ref.digest or not ref.tag:
        raise ArtifactCommandError(
            f"push needs a tag: oci://{ref.url.host}/{ref.url.repository}:TAG"
        )
    layer = pack(path, ignore_paths=ignore_paths)
    layer_desc = layout.Descriptor.of(layer, layout.CONTENT_MEDIA_TYPE)
    config_desc = layout.Descriptor.of(layout.EMPTY_CONFIG, layout.CONFIG_MEDIA_TYPE)
    created = layout.REPRODUCIBLE_CREATED if reproducible else created_now()
    manifest = layout.manifest(
        config=config_desc,
        layer=layer_desc,
        annotations=layout.manifest_annotations(
            source=source, revision=revision, created=created, extra=annotations
        ),
    )
    registry = connect(ref, conn)
    registry.upload_blob(layout.EMPTY_CONFIG, config_desc.digest)
    registry.upload_blob(layer, layer_desc.digest)
    digest = registry.put_manifest(ref.tag, manifest, layout.MANIFEST_MEDIA_TYPE)
    return Pushed(ref, digest)


def _fetch_manifest(registry: Registry, ref: Reference) -> Manifest:
    return registry.manifest(ref.digest or ref.tag or DEFAULT_TAG)


def _layer_of(manifest: Manifest, ref: Reference) -> str:
    layer = layout.content_layer(manifest.body)
    if layer is None:
        raise ArtifactCommandError(
            f"artifact '{ref.name}' has no layer of type {layout.CONTENT_MEDIA_TYPE}"
        )
    return str(layer.get("digest", ""))


def pull(
    ref: Reference,
    output: Path,
    *,
    conn: Connection,
    max_size: int = DEFAULT_MAX_SIZE,
    max_files: int = DEFAULT_MAX_FILES,
) -> Manifest:
    """Unpack the artifact's content layer into `output` (absent or empty)."""
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise ArtifactCommandError(f"output '{output}' is not an empty directory")
    registry = connect(ref, conn)
    manifest = _fetch_manifest(registry, ref)
    digest = _layer_of(manifest, ref)
    with tempfile.TemporaryDirectory(prefix="sluice-pull-") as tmp:
        blob = Path(tmp) / "layer.tar.gz"
        registry.download(digest, blob, max_size=max_size)
        extract_tarball(blob, output, max_size=max_size, max_members=max_files)
    return manifest


def tag(ref: Reference, new_tag: str, *, conn: Connection) -> Pushed:
    """Store the artifact's manifest, byte for byte, under `new_tag` too."""
    new = Reference.parse(f"oci://{ref.url.host}/{ref.url.repository}:{new_tag}")
    registry = connect(ref, conn)
    manifest = _fetch_manifest(registry, ref)
    digest = registry.put_manifest(new_tag, manifest.raw, manifest.media_type)
    return Pushed(new, digest)


@dataclass(frozen=True)
class Listed:
    tag: str
    digest: str
    source: str
    revision: str

    def as_json(self) -> dict[str, str]:
        return {
            "tag": self.tag,
            "digest": self.digest,
            "source": self.source,
            "revision": self.revision,
        }


def list_artifacts(
    ref: Reference, *, regex: str | None, semver: str | None, conn: Connection
) -> list[Listed]:
    if ref.tag or ref.digest:
        raise ArtifactCommandError("list takes a repository, without a tag or digest")
    registry = connect(ref, conn)
    tags = registry.list_tags()
    if regex:
        try:
            keep = re.compile(regex)
        except re.error as error:
            raise ArtifactCommandError(f"--filter-regex '{regex}': {error}") from None
        tags = [t for t in tags if keep.search(t)]
    if semver:
        try:
            tags = matching_tags(parse_range(semver), tags)
        except ValueError as error:
            raise ArtifactCommandError(f"--filter-semver: {error}") from None
    listed = []
    for found in sorted(tags):
        manifest = registry.manifest(found)
        notes = manifest.body.get("annotations") or {}
        listed.append(
            Listed(
                tag=found,
                digest=manifest.digest,
                source=str(notes.get(layout.SOURCE_ANNOTATION, "")),
                revision=str(notes.get(layout.REVISION_ANNOTATION, "")),
            )
        )
    return listed


def differs(
    ref: Reference,
    path: Path,
    *,
    ignore_paths: Sequence[str],
    conn: Connection,
    max_size: int = DEFAULT_MAX_SIZE,
    max_files: int = DEFAULT_MAX_FILES,
) -> bool:
    """Whether the tree at `path` differs from the pushed artifact's content.

    The same layer digest means the same content. Otherwise the layer may
    still hold the same files packed by another tool (Flux's tarballs keep
    empty directories and other headers), so it is unpacked and packed
    again the way `push` packs, and the bytes compared.
    """
    local = pack(path, ignore_paths=ignore_paths)
    local_digest = layout.Descriptor.of(local, layout.CONTENT_MEDIA_TYPE).digest
    registry = connect(ref, conn)
    digest = _layer_of(_fetch_manifest(registry, ref), ref)
    if digest == local_digest:
        return False
    with tempfile.TemporaryDirectory(prefix="sluice-diff-") as tmp:
        blob, content = Path(tmp) / "layer.tar.gz", Path(tmp) / "content"
        registry.download(digest, blob, max_size=max_size)
        extract_tarball(blob, content, max_size=max_size, max_members=max_files)
        remote = io.BytesIO()
        write_tarball(content, remote, ignore=None)
    return remote.getvalue() != local


def as_json(value: object) -> str:
    return json.dumps(value, indent=2, sort_keys=True)


__all__ = [
    "ArtifactCommandError",
    "Connection",
    "RegistryError",
    "differs",
    "list_artifacts",
    "pull",
    "push",
    "tag",
]
