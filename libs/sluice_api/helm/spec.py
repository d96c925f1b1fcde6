"""The HelmRelease's spec: the chart, where and how to release it, its values, its
post-renderers and drift detection; the Helm actions are in `actions`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import StringConstraints

from sluice_api.helm.actions import Install, Rollback, Test, Uninstall, Upgrade
from sluice_api.helm.charts import CrossNamespaceSourceReference, HelmChartTemplate
from sluice_api.kustomize import (
    AnyObject,
    CustomHealthCheck,
    DependencyReference,
    Image,
    JSON6902Patch,
    KubeConfigReference,
    Patch,
    Selector,
)
from sluice_api.meta import Duration, KubeModel, LocalObjectReference


class IgnoreRule(KubeModel):
    """Paths drift detection neither corrects nor reports."""

    paths: list[str]
    """JSON pointers (RFC 6901) to ignore."""

    target: Selector | None = None
    """The objects the rule applies to; every object when not set."""


class DriftDetection(KubeModel):
    """Whether and how to detect and correct drift from the release manifest."""

    mode: Literal["enabled", "warn", "disabled"] | None = None
    """`enabled` corrects drift, `warn` only reports it; `disabled` when not set."""

    ignore: list[IgnoreRule] | None = None
    """Fields to leave out of the comparison."""


class ValuesReference(KubeModel):
    """A ConfigMap or Secret key holding values."""

    kind: Literal["Secret", "ConfigMap"]
    """Kind of the referent."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    """Name of the referent, in the HelmRelease's namespace."""

    values_key: (
        Annotated[str, StringConstraints(max_length=253, pattern=r"^[\-._a-zA-Z0-9]+$")] | None
    ) = None
    """Key in the referent holding the values; `values.yaml` when not set."""

    target_path: (
        Annotated[
            str,
            StringConstraints(max_length=250, pattern=r"^([a-zA-Z0-9_\-.\\\/]|\[[0-9]{1,5}\])+$"),
        ]
        | None
    ) = None
    """Where to put the value (a single value, not YAML) in the values, as with `--set`."""

    optional: bool = False
    """Proceed without it when the referent or key does not exist."""

    literal: bool = False
    """(Flux 2.9) With targetPath: set the value as a string, as `--set-literal`
    does, instead of reading it as a YAML scalar (`true`, `1`, `null`)."""


class Kustomize(KubeModel):
    """Kustomize patches and image overrides applied to the rendered manifests."""

    patches: list[Patch] | None = None
    """Strategic merge and JSON 6902 patches."""

    images: list[Image] | None = None
    """Image names, tags or digests to replace."""

    patches_strategic_merge: list[AnyObject] | None = None
    """(v2beta1, v2beta2) Strategic merge patches, each naming its target object;
    applied like `patches` entries without a target."""

    patches_json6902: list[JSON6902Patch] | None = None
    """(v2beta1, v2beta2) JSON 6902 patches; applied like `patches` entries."""


class PostRenderer(KubeModel):
    """A post-renderer applied to the rendered manifests."""

    kustomize: Kustomize | None = None
    """A kustomize post-renderer."""


class WaitStrategy(KubeModel):
    """(Flux 2.8) How helm waits for the applied objects to become ready."""

    name: Literal["poller", "legacy"]
    """`legacy` is helm 3's wait, the one this version's helm has; `poller`
    (kstatus) is refused."""


class CommonMetadata(KubeModel):
    """Labels and annotations set on every object of the release."""

    annotations: dict[str, str] | None = None
    """Annotations to set."""

    labels: dict[str, str] | None = None
    """Labels to set."""


class HelmReleaseSpec(KubeModel):
    """How to install and keep up to date a Helm release."""

    chart: HelmChartTemplate | None = None
    """The HelmChart to create for this release; exactly one of chart and chartRef."""

    chart_ref: CrossNamespaceSourceReference | None = None
    """An existing OCIRepository or HelmChart holding the chart artifact."""

    interval: Duration
    """How often to reconcile the release."""

    kube_config: KubeConfigReference | None = None
    """Release to a remote cluster with this kubeconfig."""

    suspend: bool = False
    """Stop reconciling this object; a reconcile under way finishes."""

    release_name: Annotated[str, StringConstraints(min_length=1, max_length=53)] | None = None
    """The Helm release name; `[<targetNamespace>-]<name>` when not set."""

    target_namespace: Annotated[str, StringConstraints(min_length=1, max_length=63)] | None = None
    """Namespace to install the release into; the HelmRelease's namespace when not set."""

    storage_namespace: Annotated[str, StringConstraints(min_length=1, max_length=63)] | None = None
    """Namespace of Helm's release storage; the HelmRelease's namespace when not set."""

    depends_on: list[DependencyReference] | None = None
    """HelmReleases that must be ready before this one is reconciled."""

    timeout: Duration | None = None
    """Time to wait for a Helm action; 5m when not set."""

    max_history: int | None = None
    """How many releases Helm keeps in its history; 5 when not set, 0 for no limit."""

    service_account_name: Annotated[str, StringConstraints(min_length=1, max_length=253)] | None = (
        None
    )
    """ServiceAccount to impersonate for every Helm action."""

    persistent_client: bool | None = None
    """Keep one Kubernetes client per release; a performance knob, on by default."""

    drift_detection: DriftDetection | None = None
    """Detect and correct drift of the cluster from the release manifest."""

    install: Install | None = None
    """How to install."""

    upgrade: Upgrade | None = None
    """How to upgrade."""

    test: Test | None = None
    """How to test."""

    rollback: Rollback | None = None
    """How to roll back."""

    uninstall: Uninstall | None = None
    """How to uninstall."""

    values_from: list[ValuesReference] | None = None
    """ConfigMaps and Secrets with values, merged in order, before values."""

    values: dict[str, Any] | None = None
    """Values merged over valuesFrom."""

    post_renderers: list[PostRenderer] | None = None
    """Post-renderers applied to the rendered manifests, in order."""

    post_render_strategy: Literal["nohooks", "combined", "separate"] | None = None
    """(Flux 2.9) Whether post-renderers also see the chart's hooks: `nohooks`
    (helm 3's way, the one this version's helm has) leaves them out;
    `combined` and `separate` are refused."""

    wait_strategy: WaitStrategy | None = None
    """(Flux 2.8) How helm waits for the release's objects to become ready."""

    health_check_exprs: list[CustomHealthCheck] | None = None
    """(Flux 2.8) CEL health checks for custom resources of the release, used by
    the `poller` wait (not built by this version: refused)."""

    common_metadata: CommonMetadata | None = None
    """Labels and annotations set on every object of the release."""

    gates: list[LocalObjectReference] | None = None
    """Sluice: Gates that must all be open before an install or upgrade."""
