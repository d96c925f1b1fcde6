"""What an Application expands into: a pure function of its spec (and its template).

Each `helmRelease.deploy[]` entry becomes one HelmRelease and each
`kustomization[]` entry one Kustomization, named `<app>-<destination>`
where the destination's logical name is KubeSphere's: the target namespace
on the host cluster, `<kubeconfig secret>-<target namespace>` on another
one. KubeSphere gave children random suffixes, so a lost cache created
duplicates; a deterministic name makes server-side apply idempotent and the
set of children to prune a plain set difference.

A spec this module cannot expand raises `Invalid` naming the field, before
the controller creates anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from sluice_api.gitops import (
    DESTINATION_ANNOTATION,
    GROUP,
    MANAGED_BY_LABEL,
    SAVE_TEMPLATE_LABELS,
    TEMPLATE_LABEL,
    TEMPLATE_NAME_ANNOTATION,
    Application,
    Destination,
    SourceReference,
)
from sluice_api.helm import HelmRelease
from sluice_api.kustomize import Kustomization
from sluice_api.source import HelmChart

JSON = dict[str, Any]
ChildKind = Literal["HelmRelease", "Kustomization"]

CONFIG = "spec.fluxApp.spec.config"
SOURCE = "spec.fluxApp.spec.source.sourceRef"
DEFAULT_INTERVAL = "10m"
"""The interval of a child (and a saved template) whose entry sets none."""

CHART_SOURCE_KINDS = ("HelmRepository", "GitRepository", "Bucket")
"""Kinds a HelmChart can take a chart from."""
MANIFEST_SOURCE_KINDS = ("GitRepository", "OCIRepository", "Bucket", "ExternalArtifact")
"""Kinds a Kustomization can take manifests from."""


class Invalid(ValueError):
    """The spec cannot be expanded; the message names the field."""


@dataclass(frozen=True)
class Child:
    """One HelmRelease or Kustomization an Application owns."""

    destination: str
    """The logical destination name: the key of the status maps."""
    kind: ChildKind
    body: JSON
    """The whole object as the controller applies it."""
    secret_field: str | None = None
    """The field naming the destination's kubeconfig Secret, when it has one."""
    secret: str | None = None
    """That Secret's name (in the Application's namespace)."""

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])


def is_flux(app: Application) -> bool:
    return app.spec.kind == "fluxcd"


def wants_template(app: Application) -> bool:
    """The save label, in either spelling, says "true"."""
    labels = app.metadata.labels or {}
    return any(labels.get(key) == "true" for key in SAVE_TEMPLATE_LABELS)


def destination_name(destination: Destination) -> str:
    """KubeSphere's logical name: the namespace on the host, `<secret>-<namespace>` elsewhere."""
    namespace = destination.target_namespace or ""
    ref = destination.kube_config.secret_ref if destination.kube_config else None
    if ref is None:
        return namespace or "host"
    return f"{ref.name}-{namespace}" if namespace else ref.name


def app_type(app: Application) -> ChildKind:
    """Which kind of children `app` has; Invalid unless exactly one config is set."""
    config = app.spec.flux_app.spec.config if app.spec.flux_app else None
    has_helm = config is not None and config.helm_release is not None
    has_kustomize = config is not None and config.kustomization is not None
    if has_helm == has_kustomize:
        which = "both" if has_helm else "neither"
        raise Invalid(
            f"{CONFIG}: exactly one of helmRelease and kustomization must be set, {which} is"
        )
    return "HelmRelease" if has_helm else "Kustomization"


def template_name(app: Application) -> str | None:
    """The saved template `app` uses, if any."""
    config = app.spec.flux_app.spec.config if app.spec.flux_app else None
    helm = config.helm_release if config else None
    return helm.template if helm is not None and helm.template else None


def _source(app: Application, *, kinds: tuple[str, ...], serves: str) -> SourceReference:
    flux = app.spec.flux_app
    source = flux.spec.source if flux else None
    if source is None:
        raise Invalid(f"{SOURCE}: required to deploy {serves}")
    ref = source.source_ref
    if ref.kind not in kinds:
        raise Invalid(f"{SOURCE}.kind: a {ref.kind} cannot serve {serves} (use {', '.join(kinds)})")
    return ref


