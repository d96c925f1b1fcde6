"""HelmRelease: a chart artifact and values, released with the real helm.

STEPS: unsupported → gates → dependencies → chart → values → target → release.

- unsupported: every field this version accepts in the API but does not
  build stalls the HelmRelease with a message naming the field (never
  silently ignored).
- chart: `spec.chart` makes the controller create and own a HelmChart
  `<namespace>-<name>` in the source's namespace; `spec.chartRef` names an
  existing HelmChart or an OCIRepository holding a chart (pushed with
  `helm push`). Either way the release waits for its artifact, which is
  downloaded and checked against its digest. A chart from an OCIRepository
  gets the version `<version>+<first 12 hex of the artifact digest>`, as in
  Flux, so a chart pushed again under the same version is a new release.
- values: `valuesFrom` (ConfigMap/Secret keys, optional, targetPath) merged in
  order, then `values` over them; their digest is the config digest.
- release: reads the release history from Helm's own storage Secrets,
  decides whether anything changed (chart version, config digest,
  generation, forceAt/resetAt) and only then runs `helm install` or
  `helm upgrade` (then `helm test` when enabled); failures are counted and
  remediated (uninstall after a failed install, rollback or uninstall after
  a failed upgrade) until the retries are exhausted, which stalls. A steady
  release (nothing to install or upgrade) is checked for drift instead, when
  `driftDetection` asks (`drifting`).

Helm runs as the controller, or as the tenant's ServiceAccount with
`--kube-as-user system:serviceaccount:<ns>:<sa>`, so a release can create
only what the tenant may. `kubeConfig.secretRef` releases to another cluster:
the Secret is read by the runtime's `TargetClusters` (inline credentials
only; files, `auth-provider`, and unless the operator allows them `exec` and
skipped TLS checks are refused, stalling the HelmRelease naming the field),
and helm gets a private kubeconfig holding exactly those checked credentials.
The chart, values and HelmRelease stay on the controller's cluster; the
release, its storage and drift detection are on the target.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import aiohttp
import yaml

from helm_controller import drifting, postrendering, releases
from sluice_api.helm import (
    FORCE_REQUESTED_AT_ANNOTATION,
    NAME_LABEL,
    NAMESPACE_LABEL,
    RESET_REQUESTED_AT_ANNOTATION,
    HelmRelease,
    HelmReleaseCondition,
    HelmReleaseReason,
    Snapshot,
)
from sluice_api.meta import Artifact, parse_duration
from sluice_api.source import HelmChart, OCIRepository
from sluice_runtime import dependencies, gatekeeping
from sluice_runtime.artifacts.fetching import ArtifactError, fetch_artifact
from sluice_runtime.conditions import condition_of
from sluice_runtime.helming import HelmError, run_helm
from sluice_runtime.informing.watching import Change, Index, Store
from sluice_runtime.kube import ignoring, kubeconfigs
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.discovery import RestMapper
from sluice_runtime.kube.errors import KubeError, NotFound
from sluice_runtime.kube.impersonation import (
    TargetClusterError,
    TargetClusterRefused,
    TargetClusters,
    impersonated_user,
)
from sluice_runtime.kube.resources import CONFIG_MAP, CRD, SECRET, ResourceType
from sluice_runtime.kube.secrets import SecretError, secret_data
from sluice_runtime.reconciling.errors import Stalling, StepError, Waiting
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import ReconcileContext, Result, step
from sluice_runtime.ssa.errors import ApplyError
from sluice_runtime.ssa.manager import ResourceManager

Condition = HelmReleaseCondition
Reason = HelmReleaseReason
FIELD_MANAGER = "helm-controller"
HELMCHART = ResourceType.of_model(HelmChart)
OCIREPOSITORY = ResourceType.of_model(OCIRepository)
DEFAULT_TIMEOUT = 300.0
DEFAULT_MAX_HISTORY = 5
MAX_CHART_SIZE = 64 << 20


@dataclass
class Services:
    """What HelmRelease steps share across reconciles."""

    session: aiohttp.ClientSession
    releases: Store
    charts: Store
    gates: Store
    oci_repositories: Store
    kubeconfig: str | None
    """The controller's kubeconfig for helm; None in a pod (helm uses in-cluster config)."""
    default_service_account: str | None = None
    requeue_dependency: float = 30.0
    no_cross_namespace_refs: bool = False
    attempts: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per HelmRelease uid: the release-deciding status fields this process last wrote."""
    mapper: RestMapper | None = None
    """Which resource serves a kind, for drift detection; made on first use."""
    targets: TargetClusters | None = None
    """Clients of remote clusters (`kubeConfig`), built once per Secret version."""

    def rest_mapper(self, client: KubeClient) -> RestMapper:
        # Discovery with the controller's own identity: every identity may read it.
        if self.mapper is None:
            self.mapper = RestMapper(client)
        return self.mapper


@dataclass(kw_only=True)
class HelmReleaseContext(ReconcileContext[HelmRelease]):
    services: Services
    artifact: Artifact | None = None
    chart_dir: Path | None = None
    revision: str = ""
    """The chart revision released: the HelmChart's, or the OCI chart's digest-suffixed version."""
    values: dict[str, Any] = field(default_factory=dict)
    config_digest: str = ""
    target_client: KubeClient | None = None
    """The remote cluster's client (its own identity), when `kubeConfig` is set."""
    target_mapper: RestMapper | None = None
    target_kubeconfig: str | None = None
    """The private kubeconfig file helm uses for the remote cluster."""

    @property
    def release_namespace(self) -> str:
        return self.obj.spec.target_namespace or self.obj.namespace

    @property
    def release_name(self) -> str:
        spec = self.obj.spec
        return releases.release_name(
            self.obj.metadata.name, spec.target_namespace, spec.release_name
        )

    @property
    def timeout(self) -> float:
        spec = self.obj.spec
        return parse_duration(spec.timeout).total_seconds() if spec.timeout else DEFAULT_TIMEOUT


