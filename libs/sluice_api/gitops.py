"""KubeSphere's gitops.kubesphere.io/v1alpha1 Application, as ks-devops shipped it.

One Application deploys a Helm chart or a kustomization to many clusters: a
`spec.kind: fluxcd` app expands into one Flux HelmRelease per
`helmRelease.deploy[]` entry, or one Kustomization per `kustomization[]`
entry, each aimed at the host cluster or, through a kubeconfig Secret, at
another one. `spec.kind: argocd` apps belong to another controller: the
schema keeps `argoApp` as it is and the application-controller leaves them
alone.

The field names are KubeSphere's, so its UI and manifests work unchanged;
what the expansion does with them is documented on the application-controller.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, StringConstraints

from sluice_api.helm import Install, PostRenderer, Rollback, Test, Uninstall, Upgrade
from sluice_api.helm import ValuesReference as HelmValuesReference
from sluice_api.kustomize import (
    AnyJSON,
    AnyObject,
    Decryption,
    DependencyReference,
    Image,
    KubeConfigReference,
    Patch,
    PostBuild,
)
from sluice_api.meta import (
    AGE_COLUMN,
    READY_COLUMN,
    STATUS_COLUMN,
    Duration,
    KubeModel,
    NamespacedObjectKindReference,
    PrinterColumn,
    ReconcileStatus,
    Resource,
)

GROUP = "gitops.kubesphere.io"
VERSION = "v1alpha1"

SAVE_TEMPLATE_LABELS = (f"{GROUP}/save-helmtemplate", f"{GROUP}/save-helm-template")
"""`"true"` on an Application saves its chart as a template: the first spelling is
the design's (ks-devops#767), the second the one KubeSphere's code reads."""
TEMPLATE_NAME_ANNOTATION = f"{GROUP}/helm-template-name"
"""On a saved template (a HelmChart): the name the UI shows, the Application's."""
TEMPLATE_LABEL = f"{GROUP}/helm-template"
"""`"true"` on a HelmChart that is a saved template (Sluice; KubeSphere marks templates
only with managed-by, which is not enough to tell them from other HelmCharts)."""
READY_NUMBER_LABEL = f"{GROUP}/ready-number"
"""On an Application: `<ready>-<total>` children, as KubeSphere's UI reads it."""
APP_TYPE_LABEL = f"{GROUP}/app-type"
"""On an Application: HelmRelease or Kustomization, the kind of its children."""
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
"""On a child: the name of the Application it was expanded from (on a template: the
group, as KubeSphere sets it)."""
DESTINATION_ANNOTATION = "app.kubernetes.io/name"
"""On a child: the logical name of its destination (the key of the status maps)."""


class SourceReference(KubeModel):
    """A source-controller object, in any namespace."""

    api_version: str | None = None
    """API version of the referent."""

    kind: str
    """Kind of the referent: GitRepository, HelmRepository, Bucket or OCIRepository
    (which kinds can serve a chart or a kustomization is checked by the controller, so
    a wrong one is a condition naming it rather than an API error)."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    """Name of the referent."""

    namespace: str | None = None
    """Namespace of the referent; the Application's when not set."""


class FluxApplicationSource(KubeModel):
    """The ground truth of the application."""

    source_ref: SourceReference
    """The source holding the chart or the manifests."""


class Destination(KubeModel):
    """Where one HelmRelease or Kustomization deploys: the host cluster, or the
    cluster of a kubeconfig Secret; and the namespace there."""

    kube_config: KubeConfigReference | None = None
    """Secret (in the Application's namespace) with the kubeconfig of another cluster;
    the host cluster when not set."""

    target_namespace: str | None = None
    """Namespace to deploy into; the Application's namespace when not set."""


class ChartSpec(KubeModel):
    """The chart, from `spec.fluxApp.spec.source` (the fields of a HelmChart but sourceRef)."""

    chart: Annotated[str, StringConstraints(min_length=1, max_length=2048)]
    """Name or path of the chart in the source."""

    version: str = "*"
    """SemVer range of chart versions; ignored for Git and Bucket sources."""

    interval: Duration | None = None
    """How often to check the source; the HelmRelease's interval when not set."""

    reconcile_strategy: Literal["ChartVersion", "Revision"] | None = None
    """What makes a new artifact: a new chart version (default), or a new revision."""

    values_files: list[str] | None = None
    """Values files in the source, merged in order, replacing values.yaml."""


class Deploy(KubeModel):
    """One HelmRelease: its destination and the HelmRelease fields of that cluster."""

    destination: Destination
    """Where to release."""

    interval: Duration | None = None
    """How often to reconcile the release; 10m when not set."""

    suspend: bool = False
    """Stop reconciling this release."""

    timeout: Duration | None = None
    """Time to wait for a Helm action; 5m when not set."""

    depends_on: list[DependencyReference] | None = None
    """HelmReleases that must be ready before this one is reconciled."""

    service_account_name: str | None = None
    """ServiceAccount to impersonate for every Helm action."""

    release_name: Annotated[str, StringConstraints(min_length=1, max_length=53)] | None = None
    """The Helm release name; `[<targetNamespace>-]<child name>` when not set."""

    storage_namespace: str | None = None
    """Namespace of Helm's release storage."""

    max_history: int | None = None
    """How many releases Helm keeps in its history."""

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

    values_from: list[HelmValuesReference] | None = None
    """ConfigMaps and Secrets (in the Application's namespace) with values, merged in order."""

    values: AnyObject | None = None
    """Values merged over valuesFrom."""

    post_renderers: list[PostRenderer] | None = None
    """Post-renderers applied to the rendered manifests, in order."""


