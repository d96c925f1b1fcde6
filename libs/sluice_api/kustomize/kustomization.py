"""The Kustomization kind: its spec and status under the names the API server serves."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from sluice_api.kustomize.common import GROUP, VERSION
from sluice_api.kustomize.spec import KustomizationSpec
from sluice_api.kustomize.status import KustomizationStatus
from sluice_api.meta import AGE_COLUMN, READY_COLUMN, STATUS_COLUMN, PrinterColumn, Resource


class Kustomization(Resource[KustomizationSpec, KustomizationStatus]):
    """Builds manifests from a source artifact and applies them to the cluster."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "Kustomization"
    PLURAL: ClassVar[str] = "kustomizations"
    SINGULAR: ClassVar[str] = "kustomization"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("ks",)
    EXTRA_VERSIONS: ClassVar[tuple[str, ...]] = ("v1beta2", "v1beta1")
    CATEGORIES: ClassVar[tuple[str, ...]] = ("all", "fluxcd", "fluxcd-appliers")
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        AGE_COLUMN,
        READY_COLUMN,
        STATUS_COLUMN,
        PrinterColumn(name="Revision", type="string", json_path=".status.lastAppliedRevision"),
    )

    spec: KustomizationSpec
    status: KustomizationStatus = Field(default_factory=KustomizationStatus)