def chart_name(hr: HelmRelease) -> str:
    """The HelmChart a `spec.chart` HelmRelease owns: `<namespace>-<name>`."""
    return f"{hr.metadata.namespace or 'default'}-{hr.metadata.name}"


# -- 1. fields not built ----------------------------------------------------------------


def unsupported_fields(hr: HelmRelease) -> list[str]:
    """Fields set on `hr` that this version does not build, by their API path."""
    spec = hr.spec
    found: list[str] = []
    if spec.kube_config is not None and spec.kube_config.config_map_ref is not None:
        found.append("spec.kubeConfig.configMapRef")
    if spec.chart is not None and spec.chart.spec.verify is not None:
        found.append("spec.chart.spec.verify")
    if any(dep.ready_expr for dep in spec.depends_on or []):
        found.append("spec.dependsOn[].readyExpr")
    if spec.storage_namespace is not None and spec.storage_namespace != (
        spec.target_namespace or hr.metadata.namespace
    ):
        # The helm CLI stores a release in the namespace it deploys to.
        found.append("spec.storageNamespace (different from the release namespace)")
    return found


@step()
async def reconcile_unsupported(ctx: HelmReleaseContext) -> Result | None:
    spec = ctx.obj.spec
    if (spec.chart is None) == (spec.chart_ref is None):
        raise Stalling(
            Reason.INIT_FAILED, "exactly one of spec.chart and spec.chartRef must be set"
        )
    found = unsupported_fields(ctx.obj)
    if found:
        raise Stalling(
            Reason.UNSUPPORTED,
            f"not supported by this version of Sluice: {', '.join(found)}; "
            "remove them to release this HelmRelease",
        )
    try:
        ignoring.validate(_ignore_rules(ctx.obj))
    except ignoring.InvalidSelector as error:
        raise Stalling(Reason.INIT_FAILED, f"spec.driftDetection.ignore: {error}") from None
    return None


def _ignore_rules(hr: HelmRelease) -> list[ignoring.IgnoreRule]:
    detection = hr.spec.drift_detection
    return ignoring.rules_of(detection.ignore or [] if detection else [])


# -- 2. gates ------------------------------------------------------------------------------


@step(Condition.APPROVED)
async def reconcile_gates(ctx: HelmReleaseContext) -> Result | None:
    """A closed gate holds install and upgrade (the release stays as it is)."""
    gatekeeping.hold_while_closed(
        ctx.obj.spec.gates,
        namespace=ctx.obj.namespace,
        store=ctx.services.gates,
        conditions=ctx.conditions,
        requeue_after=parse_duration(ctx.obj.spec.interval).total_seconds(),
    )
    return None


# -- 3. dependencies -------------------------------------------------------------------------


@step()
async def reconcile_dependencies(ctx: HelmReleaseContext) -> Result | None:
    if not ctx.obj.spec.depends_on:
        return None
    dependencies.require_ready(
        ctx.raw,
        ctx.services.releases.get,
        source_revision=None,
        requeue_after=ctx.services.requeue_dependency,
    )
    return None


# -- 4. chart ---------------------------------------------------------------------------------


def desired_chart(hr: HelmRelease) -> dict[str, Any]:
    """The HelmChart a `spec.chart` HelmRelease owns, as it applies it."""
    assert hr.spec.chart is not None
    template = hr.spec.chart
    spec = template.spec
    source_ns = spec.source_ref.namespace or hr.metadata.namespace or "default"
    labels = {**((template.metadata.labels if template.metadata else None) or {})}
    labels.update({NAME_LABEL: hr.metadata.name, NAMESPACE_LABEL: hr.metadata.namespace or ""})
    chart_spec: dict[str, Any] = {
        "chart": spec.chart,
        "version": spec.version,
        "sourceRef": {"kind": spec.source_ref.kind, "name": spec.source_ref.name},
        "interval": spec.interval or hr.spec.interval,
        "reconcileStrategy": spec.reconcile_strategy,
    }
    if spec.values_files:
        chart_spec["valuesFiles"] = spec.values_files
    if spec.ignore_missing_values_files:
        chart_spec["ignoreMissingValuesFiles"] = True
    metadata: dict[str, Any] = {"name": chart_name(hr), "namespace": source_ns, "labels": labels}
    annotations = template.metadata.annotations if template.metadata else None
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": HelmChart.api_version_str(),
        "kind": "HelmChart",
        "metadata": metadata,
        "spec": chart_spec,
    }


