"""HelmRepository and HelmChart: chart repositories and the charts built from them
(Flux's source.toolkit.fluxcd.io/v1)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from sluice_api.meta import (
    AGE_COLUMN,
    ARTIFACT_REVISION_COLUMN,
    READY_COLUMN,
    STATUS_COLUMN,
    Duration,
    KubeModel,
    LocalObjectReference,
    PrinterColumn,
    Resource,
    TimeoutDuration,
)
from sluice_api.source.common import (
    CATEGORIES,
    GROUP,
    URL_SOURCE_COLUMNS,
    VERSION,
    AccessFrom,
    HelmRepositoryURL,
    OCIRepositoryVerification,
    SourceStatus,
)

# HelmRepository ---------------------------------------------------------------


class HelmRepositorySpec(KubeModel):
    """How to produce an artifact from a Helm repository index."""

    url: HelmRepositoryURL
    """Repository address: http(s):// for an index, oci:// for a registry."""

    secret_ref: LocalObjectReference | None = None
    """Secret with `username` and `password` for basic authentication."""

    cert_secret_ref: LocalObjectReference | None = None
    """Secret with a client certificate (`tls.crt`, `tls.key`) and/or a CA
    certificate (`ca.crt`); takes precedence over TLS keys in secretRef."""

    pass_credentials: bool = False
    """Send the credentials to chart hosts other than the repository's host."""

    interval: Duration | None = None
    """How often to fetch the index; not used for `type: oci`."""

    insecure: bool = False
    """Allow a registry over plain HTTP; only for `type: oci`."""

    timeout: TimeoutDuration | None = None
    """Timeout for fetching the index or pulling charts; 60s when not set."""

    suspend: bool = False
    """Stop reconciling this object."""

    access_from: AccessFrom | None = None
    """Cross-namespace access control list (provisional, not enforced)."""

    type: Literal["default", "oci"] | None = None
    """`oci` for a Helm OCI registry (the URL must start with oci://)."""

    provider: Literal["generic", "aws", "azure", "gcp"] = "generic"
    """Authentication provider for `type: oci`; `generic` uses secretRef."""

    gates: list[LocalObjectReference] | None = None
    """Sluice: Gates that must be open before a new index is fetched."""


class HelmRepositoryStatus(SourceStatus):
    """Observed state of a HelmRepository."""


class HelmRepository(Resource[HelmRepositorySpec, HelmRepositoryStatus]):
    """A Helm chart repository to produce index artifacts from."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "HelmRepository"
    PLURAL: ClassVar[str] = "helmrepositories"
    SINGULAR: ClassVar[str] = "helmrepository"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("helmrepo",)
    CATEGORIES: ClassVar[tuple[str, ...]] = CATEGORIES
    EXTRA_VERSIONS: ClassVar[tuple[str, ...]] = ("v1beta2", "v1beta1")
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = URL_SOURCE_COLUMNS

    spec: HelmRepositorySpec
    status: HelmRepositoryStatus = Field(default_factory=HelmRepositoryStatus)


# HelmChart --------------------------------------------------------------------


class LocalHelmChartSourceReference(KubeModel):
    """The source, in the same namespace, a chart is taken from."""

    api_version: str | None = None
    """API version of the referent."""

    kind: Literal["HelmRepository", "GitRepository", "Bucket"]
    """Kind of the referent."""

    name: str
    """Name of the referent."""


class HelmChartSpec(KubeModel):
    """How to produce a packaged Helm chart artifact."""

    chart: str
    """Name of the chart in a HelmRepository, or its path in a Git or Bucket source."""

    version: str = "*"
    """SemVer range of chart versions; ignored for Git and Bucket sources."""

    source_ref: LocalHelmChartSourceReference
    """The source the chart is taken from."""

    interval: Duration
    """How often to check the source for a new chart."""

    reconcile_strategy: Literal["ChartVersion", "Revision"] = "ChartVersion"
    """What makes a new artifact: a new chart version, or a new source revision."""

    values_files: list[str] | None = None
    """Values files in the source, merged in order, replacing values.yaml."""

    values_file: str | None = None
    """Deprecated: a single values file, merged before valuesFiles."""

    ignore_missing_values_files: bool = False
    """Skip values files that do not exist instead of failing."""

    suspend: bool = False
    """Stop reconciling this object."""

    access_from: AccessFrom | None = None
    """Cross-namespace access control list (provisional, not enforced)."""

    verify: OCIRepositoryVerification | None = None
    """Verify the chart's signature; only for HelmRepositories of `type: oci`."""

    gates: list[LocalObjectReference] | None = None
    """Sluice: Gates that must be open before a new chart is built."""


class HelmChartStatus(SourceStatus):
    """Observed state of a HelmChart."""

    observed_source_artifact_revision: str | None = None
    """The revision of the source artifact last seen."""

    observed_chart_name: str | None = None
    """The chart name of the last resolved chart reference."""

    observed_values_files: list[str] | None = None
    """The values files the current artifact was built with."""


class HelmChart(Resource[HelmChartSpec, HelmChartStatus]):
    """A Helm chart to package from a source."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "HelmChart"
    PLURAL: ClassVar[str] = "helmcharts"
    SINGULAR: ClassVar[str] = "helmchart"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("hc",)
    CATEGORIES: ClassVar[tuple[str, ...]] = CATEGORIES
    EXTRA_VERSIONS: ClassVar[tuple[str, ...]] = ("v1beta2", "v1beta1")
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn(name="Chart", type="string", json_path=".spec.chart"),
        PrinterColumn(name="Version", type="string", json_path=".spec.version"),
        PrinterColumn(name="Source Kind", type="string", json_path=".spec.sourceRef.kind"),
        PrinterColumn(name="Source Name", type="string", json_path=".spec.sourceRef.name"),
        AGE_COLUMN,
        READY_COLUMN,
        STATUS_COLUMN,
        ARTIFACT_REVISION_COLUMN,
    )

    spec: HelmChartSpec
    status: HelmChartStatus = Field(default_factory=HelmChartStatus)
