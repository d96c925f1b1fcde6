"""The HelmRelease kind: its spec and status under the names the API server serves."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from sluice_api.helm.common import GROUP, VERSION
from sluice_api.helm.spec import HelmReleaseSpec
from sluice_api.helm.status import HelmReleaseStatus
from sluice_api.meta import AGE_COLUMN, READY_COLUMN, STATUS_COLUMN, PrinterColumn, Resource


class HelmRelease(Resource[HelmReleaseSpec, HelmReleaseStatus]):
    """A Helm release installed and kept up to date from a chart source."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "HelmRelease"
    PLURAL: ClassVar[str] = "helmreleases"
    SINGULAR: ClassVar[str] = "helmrelease"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("hr",)
    CATEGORIES: ClassVar[tuple[str, ...]] = ("all", "fluxcd", "fluxcd-helmreleases")
    EXTRA_VERSIONS: ClassVar[tuple[str, ...]] = ("v2beta2", "v2beta1")
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        AGE_COLUMN,
        READY_COLUMN,
        STATUS_COLUMN,
    )

    spec: HelmReleaseSpec
    status: HelmReleaseStatus = Field(default_factory=HelmReleaseStatus)
