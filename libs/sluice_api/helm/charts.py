"""Where a HelmRelease's chart comes from: the template of the HelmChart the
controller creates, or a reference to a source that already holds the chart.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import StringConstraints

from sluice_api.meta import Duration, KubeModel, LocalObjectReference


class CrossNamespaceObjectReference(KubeModel):
    """The source a HelmChart template takes its chart from."""

    api_version: str | None = None
    """API version of the referent."""

    kind: Literal["HelmRepository", "GitRepository", "Bucket"]
    """Kind of the referent."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    """Name of the referent."""

    namespace: Annotated[str, StringConstraints(min_length=1, max_length=63)] | None = None
    """Namespace of the referent; the HelmRelease's namespace when not set."""


class CrossNamespaceSourceReference(KubeModel):
    """A source-controller object holding the chart artifact."""

    api_version: str | None = None
    """API version of the referent."""

    kind: Literal["OCIRepository", "HelmChart", "ExternalArtifact"]
    """Kind of the referent (ExternalArtifact: Flux 2.7)."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    """Name of the referent."""

    namespace: Annotated[str, StringConstraints(min_length=1, max_length=63)] | None = None
    """Namespace of the referent; the HelmRelease's namespace when not set."""


class HelmChartTemplateVerification(KubeModel):
    """How to verify the chart's signature (OCI HelmRepositories only)."""

    provider: Literal["cosign", "notation"] = "cosign"
    """The signature provider."""

    secret_ref: LocalObjectReference | None = None
    """Secret with the trusted public keys."""


class HelmChartTemplateSpec(KubeModel):
    """The spec of the HelmChart the controller creates for a HelmRelease."""

    chart: Annotated[str, StringConstraints(min_length=1, max_length=2048)]
    """Name or path of the chart, relative to the source's root."""

    version: str = "*"
    """SemVer range of chart versions; ignored for Git and Bucket sources."""

    source_ref: CrossNamespaceObjectReference
    """The source the chart is taken from."""

    interval: Duration | None = None
    """How often to check the source; the HelmRelease's interval when not set."""

    reconcile_strategy: Literal["ChartVersion", "Revision"] = "ChartVersion"
    """What makes a new artifact: a new chart version, or a new source revision."""

    values_files: list[str] | None = None
    """Values files in the source, merged in order, replacing values.yaml."""

    values_file: str | None = None
    """(v2beta1, v2beta2) A values file merged before valuesFiles; deprecated
    by valuesFiles, which the controller puts it in front of."""

    ignore_missing_values_files: bool = False
    """Skip values files that do not exist instead of failing."""

    verify: HelmChartTemplateVerification | None = None
    """Verify the chart's signature; only for HelmRepositories of `type: oci`."""


class HelmChartTemplateObjectMeta(KubeModel):
    """Labels and annotations for the HelmChart the controller creates."""

    labels: dict[str, str] | None = None
    """Labels to set on the HelmChart."""

    annotations: dict[str, str] | None = None
    """Annotations to set on the HelmChart."""


class HelmChartTemplate(KubeModel):
    """The template of the HelmChart the controller creates and owns."""

    metadata: HelmChartTemplateObjectMeta | None = None
    """Labels and annotations of the HelmChart."""

    spec: HelmChartTemplateSpec
    """The HelmChart's spec."""
