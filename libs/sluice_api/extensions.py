"""The source.extensions.fluxcd.io kinds: ArtifactGenerator (Flux 2.7's source-watcher).

An ArtifactGenerator composes (or splits) the artifacts of sources into
ExternalArtifacts: each entry of `spec.artifacts` copies files selected by
glob from the sources' artifacts into a new artifact. Flux serves it in a
separate controller; Sluice serves it in the source-controller, which holds
the sources' artifacts already. The schema is Flux's v1beta1 API field for
field.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import Field, StringConstraints

from sluice_api.meta import (
    AGE_COLUMN,
    READY_COLUMN,
    STATUS_COLUMN,
    KubeModel,
    PrinterColumn,
    ReconcileStatus,
    Resource,
)

GROUP = "source.extensions.fluxcd.io"
VERSION = "v1beta1"

_ALIAS = r"^[a-z0-9]([a-z0-9_-]*[a-z0-9])?$"
_NAME = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
_ALIAS_REF = r"^@([a-z0-9]([a-z0-9_-]*[a-z0-9])?)$"

RECONCILE_ANNOTATION = "source.extensions.fluxcd.io/reconcile"
"""`disabled` on an ArtifactGenerator suspends it (there is no spec.suspend)."""
GENERATOR_LABEL = "source.extensions.fluxcd.io/generator"
"""Set on the ExternalArtifacts a generator made, to its name; with the
ExternalArtifact's spec.sourceRef it tells whose an artifact is."""
ORIGIN_REVISION_ANNOTATION = "org.opencontainers.image.revision"


class GeneratorReason(StrEnum):
    """Reasons of an ArtifactGenerator's conditions: Flux source-watcher's."""

    VALIDATION_FAILED = "ValidationFailed"
    ACCESS_DENIED = "AccessDenied"
    SOURCE_FETCH_FAILED = "SourceFetchFailed"
    BUILD_FAILED = "BuildFailed"
    RECONCILIATION_DISABLED = "ReconciliationDisabled"


class ArtifactSourceReference(KubeModel):
    """A source whose artifact the generator reads."""

    alias: Annotated[str, StringConstraints(pattern=_ALIAS, max_length=63)]
    """Name of the source within the generator, used as `@alias` in copy operations."""

    name: Annotated[str, StringConstraints(pattern=_NAME, max_length=253)]
    """Name of the source."""

    namespace: Annotated[str, StringConstraints(min_length=1, max_length=63)] | None = None
    """Namespace of the source; the generator's own when not set."""

    kind: Literal["Bucket", "GitRepository", "OCIRepository", "HelmChart", "ExternalArtifact"]
    """Kind of the source."""


class CopyOperation(KubeModel):
    """Files to copy from one source into the generated artifact."""

    from_: Annotated[
        str, StringConstraints(pattern=r"^@([a-z0-9]([a-z0-9_-]*[a-z0-9])?)/(.*)$", max_length=1024)
    ] = Field(alias="from")
    """`@<alias>/<glob>`: the source and the files or directories to copy."""

    to: Annotated[str, StringConstraints(pattern=r"^@(artifact)/(.*)$", max_length=1024)]
    """`@artifact/<path>`: a directory when it ends with `/`, otherwise a file name."""

    exclude: Annotated[list[str], Field(max_length=100)] | None = None
    """Glob patterns of files and directories matched by `from` to leave out."""

    strategy: Literal["Overwrite", "Merge", "Extract"] | None = None
    """`Overwrite` (default) replaces existing files; `Merge` merges YAML files as Helm
    merges values; `Extract` unpacks matched `.tar.gz`/`.tgz` files."""

    optional: bool | None = None
    """When true, a `from` that matches nothing is not an error."""


class OutputArtifact(KubeModel):
    """One ExternalArtifact to generate."""

    name: Annotated[str, StringConstraints(pattern=_NAME, max_length=253)]
    """Name of the ExternalArtifact, in the generator's namespace."""

    revision: Annotated[str, StringConstraints(pattern=_ALIAS_REF, max_length=64)] | None = None
    """`@<alias>`: use that source's revision; default `latest@<digest of the artifact>`."""

    origin_revision: Annotated[str, StringConstraints(pattern=_ALIAS_REF, max_length=64)] | None = (
        None
    )
    """`@<alias>`: record that source's origin revision (e.g. its Git commit) in the
    artifact's `org.opencontainers.image.revision` metadata."""

    copy_: Annotated[list[CopyOperation], Field(min_length=1)] = Field(alias="copy")
    """Copy operations, applied in order; later ones overwrite earlier files."""


class ArtifactGeneratorSpec(KubeModel):
    """Sources to read and artifacts to generate from them."""

    sources: Annotated[list[ArtifactSourceReference], Field(min_length=1, max_length=1000)]
    """The sources whose artifacts are read."""

    artifacts: Annotated[list[OutputArtifact], Field(min_length=1, max_length=1000)]
    """The ExternalArtifacts to generate."""


class ExternalArtifactReference(KubeModel):
    """An ExternalArtifact the generator produced, with the digest it was given."""

    name: str
    """Name of the ExternalArtifact."""

    namespace: str
    """Namespace of the ExternalArtifact."""

    digest: str
    """Digest of the artifact it was given, `sha256:<hex>`."""

    filename: str
    """File name of the artifact in storage."""


class ArtifactGeneratorStatus(ReconcileStatus):
    """Observed state of an ArtifactGenerator."""

    inventory: list[ExternalArtifactReference] | None = None
    """The ExternalArtifacts generated; those that leave spec.artifacts are deleted."""

    observed_sources_digest: str | None = None
    """Digest of the source artifacts the inventory was generated from."""


class ArtifactGenerator(Resource[ArtifactGeneratorSpec, ArtifactGeneratorStatus]):
    """Generates ExternalArtifacts from the artifacts of other sources."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "ArtifactGenerator"
    PLURAL: ClassVar[str] = "artifactgenerators"
    SINGULAR: ClassVar[str] = "artifactgenerator"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("ag",)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        AGE_COLUMN,
        PrinterColumn(name="Ready", type="string", json_path=READY_COLUMN.json_path),
        PrinterColumn(name="Status", type="string", json_path=STATUS_COLUMN.json_path),
    )

    spec: ArtifactGeneratorSpec
    status: ArtifactGeneratorStatus = Field(default_factory=ArtifactGeneratorStatus)
