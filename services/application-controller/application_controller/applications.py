"""Application: expanded into HelmReleases or Kustomizations, one per destination.

STEPS: expansion → template → children → summary.

- expansion: the whole spec is expanded (`expansion.expand`) and checked
  before anything is written: both or neither of helmRelease and
  kustomization, a template that does not exist, a source kind that cannot
  serve a chart or manifests, a destination's kubeconfig Secret that does
  not exist, two entries for one destination. Each stalls the Application
  with a message naming the field, and nothing is created.
- template: with the save label (`save-helmtemplate` or `save-helm-template`
  = "true"), the chart settings are applied as a HelmChart named for the
  Application, labelled as a template; it is not owned, so it outlives the
  Application, and other Applications name it in `helmRelease.template`.
- children: each child is server-side applied with the controller's field
  manager, owned by the Application; fields other managers set on a child
  stay. Children labelled as managed by this Application (and owned by it)
  that the spec no longer names are deleted, so their own controllers
  uninstall the release or prune what the Kustomization applied.
- summary: the children's status goes into `status.fluxApp.helmReleaseStatus`
  / `kustomizationStatus` keyed by destination (stale keys removed), the
  `gitops.kubesphere.io/ready-number` label says `<ready>-<total>`, and Ready
  is True only when every child is Ready for its current generation;
  otherwise it names the children that are not, with their messages.

Children are watched, so a child's status change reaches its Application's
status within a reconcile. Applications of `spec.kind: argocd` belong to
another controller: they are never reconciled, nor written to.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from application_controller import expansion
from application_controller.expansion import Child, Invalid
from sluice_api.gitops import (
    APP_TYPE_LABEL,
    DESTINATION_ANNOTATION,
    GROUP,
    MANAGED_BY_LABEL,
    READY_NUMBER_LABEL,
    TEMPLATE_LABEL,
    Application,
    FluxApplicationStatus,
)
from sluice_api.helm import HelmRelease
from sluice_api.kustomize import Kustomization
from sluice_api.meta import FINALIZER
from sluice_api.source import HelmChart
from sluice_runtime.informing.watching import Change, Store
from sluice_runtime.kube.client import JSON
from sluice_runtime.kube.errors import KubeError, NotFound
from sluice_runtime.kube.resources import SECRET, ResourceType
from sluice_runtime.reconciling.errors import Stalling, StepError, Waiting
from sluice_runtime.reconciling.running import Outcome, Reconciler, Runner
from sluice_runtime.reconciling.steps import ReconcileContext, Result, done, step

FIELD_MANAGER = "application-controller"
HELMRELEASE = ResourceType.of_model(HelmRelease)
KUSTOMIZATION = ResourceType.of_model(Kustomization)
HELMCHART = ResourceType.of_model(HelmChart)
APPLICATION = ResourceType.of_model(Application)
CHILD_TYPES: dict[str, ResourceType] = {"HelmRelease": HELMRELEASE, "Kustomization": KUSTOMIZATION}


class ApplicationReason(StrEnum):
    """Reasons the application-controller gives for its conditions."""

    INVALID = "InvalidApplication"
    TEMPLATE_FAILED = "TemplateFailed"
    APPLY_FAILED = "ApplyFailed"
    PRUNE_FAILED = "PruneFailed"
    CHILDREN_NOT_READY = "ChildrenNotReady"
    CREATED = "Created"
    DELETED = "Deleted"
    SUCCEEDED = "Succeeded"


Reason = ApplicationReason


@dataclass
class Services:
    """What Application steps share across reconciles."""

    requeue_not_ready: float = 60.0
    """A safety net: children are watched, so a change normally arrives sooner."""
    missing_secrets: set[str] = field(default_factory=set)
    """Applications (keys) stalled on a kubeconfig Secret that does not exist. Secrets
    are not watched (the controller would hold every Secret's data in memory), so
    these are looked at again after requeue_not_ready: creating the Secret is the fix."""


@dataclass(kw_only=True)
class ApplicationContext(ReconcileContext[Application]):
    services: Services
    children: list[Child] = field(default_factory=list)
    applied: dict[str, JSON] = field(default_factory=dict)
    """Each child as the API server answered its apply, by destination."""


def _stall(error: Invalid) -> Stalling:
    return Stalling(Reason.INVALID, str(error))


# -- 1. expansion -----------------------------------------------------------------------------


@step()
async def reconcile_expansion(ctx: ApplicationContext) -> Result | None:
    app = ctx.obj
    if not expansion.is_flux(app):
        # Ours before its kind changed: let go of what it made, then of it.
        await _prune(ctx, keep=set())
        finalizers = list(app.metadata.finalizers or [])
        if FINALIZER in finalizers:
            finalizers.remove(FINALIZER)
            await ctx.client.merge_patch(
                APPLICATION,
                app.metadata.name,
                {"metadata": {"finalizers": finalizers or None}},
                namespace=ctx.obj.namespace,
            )
        return done()
    template: JSON | None = None
    name = expansion.template_name(app) if _is_helm(app) else None
    if name is not None:
        try:
            template = await ctx.client.get(HELMCHART, name, ctx.obj.namespace)
        except NotFound:
            template = None
    try:
        ctx.children = expansion.expand(app, template=template)
        if expansion.wants_template(app) and name is None:
            expansion.saved_template(app)  # checked now, applied by the next step
    except Invalid as error:
        raise _stall(error) from None
    ctx.services.missing_secrets.discard(app.key)
    for child in ctx.children:
        if child.secret is None:
            continue
        try:
            await ctx.client.get(SECRET, child.secret, ctx.obj.namespace)
        except NotFound:
            ctx.services.missing_secrets.add(app.key)
            raise Stalling(
                Reason.INVALID,
                f"{child.secret_field}: Secret {ctx.obj.namespace}/{child.secret} not found",
            ) from None
    return None


def _is_helm(app: Application) -> bool:
    try:
        return expansion.app_type(app) == "HelmRelease"
    except Invalid:
        return False


# -- 2. template ------------------------------------------------------------------------------


@step()
async def reconcile_template(ctx: ApplicationContext) -> Result | None:
    app = ctx.obj
    if not expansion.wants_template(app) or expansion.template_name(app) is not None:
        return None
    if not _is_helm(app):
        return None
    wanted = expansion.saved_template(app)
    name = wanted["metadata"]["name"]
    try:
        existing: JSON | None = await ctx.client.get(HELMCHART, name, ctx.obj.namespace)
    except NotFound:
        existing = None
    labels = ((existing or {}).get("metadata") or {}).get("labels") or {}
    if existing is not None and labels.get(TEMPLATE_LABEL) != "true":
        raise Stalling(
            Reason.TEMPLATE_FAILED,
            f"cannot save the template: HelmChart {ctx.obj.namespace}/{name} exists and is "
            "not a template",
        )
    try:
        await ctx.client.apply(HELMCHART, wanted, field_manager=FIELD_MANAGER, force=True)
    except KubeError as error:
        raise StepError(
            Reason.TEMPLATE_FAILED, f"cannot save template HelmChart {name}: {error}"
        ) from None
    if existing is None:
        ctx.events.normal(Reason.CREATED, f"Saved template HelmChart {ctx.obj.namespace}/{name}")
    return None


# -- 3. children ------------------------------------------------------------------------------


async def _owned(ctx: ApplicationContext) -> list[JSON]:
    """Every HelmRelease and Kustomization labelled as this app's and owned by it."""
    uid = ctx.obj.metadata.uid
    found: list[JSON] = []
    for rt in CHILD_TYPES.values():
        listed = await ctx.client.list(
            rt,
            namespace=ctx.obj.namespace,
            label_selector=f"{MANAGED_BY_LABEL}={ctx.obj.metadata.name}",
        )
        for obj in listed.items:
            owners = obj["metadata"].get("ownerReferences") or []
            if any(o.get("uid") == uid and o.get("kind") == Application.KIND for o in owners):
                found.append(obj)
    return found


async def _prune(ctx: ApplicationContext, *, keep: set[tuple[str, str]]) -> None:
    """Delete owned children whose (kind, name) is not in `keep`."""
    for obj in await _owned(ctx):
        kind, name = obj["kind"], obj["metadata"]["name"]
        if (kind, name) in keep:
            continue
        destination = (obj["metadata"].get("annotations") or {}).get(DESTINATION_ANNOTATION, "")
        try:
            await ctx.client.delete(CHILD_TYPES[kind], name, namespace=ctx.obj.namespace)
        except NotFound:
            continue
        except KubeError as error:
            raise StepError(Reason.PRUNE_FAILED, f"cannot delete {kind}/{name}: {error}") from None
        ctx.events.normal(
            Reason.DELETED,
            f"Deleted {kind}/{name}: destination {destination!r} is no longer in the spec",
        )


@step()
async def reconcile_children(ctx: ApplicationContext) -> Result | None:
    existing = {(o["kind"], o["metadata"]["name"]) for o in await _owned(ctx)}
    for child in ctx.children:
        try:
            applied = await ctx.client.apply(
                CHILD_TYPES[child.kind], child.body, field_manager=FIELD_MANAGER, force=True
            )
        except KubeError as error:
            raise StepError(
                Reason.APPLY_FAILED,
                f"cannot apply {child.kind}/{child.name} (destination {child.destination!r}): "
                f"{error}",
            ) from None
        ctx.applied[child.destination] = applied
        if (child.kind, child.name) not in existing:
            ctx.events.normal(
                Reason.CREATED,
                f"Created {child.kind}/{child.name} for destination {child.destination!r}",
            )
    await _prune(ctx, keep={(c.kind, c.name) for c in ctx.children})
    return None


# -- 4. summary -------------------------------------------------------------------------------


@step()
async def reconcile_summary(ctx: ApplicationContext) -> Result | None:
    app = ctx.obj
    kind = ctx.children[0].kind if ctx.children else "HelmRelease"
    statuses = {dest: obj.get("status") or {} for dest, obj in ctx.applied.items()}
    app.status.kind = "fluxcd"
    app.status.flux_app = FluxApplicationStatus(
        helm_release_status=statuses if kind == "HelmRelease" else None,
        kustomization_status=statuses if kind == "Kustomization" else None,
    )
    not_ready: list[str] = []
    for child in ctx.children:
        ready, message = expansion.ready_message(ctx.applied[child.destination])
        if not ready:
            not_ready.append(
                f"{child.kind}/{child.name} (destination {child.destination!r}): {message}"
            )
    total = len(ctx.children)
    ready_count = total - len(not_ready)
    await _label(ctx, {READY_NUMBER_LABEL: f"{ready_count}-{total}", APP_TYPE_LABEL: kind})
    plural = f"{kind}s" if total != 1 else kind
    if not_ready:
        raise Waiting(
            Reason.CHILDREN_NOT_READY,
            f"{ready_count}/{total} {plural} ready; not ready: {'; '.join(not_ready)}",
            requeue_after=ctx.services.requeue_not_ready,
        )
    ctx.ready_reason = Reason.SUCCEEDED
    ctx.ready_message = f"{ready_count}/{total} {plural} ready"
    return None


async def _label(ctx: ApplicationContext, labels: dict[str, str]) -> None:
    current = ctx.obj.metadata.labels or {}
    changed = {k: v for k, v in labels.items() if current.get(k) != v}
    if not changed:
        return
    # A label, not status: KubeSphere's UI selects and sorts Applications by it.
    await ctx.client.merge_patch(
        APPLICATION,
        ctx.obj.metadata.name,
        {"metadata": {"labels": changed}},
        namespace=ctx.obj.namespace,
    )


STEPS = (reconcile_expansion, reconcile_template, reconcile_children, reconcile_summary)


async def finalize(ctx: ApplicationContext) -> None:
    """Delete every child; their controllers uninstall and prune. Templates stay."""
    ctx.services.missing_secrets.discard(ctx.obj.key)
    with contextlib.suppress(NotFound):
        await _prune(ctx, keep=set())


# -- what makes an Application reconcile ----------------------------------------------------------


def child_watchers() -> Callable[[Change], list[str]]:
    """The Application owning a HelmRelease or Kustomization whose status changed."""

    def mapper(change: Change) -> list[str]:
        if change.kind == "updated" and (change.old or {}).get("status") == (change.new or {}).get(
            "status"
        ):
            return []
        meta = change.obj["metadata"]
        return [
            f"{meta.get('namespace')}/{owner['name']}"
            for owner in meta.get("ownerReferences") or []
            if owner.get("kind") == Application.KIND
            and str(owner.get("apiVersion", "")).startswith(f"{GROUP}/")
        ]

    return mapper


def template_watchers(apps: Store) -> Callable[[Change], list[str]]:
    """Applications naming a HelmChart as their template, when it appears or changes."""

    def mapper(change: Change) -> list[str]:
        if change.kind == "updated" and (change.old or {}).get("spec") == (change.new or {}).get(
            "spec"
        ):
            return []
        meta = change.obj["metadata"]
        namespace, name = meta.get("namespace"), meta["name"]
        keys = []
        for obj in apps.values(namespace):
            config = ((obj.get("spec") or {}).get("fluxApp") or {}).get("spec") or {}
            helm = (config.get("config") or {}).get("helmRelease") or {}
            if helm.get("template") == name:
                keys.append(f"{namespace}/{obj['metadata']['name']}")
        return keys

    return mapper


class FluxAppsRunner(Runner[ApplicationContext]):
    """The runner, for `spec.kind: fluxcd` Applications only.

    An argocd Application belongs to another controller: it gets neither our
    finalizer nor our status. One that was ours (it carries the finalizer) is
    still reconciled, so its children are removed and the finalizer released.
    An Application stalled on a missing kubeconfig Secret is looked at again
    later, since the Secret's creation is not watched.
    """

    def __init__(self, base: Runner[ApplicationContext], services: Services) -> None:
        super().__init__(
            base.reconciler, client=base.client, recorder=base.recorder, metrics=base.metrics
        )
        self.services = services

    async def reconcile(self, raw: JSON | None) -> Outcome:
        if raw is not None:
            meta = raw.get("metadata") or {}
            ours = FINALIZER in (meta.get("finalizers") or [])
            if (raw.get("spec") or {}).get("kind") != "fluxcd" and not ours:
                return Outcome("suspended")
        outcome = await super().reconcile(raw)
        if raw is not None and outcome.result == "stalled":
            key = f"{raw['metadata'].get('namespace')}/{raw['metadata']['name']}"
            if key in self.services.missing_secrets:
                return Outcome("stalled", requeue_after=self.services.requeue_not_ready)
        return outcome


def reconciler(services: Services) -> Reconciler[ApplicationContext]:
    context = functools.partial(ApplicationContext, services=services)

    return Reconciler(
        model=Application,
        steps=STEPS,
        context=context,
        finalize=finalize,
        success_reason=Reason.SUCCEEDED,
    )
