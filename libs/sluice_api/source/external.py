"""ExternalArtifact: an artifact another controller produces (source.toolkit.fluxcd.io/v1)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from sluice_api.meta import (
    AGE_COLUMN,
    READY_COLUMN,
    STATUS_COLUMN,
    KubeModel,
    PrinterColumn,
    Resource,
)
from sluice_api.source.common import (
    CATEGORIES,
    GROUP,
    VERSION,
    SourceStatus,
)


class ExternalArtifactSourceReference(KubeModel):
    """The custom resource an ExternalArtifact was produced from."""

    api_version: str | None = None
    """API version of the referent."""

    kind: str
    """Kind of the referent."""

    name: str
    """Name of the referent."""

    namespace: str | None = None
    """Namespace of the referent; the ExternalArtifact's namespace when not set."""


class ExternalArtifactSpec(KubeModel):
    """What an ExternalArtifact was produced from (RFC-0012, Flux 2.7)."""

    source_ref: ExternalArtifactSourceReference | None = None
    """The custom resource the producing controller built the artifact from."""


class ExternalArtifact(Resource[ExternalArtifactSpec, SourceStatus]):
    """An artifact produced and served by a controller other than the source-controller.

    Nothing reconciles it as such: its producer (an ArtifactGenerator, served
    by the source-controller, or another controller) writes `status.artifact`
    and Ready, and Kustomizations consume it like any other source.
    """

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "ExternalArtifact"
    PLURAL: ClassVar[str] = "externalartifacts"
    SINGULAR: ClassVar[str] = "externalartifact"
    CATEGORIES: ClassVar[tuple[str, ...]] = CATEGORIES
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn(name="Ready", type="string", json_path=READY_COLUMN.json_path),
        PrinterColumn(name="Status", type="string", json_path=STATUS_COLUMN.json_path),
        PrinterColumn(name="Source", type="string", json_path=".spec.sourceRef.name"),
        AGE_COLUMN,
    )

    spec: ExternalArtifactSpec = Field(default_factory=ExternalArtifactSpec)
    status: SourceStatus = Field(default_factory=SourceStatus)