def _owner(app: Application) -> JSON:
    return {
        "apiVersion": app.api_version_str(),
        "kind": app.KIND,
        "name": app.metadata.name,
        "uid": app.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(app: Application, name: str, destination: str) -> JSON:
    return {
        "name": name,
        "namespace": app.metadata.namespace,
        "labels": {MANAGED_BY_LABEL: app.metadata.name},
        "annotations": {DESTINATION_ANNOTATION: destination},
        "ownerReferences": [_owner(app)],
    }


def _deploy_fields(entry: BaseModel) -> JSON:
    """An entry's own spec fields, as set in the Application (its destination and
    interval are written separately)."""
    return entry.model_dump(
        mode="json",
        by_alias=True,
        exclude_none=True,
        exclude_unset=True,
        exclude={"destination", "interval"},
    )


def _destination_fields(destination: Destination) -> JSON:
    out: JSON = {}
    if destination.kube_config is not None:
        out["kubeConfig"] = destination.kube_config.model_dump(
            mode="json", by_alias=True, exclude_none=True
        )
    if destination.target_namespace:
        out["targetNamespace"] = destination.target_namespace
    return out


def _secret(destination: Destination) -> str | None:
    ref = destination.kube_config.secret_ref if destination.kube_config else None
    return ref.name if ref is not None else None


def chart_from_spec(app: Application) -> JSON:
    """The HelmRelease `chart.spec` of an inline chart: its fields plus the app's source."""
    config = app.spec.flux_app.spec.config if app.spec.flux_app else None
    helm = config.helm_release if config else None
    assert helm is not None and helm.chart is not None
    ref = _source(app, kinds=CHART_SOURCE_KINDS, serves="a Helm chart")
    chart: JSON = helm.chart.model_dump(
        mode="json", by_alias=True, exclude_none=True, exclude_unset=True
    )
    chart["sourceRef"] = {
        "kind": ref.kind,
        "name": ref.name,
        "namespace": ref.namespace or app.metadata.namespace,
    }
    return chart


def chart_from_template(template: JSON) -> JSON:
    """The HelmRelease `chart.spec` a saved template (a HelmChart) stands for."""
    spec = template.get("spec") or {}
    ref = spec.get("sourceRef") or {}
    chart: JSON = {
        "chart": spec.get("chart"),
        "sourceRef": {
            "kind": ref.get("kind"),
            "name": ref.get("name"),
            "namespace": template["metadata"].get("namespace"),
        },
    }
    for key in ("version", "interval", "reconcileStrategy", "valuesFiles"):
        if spec.get(key) is not None:
            chart[key] = spec[key]
    if spec.get("ignoreMissingValuesFiles"):
        chart["ignoreMissingValuesFiles"] = True
    return chart


def saved_template(app: Application) -> JSON:
    """The HelmChart the save label persists: the chart settings, named for the app.

    It is not owned by the Application: a template outlives the app that saved it
    (that is what saving is for). A HelmChart's sourceRef is local, so the source
    must be in the Application's namespace.
    """
    chart = chart_from_spec(app)
    ref = chart.pop("sourceRef")
    if ref["namespace"] != app.metadata.namespace:
        raise Invalid(
            f"{SOURCE}.namespace: a saved template can only use a source in the "
            f"Application's namespace ({app.metadata.namespace}), not {ref['namespace']}"
        )
    spec: JSON = {
        "chart": chart["chart"],
        "version": chart.get("version", "*"),
        "sourceRef": {"kind": ref["kind"], "name": ref["name"]},
        "interval": chart.get("interval", DEFAULT_INTERVAL),
    }
    for key in ("reconcileStrategy", "valuesFiles"):
        if key in chart:
            spec[key] = chart[key]
    return {
        "apiVersion": HelmChart.api_version_str(),
        "kind": HelmChart.KIND,
        "metadata": {
            "name": app.metadata.name,
            "namespace": app.metadata.namespace,
            "labels": {MANAGED_BY_LABEL: GROUP, TEMPLATE_LABEL: "true"},
            "annotations": {TEMPLATE_NAME_ANNOTATION: app.metadata.name},
        },
        "spec": spec,
    }


def expand(app: Application, *, template: JSON | None = None) -> list[Child]:
    """Every child of `app`, in spec order; `template` is the HelmChart that
    `helmRelease.template` names (looked up by the caller)."""
    kind = app_type(app)
    config = app.spec.flux_app.spec.config if app.spec.flux_app else None
    assert config is not None
    children: list[Child] = []
    if kind == "HelmRelease":
        helm = config.helm_release
        assert helm is not None
        if helm.template:
            if template is None:
                raise Invalid(f"{CONFIG}.helmRelease.template: HelmChart {helm.template} not found")
            chart = chart_from_template(template)
        elif helm.chart is not None:
            chart = chart_from_spec(app)
        else:
            raise Invalid(f"{CONFIG}.helmRelease: one of chart and template must be set")
        if not helm.deploy:
            raise Invalid(f"{CONFIG}.helmRelease.deploy: at least one destination is needed")
        for index, deploy in enumerate(helm.deploy):
            destination = destination_name(deploy.destination)
            fields = _deploy_fields(deploy)
            spec: JSON = {
                "chart": {"spec": chart},
                "interval": deploy.interval or DEFAULT_INTERVAL,
                **_destination_fields(deploy.destination),
                **fields,
            }
            children.append(
                _child(
                    app,
                    kind,
                    destination,
                    spec,
                    secret_field=f"{CONFIG}.helmRelease.deploy[{index}]",
                    secret=_secret(deploy.destination),
                )
            )
    else:
        ref = _source(app, kinds=MANIFEST_SOURCE_KINDS, serves="a kustomization")
        source = {
            "kind": ref.kind,
            "name": ref.name,
            "namespace": ref.namespace or app.metadata.namespace,
        }
        entries = config.kustomization or []
        if not entries:
            raise Invalid(f"{CONFIG}.kustomization: at least one destination is needed")
        for index, entry in enumerate(entries):
            destination = destination_name(entry.destination)
            fields = _deploy_fields(entry)
            spec = {
                "sourceRef": source,
                "interval": entry.interval or DEFAULT_INTERVAL,
                "prune": entry.prune,
                **_destination_fields(entry.destination),
                **fields,
            }
            children.append(
                _child(
                    app,
                    kind,
                    destination,
                    spec,
                    secret_field=f"{CONFIG}.kustomization[{index}]",
                    secret=_secret(entry.destination),
                )
            )
    _unique(children)
    return children


def _child(
    app: Application,
    kind: ChildKind,
    destination: str,
    spec: JSON,
    *,
    secret_field: str,
    secret: str | None,
) -> Child:
    model = HelmRelease if kind == "HelmRelease" else Kustomization
    name = f"{app.metadata.name}-{destination}"
    return Child(
        destination=destination,
        kind=kind,
        body={
            "apiVersion": model.api_version_str(),
            "kind": kind,
            "metadata": _metadata(app, name, destination),
            "spec": spec,
        },
        secret_field=f"{secret_field}.destination.kubeConfig.secretRef.name" if secret else None,
        secret=secret,
    )


MAX_NAME = 63
"""Children's names become label values (on the HelmChart a HelmRelease makes, on what a
Kustomization applies), which Kubernetes limits to 63 characters."""


def _unique(children: list[Child]) -> None:
    seen: set[str] = set()
    for child in children:
        if len(child.name) > MAX_NAME:
            raise Invalid(
                f"{CONFIG}: the child for destination {child.destination!r} would be named "
                f"{child.name!r}, longer than {MAX_NAME} characters; use a shorter Application "
                "name, Secret name or target namespace"
            )
        if child.destination in seen:
            raise Invalid(
                f"{CONFIG}: two entries deploy to the same destination {child.destination!r} "
                "(the same cluster and target namespace)"
            )
        seen.add(child.destination)


def ready_message(child: JSON) -> tuple[bool, str]:
    """Whether a child is ready (Ready=True for its current generation), and why not."""
    meta = child.get("metadata") or {}
    status = child.get("status") or {}
    ready = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Ready"),
        None,
    )
    if ready is None:
        return False, "not reconciled yet"
    current = status.get("observedGeneration") == meta.get("generation")
    if ready.get("status") == "True" and current:
        return True, str(ready.get("message") or "")
    if ready.get("status") == "True":
        return False, "a new generation is not reconciled yet"
    return False, str(ready.get("message") or ready.get("reason") or "not ready")