@step()
async def reconcile_chart(ctx: HelmReleaseContext) -> Result | None:
    hr = ctx.obj
    if hr.spec.chart is not None:
        wanted = desired_chart(hr)
        namespace = wanted["metadata"]["namespace"]
        if ctx.services.no_cross_namespace_refs and namespace != ctx.obj.namespace:
            raise Stalling(
                Reason.ARTIFACT_FAILED,
                f"cannot access HelmRepository/{namespace}: cross-namespace references are "
                "not allowed",
            )
        key = f"{namespace}/{wanted['metadata']['name']}"
        try:
            await ctx.client.apply(HELMCHART, wanted, field_manager=FIELD_MANAGER, force=True)
        except KubeError as error:
            raise StepError(
                Reason.ARTIFACT_FAILED, f"cannot create HelmChart '{key}': {error}"
            ) from None
        hr.status.helm_chart = key
        kind = "HelmChart"
    else:
        assert hr.spec.chart_ref is not None
        ref = hr.spec.chart_ref
        kind = ref.kind
        key = f"{ref.namespace or ctx.obj.namespace}/{ref.name}"
        if (
            ctx.services.no_cross_namespace_refs
            and (ref.namespace or ctx.obj.namespace) != ctx.obj.namespace
        ):
            raise Stalling(
                Reason.ARTIFACT_FAILED,
                f"cannot access {kind}/{key}: cross-namespace references are not allowed",
            )
    store = ctx.services.oci_repositories if kind == "OCIRepository" else ctx.services.charts
    chart = store.get(key)
    artifact = ((chart or {}).get("status") or {}).get("artifact")
    if chart is None or not artifact:
        raise Waiting(
            Reason.ARTIFACT_FAILED,
            f"{kind} '{key}' is not ready"
            + (f": {_ready_message(chart)}" if chart is not None and _ready_message(chart) else ""),
            requeue_after=ctx.services.requeue_dependency,
        )
    ctx.artifact = Artifact.model_validate(artifact)
    ctx.event_metadata["revision"] = ctx.artifact.revision
    work = Path(ctx.cleanup.enter_context(tempfile.TemporaryDirectory(prefix="hr-")))
    try:
        await fetch_artifact(
            ctx.services.session,
            url=ctx.artifact.url,
            digest=ctx.artifact.digest or "",
            dest=work / "chart",
            max_size=MAX_CHART_SIZE,
        )
    except (ArtifactError, ValueError) as error:
        raise StepError(
            Reason.ARTIFACT_FAILED,
            f"chart artifact '{ctx.artifact.revision}' of {kind} '{key}': {error}",
        ) from None
    dirs = [p for p in (work / "chart").iterdir() if (p / "Chart.yaml").is_file()]
    if len(dirs) != 1:
        raise StepError(Reason.ARTIFACT_FAILED, f"{kind} '{key}' artifact holds no chart")
    ctx.chart_dir = dirs[0]
    ctx.revision = ctx.artifact.revision
    if kind == "OCIRepository":
        ctx.revision = _version_with_digest(ctx.chart_dir, ctx.artifact, where=f"{kind} '{key}'")
    return None