class HelmReleaseConfig(KubeModel):
    """A Helm application: the chart (inline or a saved template) and its deploys."""

    chart: ChartSpec | None = None
    """The chart in `spec.fluxApp.spec.source`; exactly one of chart and template."""

    template: str | None = None
    """Name of a saved template (a HelmChart in the Application's namespace) whose
    spec is used as the chart."""

    deploy: list[Deploy] = Field(default_factory=list)
    """One HelmRelease per entry."""


class KustomizationConfig(KubeModel):
    """One Kustomization: its destination and the Kustomization fields of that cluster."""

    destination: Destination
    """Where to apply."""

    interval: Duration | None = None
    """How often to reconcile; 10m when not set."""

    retry_interval: Duration | None = None
    """How long to wait after a failure; interval when not set."""

    timeout: Duration | None = None
    """Time to wait for validation, apply and health checks."""

    path: str | None = None
    """Path in the source of the kustomization.yaml or plain manifests."""

    prune: bool = False
    """Delete what a new revision no longer contains (and everything, when the
    destination is removed or the Application deleted)."""

    force: bool = False
    """Re-create objects whose immutable fields changed."""

    wait: bool = False
    """Wait for every applied object to be ready."""

    suspend: bool = False
    """Stop reconciling this Kustomization."""

    depends_on: list[DependencyReference] | None = None
    """Kustomizations that must be ready before this one is reconciled."""

    health_checks: list[NamespacedObjectKindReference] | None = None
    """Objects whose health makes this Kustomization ready."""

    patches: list[Patch] | None = None
    """Strategic merge and JSON 6902 patches."""

    images: list[Image] | None = None
    """Image overrides."""

    post_build: PostBuild | None = None
    """Variable substitution after the build."""

    decryption: Decryption | None = None
    """SOPS decryption of the manifests."""

    service_account_name: str | None = None
    """ServiceAccount to impersonate when applying."""


class FluxApplicationConfig(KubeModel):
    """Exactly one of helmRelease and kustomization."""

    helm_release: HelmReleaseConfig | None = None
    """A Helm application."""

    kustomization: list[KustomizationConfig] | None = None
    """A kustomize application, one Kustomization per entry."""


class FluxApplicationSpec(KubeModel):
    """Source, config and (inside the config) destinations of a Flux application."""

    source: FluxApplicationSource | None = None
    """The source; not needed by a Helm application using a template."""

    config: FluxApplicationConfig | None = None
    """What to deploy, and where."""


class FluxApplication(KubeModel):
    """A Flux application."""

    spec: FluxApplicationSpec = Field(default_factory=FluxApplicationSpec)
    """Its specification."""


class ApplicationSpec(KubeModel):
    """Which engine runs the application, and its specification for that engine."""

    kind: Literal["fluxcd", "argocd"] | None = None
    """The engine: fluxcd apps are expanded by Sluice, argocd apps are left alone."""

    argo_app: AnyObject | None = None
    """An Argo CD application (ignored by Sluice, kept as written)."""

    flux_app: FluxApplication | None = None
    """A Flux application."""


class FluxApplicationStatus(KubeModel):
    """The status of every child, keyed by destination name, as KubeSphere fills it."""

    helm_release_status: dict[str, AnyObject] | None = None
    """Each HelmRelease's status, by destination."""

    kustomization_status: dict[str, AnyObject] | None = None
    """Each Kustomization's status, by destination."""


class ApplicationStatus(ReconcileStatus):
    """Observed state of an Application."""

    kind: str | None = None
    """The engine, copied from the spec."""

    argo_app: AnyJSON = None
    """The Argo CD application's status (not written by Sluice)."""

    flux_app: FluxApplicationStatus | None = None
    """The children's status."""


class Application(Resource[ApplicationSpec, ApplicationStatus]):
    """A KubeSphere GitOps application: one object, many clusters."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "Application"
    PLURAL: ClassVar[str] = "applications"
    SINGULAR: ClassVar[str] = "application"
    CATEGORIES: ClassVar[tuple[str, ...]] = ("gitops",)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn(name="Kind", type="string", json_path=".spec.kind"),
        PrinterColumn(
            name="Ready Children",
            type="string",
            json_path=r".metadata.labels.gitops\.kubesphere\.io/ready-number",
            description="<ready>-<total> HelmReleases or Kustomizations",
        ),
        READY_COLUMN,
        STATUS_COLUMN,
        AGE_COLUMN,
    )

    spec: ApplicationSpec = Field(default_factory=ApplicationSpec)
    status: ApplicationStatus = Field(default_factory=ApplicationStatus)