def _version_with_digest(chart_dir: Path, artifact: Artifact, *, where: str) -> str:
    """Write `<version>+<12 hex of the digest>` into Chart.yaml and return it.

    An OCI tag can be pushed again with other content under the same chart
    version; the digest in the version makes that a new release, as in Flux.
    """
    meta_file = chart_dir / "Chart.yaml"
    try:
        meta = yaml.safe_load(meta_file.read_text())
        version = str(meta["version"])
    except (yaml.YAMLError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise StepError(
            Reason.ARTIFACT_FAILED, f"{where}: the chart's Chart.yaml is invalid: {error}"
        ) from None
    digest = (artifact.digest or artifact.revision).rpartition(":")[2][:12]
    meta["version"] = f"{version.split('+', 1)[0]}+{digest}"
    meta_file.write_text(yaml.safe_dump(meta, sort_keys=False))
    return str(meta["version"])


def _ready_message(chart: dict[str, Any]) -> str:
    ready = condition_of(chart)
    if ready is None or ready.get("status") == "True":
        return ""
    return str(ready.get("message") or "")


# -- 5. values -------------------------------------------------------------------------------


@step()
async def reconcile_values(ctx: HelmReleaseContext) -> Result | None:
    spec = ctx.obj.spec
    values: dict[str, Any] = {}
    for ref in spec.values_from or []:
        key = ref.values_key or "values.yaml"
        where = f"{ref.kind} '{ctx.obj.namespace}/{ref.name}'"
        try:
            if ref.kind == "Secret":
                data = await secret_data(ctx.client, ctx.obj.namespace, ref.name)
            else:
                found = await ctx.client.get(CONFIG_MAP, ref.name, ctx.obj.namespace)
                data = found.get("data") or {}
        except (NotFound, SecretError):
            if ref.optional:
                continue
            raise _values_error(f"could not resolve {where}: not found") from None
        if key not in data:
            if ref.optional:
                continue
            raise _values_error(f"could not resolve {where}: no key '{key}'")
        try:
            if ref.target_path:
                releases.set_path(values, ref.target_path, data[key])
            else:
                loaded = yaml.safe_load(data[key]) or {}
                if not isinstance(loaded, dict):
                    raise _values_error(f"{where} key '{key}' is not a YAML map")
                values = releases.merge(values, loaded)
        except yaml.YAMLError as error:
            raise _values_error(f"{where} key '{key}' is not valid YAML: {error}") from None
        except releases.ValuesError as error:
            raise _values_error(f"{where}: {error}") from None
    ctx.values = releases.merge(values, spec.values or {})
    ctx.config_digest = releases.config_digest(ctx.values)
    return None


def _values_error(message: str) -> StepError:
    return StepError(Reason.INIT_FAILED, message)


# -- 6. target cluster ---------------------------------------------------------------------------


@step()
async def reconcile_target(ctx: HelmReleaseContext) -> Result | None:
    """Resolve `kubeConfig`: the remote cluster's client and helm's kubeconfig for it."""
    try:
        await _resolve_target(ctx)
    except TargetClusterRefused as error:
        raise Stalling(Reason.INIT_FAILED, str(error)) from None
    except TargetClusterError as error:
        raise StepError(Reason.INIT_FAILED, str(error)) from None
    return None


async def _resolve_target(ctx: HelmReleaseContext) -> None:
    ref = ctx.obj.spec.kube_config
    if ref is None or ref.secret_ref is None:
        return
    if ctx.services.targets is None:
        ctx.services.targets = TargetClusters(ctx.client)
    # The cluster's own identity: impersonation is added per call (_cluster_client).
    target = await ctx.services.targets.resolve(
        namespace=ctx.obj.namespace, service_account_name=None, kubeconfig=ref.secret_ref
    )
    assert target.credentials is not None
    ctx.target_client, ctx.target_mapper = target.client, target.mapper
    work = Path(ctx.cleanup.enter_context(tempfile.TemporaryDirectory(prefix="hr-target-")))
    path = work / "kubeconfig"
    path.touch(mode=0o600)
    path.write_text(kubeconfigs.render(target.credentials))
    ctx.target_kubeconfig = str(path)


# -- 7. release --------------------------------------------------------------------------------


async def _history(ctx: HelmReleaseContext) -> list[tuple[dict[str, Any], Snapshot]]:
    secrets = await _base_client(ctx).list(
        SECRET,
        namespace=ctx.release_namespace,
        label_selector=f"owner=helm,name={ctx.release_name}",
    )
    try:
        return releases.history(secrets.items)
    except (ValueError, KeyError, OSError) as error:
        raise StepError(
            Reason.GET_LAST_RELEASE_FAILED, f"cannot read the release history: {error}"
        ) from None


def _account(ctx: HelmReleaseContext) -> str | None:
    return impersonated_user(
        ctx.obj.namespace, ctx.obj.spec.service_account_name, ctx.services.default_service_account
    )


def _identity(ctx: HelmReleaseContext) -> list[str]:
    user = _account(ctx)
    return ["--kube-as-user", user] if user else []


def _base_client(ctx: HelmReleaseContext) -> KubeClient:
    """The release's cluster with the controller's (or the kubeconfig's) own identity."""
    return ctx.target_client or ctx.client


def _cluster_client(ctx: HelmReleaseContext) -> KubeClient:
    """The client that acts on the release's objects: as the tenant, when there is one."""
    user = _account(ctx)
    base = _base_client(ctx)
    return base.impersonate(user) if user else base


async def _helm(ctx: HelmReleaseContext, args: list[str], *, timeout: float) -> str:
    result = await run_helm(
        [*args, "--namespace", ctx.release_namespace, *_identity(ctx)],
        # helm's own --timeout bounds its waits; give the process a margin over it.
        timeout=timeout + 60,
        kubeconfig=ctx.target_kubeconfig or ctx.services.kubeconfig,
    )
    return result.stdout


def _duration(text: str | None, default: float) -> float:
    return parse_duration(text).total_seconds() if text else default


def _release_args(
    ctx: HelmReleaseContext, action: str, values_file: Path
) -> tuple[list[str], float]:
    spec = ctx.obj.spec
    assert ctx.chart_dir is not None
    args = [action, ctx.release_name, str(ctx.chart_dir), "--values", str(values_file)]
    args += ["--description", f"{action} by Sluice helm-controller"]
    if action == "install":
        opts = spec.install
        timeout = _duration(opts.timeout if opts else None, ctx.timeout)
        if opts is not None:
            if opts.create_namespace:
                args.append("--create-namespace")
            # CreateReplace: the controller has applied them (_apply_crds).
            if opts.skip_crds or opts.crds in ("Skip", "CreateReplace"):
                args.append("--skip-crds")
            if opts.replace:
                args.append("--replace")
    else:
        up = spec.upgrade
        timeout = _duration(up.timeout if up else None, ctx.timeout)
        history = spec.max_history if spec.max_history is not None else DEFAULT_MAX_HISTORY
        args += ["--history-max", str(history), "--skip-crds"]
        if up is not None:
            if up.force:
                args.append("--force")
            if up.preserve_values:
                args.append("--reuse-values")
            else:
                args.append("--reset-values")
            if up.cleanup_on_fail:
                args.append("--cleanup-on-fail")
        else:
            args.append("--reset-values")
    opts_any: Any = spec.install if action == "install" else spec.upgrade
    if opts_any is None or not opts_any.disable_wait:
        args.append("--wait")
        if opts_any is None or not opts_any.disable_wait_for_jobs:
            args.append("--wait-for-jobs")
    if opts_any is not None:
        if opts_any.disable_hooks:
            args.append("--no-hooks")
        if opts_any.disable_open_api_validation:
            args.append("--disable-openapi-validation")
        if opts_any.disable_schema_validation:
            args.append("--skip-schema-validation")
    args += ["--timeout", f"{int(timeout)}s"]
    args += postrendering.helm_args(
        spec.post_renderers or [], spec.common_metadata, values_file.parent / "post-render"
    )
    return args, timeout


def _retries(ctx: HelmReleaseContext, action: str) -> tuple[int, bool]:
    """(retries, remediate the last failure) of the action's remediation."""
    spec = ctx.obj.spec
    remediation: Any = (
        (spec.install.remediation if spec.install else None)
        if action == "install"
        else (spec.upgrade.remediation if spec.upgrade else None)
    )
    retries = remediation.retries if remediation is not None else 0
    last = remediation.remediate_last_failure if remediation is not None else None
    return retries, (retries > 0 if last is None else last)


def _exhausted(failures: int, retries: int) -> bool:
    return retries >= 0 and failures > retries


ATTEMPT_FIELDS = (
    "last_attempted_generation",
    "last_attempted_revision",
    "last_attempted_revision_digest",
    "last_attempted_config_digest",
    "last_attempted_release_action",
    "last_handled_force_at",
    "last_handled_reset_at",
    "failures",
    "install_failures",
    "upgrade_failures",
)
"""Status fields that decide whether the next reconcile runs helm."""


# Released, Remediated and TestSuccess describe the last release action and must
# survive steady-state reconciles, so this step manages them itself.
@step()
async def reconcile_release(ctx: HelmReleaseContext) -> Result | None:
    """Decide and run the release action, from the freshest record of the last attempt.

    The informer cache can lag this process's own last status write (a
    reconcile queued by a HelmChart event runs as soon as the previous one
    ends); read from it, the last attempt would look undone and a steady
    release would be upgraded again. This process is the only writer of
    these fields, so its own memory of them is never older than the cache.
    """
    status = ctx.obj.status
    uid = ctx.obj.metadata.uid or ctx.obj.key
    remembered = ctx.services.attempts.get(uid)
    if remembered is not None:
        for name, value in remembered.items():
            if name in ATTEMPT_FIELDS:
                setattr(status, name, value)
        # The conditions that tell the last action's story are as fresh as the
        # fields: a stalled install must keep naming why it failed.
        ctx.conditions.delete(*RELEASE_CONDITIONS)
        for kept in remembered.get(_CONDITIONS) or []:
            ctx.conditions.set(kept.type, kept.status, kept.reason, kept.message)
    try:
        return await _release(ctx)
    finally:
        memory = {name: getattr(status, name) for name in ATTEMPT_FIELDS}
        memory[_CONDITIONS] = [
            c for t in RELEASE_CONDITIONS if (c := ctx.conditions.get(t)) is not None
        ]
        ctx.services.attempts[uid] = memory


_CONDITIONS = "conditions"
RELEASE_CONDITIONS = (Condition.RELEASED, Condition.TEST_SUCCESS, Condition.REMEDIATED)


async def _release(ctx: HelmReleaseContext) -> Result | None:
    hr = ctx.obj
    status = hr.status
    meta = hr.metadata
    annotations = meta.annotations or {}
    generation = meta.generation or 0
    assert ctx.artifact is not None and ctx.chart_dir is not None
    chart_meta = yaml.safe_load((ctx.chart_dir / "Chart.yaml").read_text()) or {}
    chart = f"{chart_meta.get('name')}@{chart_meta.get('version')}"
    desired = releases.Desired(
        chart_name=str(chart_meta.get("name")),
        chart_version=str(chart_meta.get("version")),
        config_digest=ctx.config_digest,
    )

    # A new generation, chart or values, or resetAt, starts counting failures again.
    reset = annotations.get(RESET_REQUESTED_AT_ANNOTATION)
    changed = (
        status.last_attempted_generation != generation
        or status.last_attempted_revision != ctx.revision
        or status.last_attempted_config_digest != ctx.config_digest
        or (reset is not None and reset != status.last_handled_reset_at)
    )
    if changed:
        status.failures = status.install_failures = status.upgrade_failures = None
    if reset is not None:
        status.last_handled_reset_at = reset
    force = annotations.get(FORCE_REQUESTED_AT_ANNOTATION)
    forced = force is not None and force != status.last_handled_force_at
    if force is not None:
        status.last_handled_force_at = force

    # Retries exhausted for the last action: nothing is tried again until the
    # spec, chart or values change (or resetAt/forceAt asks), as in Flux.
    last_action = status.last_attempted_release_action
    if last_action is not None and not changed and not forced:
        retries, _ = _retries(ctx, last_action)
        failures = (
            status.install_failures if last_action == "install" else status.upgrade_failures
        ) or 0
        if failures and _exhausted(failures, retries):
            released = ctx.conditions.get(Condition.RELEASED)
            tested = ctx.conditions.get(Condition.TEST_SUCCESS)
            last = next(
                (c.message for c in (tested, released) if c is not None and c.status == "False"),
                "",
            )
            raise Stalling(
                Reason.RETRIES_EXHAUSTED,
                f"Failed to {last_action} after {failures} attempt(s)"
                + (f": {last}" if last else ""),
            )

    found = await _history(ctx)
    _record_history(ctx, found)
    latest = found[0][1] if found else None
    action = releases.next_action(
        latest,
        desired,
        generation_changed=status.last_attempted_generation != generation,
        forced=forced,
    )
    if action is None:
        # Steady state: nothing to release. Keep Released as it was; a failed
        # test of this very release still counts (Helm's storage says so).
        assert latest is not None
        failed_tests = [
            name for name, hook in (latest.test_hooks or {}).items() if hook.phase == "Failed"
        ]
        test = ctx.obj.spec.test
        if failed_tests and test is not None and test.enable and not _ignore_test_failures(ctx):
            raise Stalling(
                Reason.TEST_FAILED,
                f"Helm test failed for release {latest.namespace}/{latest.name}.v{latest.version}"
                f": {', '.join(sorted(failed_tests))}",
            )
        ctx.ready_reason = _kept_reason(ctx)
        ctx.ready_message = _release_message(ctx, latest, "succeeded", chart=chart)
        ctx.conditions.mark_true(Condition.RELEASED, ctx.ready_reason, ctx.ready_message)
        await _drift(ctx, found[0][0], latest)
        return None

    status.last_attempted_generation = generation
    status.last_attempted_revision = ctx.revision
    status.last_attempted_revision_digest = ctx.artifact.digest
    status.last_attempted_config_digest = ctx.config_digest
    status.last_attempted_release_action = action  # type: ignore[assignment]
    status.storage_namespace = ctx.release_namespace
    ctx.conditions.delete(Condition.REMEDIATED, Condition.TEST_SUCCESS)
    # No mid-reconcile status write (ctx.progress): its watch event would queue
    # a second reconcile that reads the cache before this one's final status.

    work = Path(ctx.cleanup.enter_context(tempfile.TemporaryDirectory(prefix="hr-values-")))
    values_file = work / "values.json"
    values_file.write_text(json.dumps(ctx.values))
    values_file.chmod(0o600)
    args, timeout = _release_args(ctx, action, values_file)
    reasons = {
        "install": (Reason.INSTALL_SUCCEEDED, Reason.INSTALL_FAILED),
        "upgrade": (Reason.UPGRADE_SUCCEEDED, Reason.UPGRADE_FAILED),
    }
    ok_reason, failed_reason = reasons[action]
    try:
        await _apply_crds(ctx, action, timeout=timeout)
        await _helm(ctx, args, timeout=timeout)
    except HelmError as error:
        message = (
            f"Helm {action} failed for release {ctx.release_namespace}/{ctx.release_name} "
            f"with chart {chart}: {error}"
        )
        ctx.events.warning(failed_reason, message, metadata=ctx.event_metadata)
        ctx.conditions.mark_false(Condition.RELEASED, failed_reason, message)
        await _failed(ctx, action, failed_reason, message, chart=chart)

    found = await _history(ctx)
    _record_history(ctx, found)
    assert found
    current = found[0][1]
    message = _release_message(ctx, current, "succeeded", chart=chart, action=action)
    ctx.events.normal(ok_reason, message, metadata=ctx.event_metadata)
    ctx.conditions.mark_true(Condition.RELEASED, ok_reason, message)
    ctx.ready_reason, ctx.ready_message = ok_reason, message
    failure = await _test(ctx, current, chart=chart)
    if failure is not None:
        await _failed(ctx, action, Reason.TEST_FAILED, failure, chart=chart)
    status.failures = status.install_failures = status.upgrade_failures = None
    return None


async def _drift(ctx: HelmReleaseContext, release: dict[str, Any], snap: Snapshot) -> None:
    """Compare the cluster with the release manifest; report (warn) or correct (enabled).

    Only a steady release is checked: an install or upgrade has just written
    the manifest itself. Correction applies the drifted objects, never
    `helm upgrade`, so it adds no release revision.
    """
    detection = ctx.obj.spec.drift_detection
    mode = detection.mode if detection is not None else None
    if mode not in ("enabled", "warn"):
        return
    target = f"{snap.namespace}/{snap.name}.v{snap.version}"
    try:
        objects = drifting.manifest_objects(
            str(release.get("manifest") or ""), namespace=ctx.release_namespace
        )
    except drifting.ManifestError as error:
        raise StepError(
            Reason.RECONCILIATION_FAILED, f"drift detection of release {target}: {error}"
        ) from None
    manager = ResourceManager(
        _cluster_client(ctx),
        ctx.target_mapper or ctx.services.rest_mapper(ctx.client),
        field_manager=FIELD_MANAGER,
        owner_labels={},
        ignore_rules=_ignore_rules(ctx.obj),
    )
    try:
        found = drifting.drifted(await manager.preview_all(objects))
    except ApplyError as error:
        raise StepError(
            Reason.RECONCILIATION_FAILED, f"drift detection of release {target} failed: {error}"
        ) from None
    if not found:
        return
    ctx.log.info("drift detected", release=target, objects=[d.subject for d in found])
    if mode == "warn":
        ctx.events.warning(
            Reason.DRIFT_DETECTED,
            f"Cluster state of release {target} has drifted from the desired state:\n"
            + drifting.describe(found),
            metadata=ctx.event_metadata,
        )
        return
    try:
        changes = await manager.apply_all_staged(
            drifting.select(objects, found), wait_timeout=ctx.timeout
        )
    except ApplyError as error:
        message = f"Failed to correct cluster state of release {target}: {error}"
        ctx.events.warning(Reason.DRIFT_CORRECTION_FAILED, message, metadata=ctx.event_metadata)
        raise StepError(Reason.DRIFT_CORRECTION_FAILED, message) from None
    ctx.events.normal(
        Reason.DRIFT_CORRECTED,
        f"Cluster state of release {target} has been corrected:\n"
        + changes.summary(only_changes=True),
        metadata=ctx.event_metadata,
    )


def _crds_policy(ctx: HelmReleaseContext, action: str) -> str:
    """`install.crds` (Create unless skipCRDs) or `upgrade.crds` (Skip), as in Flux."""
    spec = ctx.obj.spec
    if action == "install":
        opts = spec.install
        if opts is not None and opts.crds:
            return opts.crds
        return "Skip" if opts is not None and opts.skip_crds else "Create"
    return (spec.upgrade.crds if spec.upgrade is not None else None) or "Skip"


async def _apply_crds(ctx: HelmReleaseContext, action: str, *, timeout: float) -> None:
    """Create (and with CreateReplace, replace) the chart's CRDs before the action.

    helm installs a chart's `crds/` only on install and never replaces them;
    `helm upgrade` ignores them. Flux's policies beyond that are the
    controller's work, done as the tenant; a failure is the action's failure.
    """
    policy = _crds_policy(ctx, action)
    if policy == "Skip" or (action == "install" and policy == "Create"):
        return
    assert ctx.chart_dir is not None
    work = Path(ctx.cleanup.enter_context(tempfile.TemporaryDirectory(prefix="hr-crds-")))
    try:
        crds = await asyncio.to_thread(releases.chart_crds, ctx.chart_dir, work)
    except releases.ChartCRDsError as error:
        raise HelmError(str(error)) from None
    for crd in crds:
        if crd.get("kind") != "CustomResourceDefinition" or not isinstance(
            crd.get("metadata"), dict
        ):
            raise HelmError(f"the chart's crds/ holds a {crd.get('kind')}, not a CRD")
    client = _cluster_client(ctx)
    names = []
    try:
        for crd in crds:
            name = str(crd["metadata"].get("name"))
            names.append(name)
            try:
                existing = await client.get(CRD, name)
            except NotFound:
                await client.create(CRD, crd)
                continue
            if policy == "CreateReplace":
                crd["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
                await client.replace(CRD, crd)
        await _wait_established(client, names, timeout=min(timeout, 60.0))
    except KubeError as error:
        raise HelmError(f"CustomResourceDefinitions ({policy}): {error}") from None


async def _wait_established(client: KubeClient, names: list[str], *, timeout: float) -> None:
    """Wait until every CRD named is served, so the chart's custom resources apply."""
    deadline = asyncio.get_running_loop().time() + timeout
    pending = list(names)
    while pending:
        crd = await client.get(CRD, pending[0])
        conditions = (crd.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            pending.pop(0)
            continue
        if asyncio.get_running_loop().time() > deadline:
            raise HelmError(f"CustomResourceDefinition {pending[0]} not established in time")
        await asyncio.sleep(0.2)


async def _failed(
    ctx: HelmReleaseContext, action: str, reason: str, message: str, *, chart: str
) -> NoReturn:
    """Count a failed action (or test), remediate it as configured, and raise:
    Stalling once the retries are exhausted, else a retried StepError."""
    status = ctx.obj.status
    retries, remediate_last = _retries(ctx, action)
    status.failures = (status.failures or 0) + 1
    if action == "install":
        status.install_failures = failures = (status.install_failures or 0) + 1
    else:
        status.upgrade_failures = failures = (status.upgrade_failures or 0) + 1
    exhausted = _exhausted(failures, retries)
    if not exhausted or remediate_last:
        await _remediate(ctx, action, chart=chart)
    _record_history(ctx, await _history(ctx))
    if exhausted:
        raise Stalling(
            Reason.RETRIES_EXHAUSTED, f"Failed to {action} after {failures} attempt(s): {message}"
        )
    raise StepError(reason, message)


def _kept_reason(ctx: HelmReleaseContext) -> str:
    released = ctx.conditions.get(Condition.RELEASED)
    if released is not None and released.status == "True":
        return released.reason
    if ctx.obj.status.last_attempted_release_action == "upgrade":
        return Reason.UPGRADE_SUCCEEDED
    return Reason.INSTALL_SUCCEEDED


def _release_message(
    ctx: HelmReleaseContext, snap: Snapshot, outcome: str, *, chart: str, action: str | None = None
) -> str:
    verb = action or ctx.obj.status.last_attempted_release_action or "install"
    return (
        f"Helm {verb} {outcome} for release {snap.namespace}/{snap.name}.v{snap.version} "
        f"with chart {snap.chart_name}@{snap.chart_version}"
    )


def _record_history(ctx: HelmReleaseContext, found: list[tuple[dict[str, Any], Snapshot]]) -> None:
    spec = ctx.obj.spec
    keep = spec.max_history if spec.max_history else DEFAULT_MAX_HISTORY
    ctx.obj.status.history = [snap for _, snap in found[:keep]] or None


async def _remediate(ctx: HelmReleaseContext, action: str, *, chart: str) -> None:
    """Undo a failed action: uninstall a failed install, roll back (or uninstall) an upgrade."""
    spec = ctx.obj.spec
    strategy = (
        "uninstall"
        if action == "install"
        else (
            (
                spec.upgrade.remediation.strategy
                if spec.upgrade and spec.upgrade.remediation
                else None
            )
            or "rollback"
        )
    )
    target = f"{ctx.release_namespace}/{ctx.release_name}"
    try:
        if strategy == "rollback":
            found = await _history(ctx)
            previous = releases.last_successful(found[1:])
            if previous is None:
                return
            rb = spec.rollback
            timeout = _duration(rb.timeout if rb else None, ctx.timeout)
            args = [
                "rollback",
                ctx.release_name,
                str(previous.version),
                "--timeout",
                f"{int(timeout)}s",
            ]
            if rb is None or not rb.disable_wait:
                args.append("--wait")
                if rb is None or not rb.disable_wait_for_jobs:
                    args.append("--wait-for-jobs")
            if rb is not None:
                args += [
                    f
                    for f, on in (
                        ("--no-hooks", rb.disable_hooks),
                        ("--recreate-pods", rb.recreate),
                        ("--force", rb.force),
                        ("--cleanup-on-fail", rb.cleanup_on_fail),
                    )
                    if on
                ]
            args += [
                "--history-max",
                str(spec.max_history if spec.max_history is not None else DEFAULT_MAX_HISTORY),
            ]
            await _helm(ctx, args, timeout=timeout)
            message = (
                f"Helm rollback to previous release {target}.v{previous.version} with chart "
                f"{previous.chart_name}@{previous.chart_version} succeeded"
            )
            reason = Reason.ROLLBACK_SUCCEEDED
        else:
            await _uninstall(ctx)
            message = f"Helm uninstall succeeded for release {target} with chart {chart}"
            reason = Reason.UNINSTALL_SUCCEEDED
    except HelmError as error:
        failed = Reason.ROLLBACK_FAILED if strategy == "rollback" else Reason.UNINSTALL_FAILED
        message = f"Helm {strategy} failed for release {target}: {error}"
        ctx.events.warning(failed, message, metadata=ctx.event_metadata)
        ctx.conditions.mark_false(Condition.REMEDIATED, failed, message)
        return
    ctx.events.normal(reason, message, metadata=ctx.event_metadata)
    ctx.conditions.mark_true(Condition.REMEDIATED, reason, message)


async def _uninstall(ctx: HelmReleaseContext) -> None:
    un = ctx.obj.spec.uninstall
    timeout = _duration(un.timeout if un else None, ctx.timeout)
    args = ["uninstall", ctx.release_name, "--timeout", f"{int(timeout)}s", "--ignore-not-found"]
    if un is None or not un.disable_wait:
        args.append("--wait")
    if un is not None:
        if un.disable_hooks:
            args.append("--no-hooks")
        if un.keep_history:
            args.append("--keep-history")
        args += ["--cascade", un.deletion_propagation]
    await _helm(ctx, args, timeout=timeout)


async def _test(ctx: HelmReleaseContext, current: Snapshot, *, chart: str) -> str | None:
    """Run `helm test` when enabled; the failure message when it failed and counts."""
    test = ctx.obj.spec.test
    if test is None or not test.enable:
        return None
    timeout = _duration(test.timeout, ctx.timeout)
    args = ["test", ctx.release_name, "--timeout", f"{int(timeout)}s"]
    for flt in test.filters or []:
        args += ["--filter", f"{'!' if flt.exclude else ''}name={flt.name}"]
    target = f"{current.namespace}/{current.name}.v{current.version}"
    try:
        await _helm(ctx, args, timeout=timeout)
    except HelmError as error:
        message = f"Helm test failed for release {target} with chart {chart}: {error}"
        ctx.events.warning(Reason.TEST_FAILED, message, metadata=ctx.event_metadata)
        ctx.conditions.mark_false(Condition.TEST_SUCCESS, Reason.TEST_FAILED, message)
        _record_history(ctx, await _history(ctx))
        return None if _ignore_test_failures(ctx) else message
    message = f"Helm test succeeded for release {target} with chart {chart}"
    ctx.events.normal(Reason.TEST_SUCCEEDED, message, metadata=ctx.event_metadata)
    ctx.conditions.mark_true(Condition.TEST_SUCCESS, Reason.TEST_SUCCEEDED, message)
    _record_history(ctx, await _history(ctx))
    return None


def _ignore_test_failures(ctx: HelmReleaseContext) -> bool:
    """The action's remediation.ignoreTestFailures, else test.ignoreFailures."""
    spec = ctx.obj.spec
    action = ctx.obj.status.last_attempted_release_action
    remediation: Any = (
        (spec.install.remediation if spec.install else None)
        if action == "install"
        else (spec.upgrade.remediation if spec.upgrade else None)
    )
    if remediation is not None and remediation.ignore_test_failures is not None:
        return bool(remediation.ignore_test_failures)
    return bool(spec.test and spec.test.ignore_failures)


STEPS = (
    reconcile_unsupported,
    reconcile_gates,
    reconcile_dependencies,
    reconcile_chart,
    reconcile_values,
    reconcile_target,
    reconcile_release,
)


async def finalize(ctx: HelmReleaseContext) -> None:
    """Uninstall the release and delete the HelmChart it owns."""
    hr = ctx.obj
    if not hr.spec.suspend and hr.status.history:
        try:
            await _resolve_target(ctx)
            await _uninstall(ctx)
            ctx.events.normal(
                Reason.UNINSTALL_SUCCEEDED,
                f"Helm uninstall succeeded for release {ctx.release_namespace}/{ctx.release_name}",
            )
        except (HelmError, TargetClusterError) as error:
            ctx.log.warning("uninstall on deletion failed", error=str(error))
            ctx.events.warning(Reason.UNINSTALL_FAILED, f"Helm uninstall failed: {error}")
    ctx.services.attempts.pop(hr.metadata.uid or hr.key, None)
    if hr.status.helm_chart:
        namespace, name = hr.status.helm_chart.split("/", 1)
        with contextlib.suppress(NotFound):
            await ctx.client.delete(HELMCHART, name, namespace=namespace)


# -- what makes a HelmRelease reconcile ----------------------------------------------------------


def chart_watchers(hrs: Store, kind: str = "HelmChart") -> Callable[[Change], list[str]]:
    """HelmReleases to reconcile when a HelmChart's (or an OCIRepository's) artifact or
    readiness changed."""

    def mapper(change: Change) -> list[str]:
        old = (change.old or {}).get("status") or {}
        new = (change.new or {}).get("status") or {}
        if (
            change.kind == "updated"
            and old.get("artifact") == new.get("artifact")
            and old.get("conditions") == new.get("conditions")
        ):
            return []
        meta = change.obj["metadata"]
        key = f"{meta.get('namespace')}/{meta['name']}"
        labels = meta.get("labels") or {}
        keys = []
        if labels.get(NAME_LABEL) and labels.get(NAMESPACE_LABEL):
            keys.append(f"{labels[NAMESPACE_LABEL]}/{labels[NAME_LABEL]}")
        keys += hrs.referencing(CHART_REF, f"{kind}/{key}")
        return keys

    return mapper


def _chart_refs(obj: dict[str, Any]) -> list[str]:
    ref = (obj.get("spec") or {}).get("chartRef")
    if not isinstance(ref, dict) or not ref.get("kind") or not ref.get("name"):
        return []
    namespace = ref.get("namespace") or obj["metadata"].get("namespace", "")
    return [f"{ref['kind']}/{namespace}/{ref['name']}"]


CHART_REF = Index("spec.chartRef", _chart_refs)
"""HelmReleases by what their `chartRef` names (`kind/namespace/name`)."""


def dependent_watchers(hrs: Store) -> Callable[[Change], list[str]]:
    def mapper(change: Change) -> list[str]:
        return dependencies.dependents(change.key, hrs)

    return mapper


def reconciler(services: Services) -> Reconciler[HelmReleaseContext]:
    context = functools.partial(HelmReleaseContext, services=services)
    return Reconciler(
        model=HelmRelease,
        steps=STEPS,
        context=context,
        negative_conditions=(),
        finalize=finalize,
        trigger_annotations=(FORCE_REQUESTED_AT_ANNOTATION, RESET_REQUESTED_AT_ANNOTATION),
        success_reason=Reason.INSTALL_SUCCEEDED,
    )
