"""HelmRelease: a chart artifact and values, released with the real helm.

STEPS: unsupported → gates → dependencies → chart → values → release.

- unsupported: every field this version accepts in the API but does not
  build stalls the HelmRelease with a message naming the field (never
  silently ignored).
- chart: `spec.chart` makes the controller create and own a HelmChart
  `<namespace>-<name>` in the source's namespace; `spec.chartRef` names an
  existing HelmChart. Either way the release waits for its artifact, which
  is downloaded and checked against its digest.
- values: `valuesFrom` (ConfigMap/Secret keys, optional, targetPath) merged in
  order, then `values` over them; their digest is the config digest.
- release: reads the release history from Helm's own storage Secrets,
  decides whether anything changed (chart version, config digest,
  generation, forceAt/resetAt) and only then runs `helm install` or
  `helm upgrade` (then `helm test` when enabled); failures are counted and
  remediated (uninstall after a failed install, rollback or uninstall after
  a failed upgrade) until the retries are exhausted, which stalls.

Helm runs as the controller, or as the tenant's ServiceAccount with
`--kube-as-user system:serviceaccount:<ns>:<sa>`, so a release can create
only what the tenant may.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import aiohttp
import yaml

from helm_controller import releases
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
from sluice_api.source import HelmChart
from sluice_runtime import dependencies, gates
from sluice_runtime.artifacts.fetching import ArtifactError, fetch_artifact
from sluice_runtime.helming import HelmError, run_helm
from sluice_runtime.informing.watching import Change, Store
from sluice_runtime.kube.errors import KubeError, NotFound
from sluice_runtime.kube.impersonation import impersonated_user
from sluice_runtime.kube.resources import CONFIG_MAP, SECRET, ResourceType
from sluice_runtime.kube.secrets import SecretError, secret_data
from sluice_runtime.reconciling.errors import Stalling, StepError, Waiting
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import ReconcileContext, Result, step

Condition = HelmReleaseCondition
Reason = HelmReleaseReason
FIELD_MANAGER = "helm-controller"
HELMCHART = ResourceType.of_model(HelmChart)
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
    kubeconfig: str | None
    """The controller's kubeconfig for helm; None in a pod (helm uses in-cluster config)."""
    default_service_account: str | None = None
    requeue_dependency: float = 30.0
    no_cross_namespace_refs: bool = False
    attempts: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per HelmRelease uid: the release-deciding status fields this process last wrote."""


@dataclass(kw_only=True)
class HelmReleaseContext(ReconcileContext):
    services: Services
    artifact: Artifact | None = None
    chart_dir: Path | None = None
    values: dict[str, Any] = field(default_factory=dict)
    config_digest: str = ""

    @property
    def hr(self) -> HelmRelease:
        obj: HelmRelease = self.obj
        return obj

    @property
    def namespace(self) -> str:
        return self.hr.metadata.namespace or "default"

    @property
    def release_namespace(self) -> str:
        return self.hr.spec.target_namespace or self.namespace

    @property
    def release_name(self) -> str:
        spec = self.hr.spec
        return releases.release_name(
            self.hr.metadata.name, spec.target_namespace, spec.release_name
        )

    @property
    def timeout(self) -> float:
        spec = self.hr.spec
        return parse_duration(spec.timeout).total_seconds() if spec.timeout else DEFAULT_TIMEOUT


def chart_name(hr: HelmRelease) -> str:
    """The HelmChart a `spec.chart` HelmRelease owns: `<namespace>-<name>`."""
    return f"{hr.metadata.namespace or 'default'}-{hr.metadata.name}"


# -- 1. fields not built ----------------------------------------------------------------


def unsupported_fields(hr: HelmRelease) -> list[str]:
    """Fields set on `hr` that this version does not build, by their API path."""
    spec = hr.spec
    found: list[str] = []
    if spec.kube_config is not None:
        found.append("spec.kubeConfig")
    if spec.post_renderers:
        found.append("spec.postRenderers")
    if spec.drift_detection is not None and spec.drift_detection.mode in ("enabled", "warn"):
        found.append(f"spec.driftDetection.mode={spec.drift_detection.mode}")
    if spec.common_metadata is not None:
        found.append("spec.commonMetadata")
    if spec.chart is not None and spec.chart.spec.verify is not None:
        found.append("spec.chart.spec.verify")
    if spec.chart_ref is not None and spec.chart_ref.kind == "OCIRepository":
        found.append("spec.chartRef.kind=OCIRepository")
    if any(dep.ready_expr for dep in spec.depends_on or []):
        found.append("spec.dependsOn[].readyExpr")
    if spec.storage_namespace is not None and spec.storage_namespace != (
        spec.target_namespace or hr.metadata.namespace
    ):
        # The helm CLI stores a release in the namespace it deploys to.
        found.append("spec.storageNamespace (different from the release namespace)")
    if spec.upgrade is not None and spec.upgrade.crds in ("Create", "CreateReplace"):
        found.append(f"spec.upgrade.crds={spec.upgrade.crds}")
    if spec.install is not None and spec.install.crds == "CreateReplace":
        found.append("spec.install.crds=CreateReplace")
    return found


@step()
async def reconcile_unsupported(ctx: HelmReleaseContext) -> Result | None:
    spec = ctx.hr.spec
    if (spec.chart is None) == (spec.chart_ref is None):
        raise Stalling(
            Reason.INIT_FAILED, "exactly one of spec.chart and spec.chartRef must be set"
        )
    found = unsupported_fields(ctx.hr)
    if found:
        raise Stalling(
            Reason.UNSUPPORTED,
            f"not supported by this version of Sluice: {', '.join(found)}; "
            "remove them to release this HelmRelease",
        )
    return None


# -- 2. gates ------------------------------------------------------------------------------


@step(Condition.APPROVED)
async def reconcile_gates(ctx: HelmReleaseContext) -> Result | None:
    """A closed gate holds install and upgrade (the release stays as it is)."""
    gates.hold_while_closed(
        ctx.hr.spec.gates,
        namespace=ctx.namespace,
        store=ctx.services.gates,
        conditions=ctx.conditions,
        requeue_after=parse_duration(ctx.hr.spec.interval).total_seconds(),
    )
    return None


# -- 3. dependencies -------------------------------------------------------------------------


@step()
async def reconcile_dependencies(ctx: HelmReleaseContext) -> Result | None:
    if not ctx.hr.spec.depends_on:
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
    hr = ctx.hr
    if hr.spec.chart is not None:
        wanted = desired_chart(hr)
        namespace = wanted["metadata"]["namespace"]
        if ctx.services.no_cross_namespace_refs and namespace != ctx.namespace:
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
    else:
        assert hr.spec.chart_ref is not None
        ref = hr.spec.chart_ref
        key = f"{ref.namespace or ctx.namespace}/{ref.name}"
        if (
            ctx.services.no_cross_namespace_refs
            and (ref.namespace or ctx.namespace) != ctx.namespace
        ):
            raise Stalling(
                Reason.ARTIFACT_FAILED,
                f"cannot access HelmChart/{key}: cross-namespace references are not allowed",
            )
    chart = ctx.services.charts.get(key)
    artifact = ((chart or {}).get("status") or {}).get("artifact")
    if chart is None or not artifact:
        raise Waiting(
            Reason.ARTIFACT_FAILED,
            f"HelmChart '{key}' is not ready"
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
            f"chart artifact '{ctx.artifact.revision}' of HelmChart '{key}': {error}",
        ) from None
    dirs = [p for p in (work / "chart").iterdir() if (p / "Chart.yaml").is_file()]
    if len(dirs) != 1:
        raise StepError(Reason.ARTIFACT_FAILED, f"HelmChart '{key}' artifact holds no chart")
    ctx.chart_dir = dirs[0]
    return None


def _ready_message(chart: dict[str, Any]) -> str:
    for cond in (chart.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") != "True":
            return str(cond.get("message") or "")
    return ""


# -- 5. values -------------------------------------------------------------------------------


@step()
async def reconcile_values(ctx: HelmReleaseContext) -> Result | None:
    spec = ctx.hr.spec
    values: dict[str, Any] = {}
    for ref in spec.values_from or []:
        key = ref.values_key or "values.yaml"
        where = f"{ref.kind} '{ctx.namespace}/{ref.name}'"
        try:
            if ref.kind == "Secret":
                data = await secret_data(ctx.client, ctx.namespace, ref.name)
            else:
                data = (await ctx.client.get(CONFIG_MAP, ref.name, ctx.namespace)).get("data") or {}
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


# -- 6. release --------------------------------------------------------------------------------


async def _history(ctx: HelmReleaseContext) -> list[tuple[dict[str, Any], Snapshot]]:
    secrets = await ctx.client.list(
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


def _identity(ctx: HelmReleaseContext) -> list[str]:
    user = impersonated_user(
        ctx.namespace, ctx.hr.spec.service_account_name, ctx.services.default_service_account
    )
    return ["--kube-as-user", user] if user else []


async def _helm(ctx: HelmReleaseContext, args: list[str], *, timeout: float) -> str:
    result = await run_helm(
        [*args, "--namespace", ctx.release_namespace, *_identity(ctx)],
        # helm's own --timeout bounds its waits; give the process a margin over it.
        timeout=timeout + 60,
        kubeconfig=ctx.services.kubeconfig,
    )
    return result.stdout


def _duration(text: str | None, default: float) -> float:
    return parse_duration(text).total_seconds() if text else default


def _release_args(
    ctx: HelmReleaseContext, action: str, values_file: Path
) -> tuple[list[str], float]:
    spec = ctx.hr.spec
    assert ctx.chart_dir is not None
    args = [action, ctx.release_name, str(ctx.chart_dir), "--values", str(values_file)]
    args += ["--description", f"{action} by Sluice helm-controller"]
    if action == "install":
        opts = spec.install
        timeout = _duration(opts.timeout if opts else None, ctx.timeout)
        if opts is not None:
            if opts.create_namespace:
                args.append("--create-namespace")
            if opts.skip_crds or opts.crds == "Skip":
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
    return args, timeout


def _retries(ctx: HelmReleaseContext, action: str) -> tuple[int, bool]:
    """(retries, remediate the last failure) of the action's remediation."""
    spec = ctx.hr.spec
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
    status = ctx.hr.status
    uid = ctx.hr.metadata.uid or ctx.hr.key
    remembered = ctx.services.attempts.get(uid)
    if remembered is not None:
        for name, value in remembered.items():
            setattr(status, name, value)
    try:
        return await _release(ctx)
    finally:
        ctx.services.attempts[uid] = {name: getattr(status, name) for name in ATTEMPT_FIELDS}


async def _release(ctx: HelmReleaseContext) -> Result | None:
    hr = ctx.hr
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
        or status.last_attempted_revision != ctx.artifact.revision
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
        test = ctx.hr.spec.test
        if failed_tests and test is not None and test.enable and not _ignore_test_failures(ctx):
            raise Stalling(
                Reason.TEST_FAILED,
                f"Helm test failed for release {latest.namespace}/{latest.name}.v{latest.version}"
                f": {', '.join(sorted(failed_tests))}",
            )
        ctx.ready_reason = _kept_reason(ctx)
        ctx.ready_message = _release_message(ctx, latest, "succeeded", chart=chart)
        ctx.conditions.mark_true(Condition.RELEASED, ctx.ready_reason, ctx.ready_message)
        return None

    status.last_attempted_generation = generation
    status.last_attempted_revision = ctx.artifact.revision
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


async def _failed(
    ctx: HelmReleaseContext, action: str, reason: str, message: str, *, chart: str
) -> NoReturn:
    """Count a failed action (or test), remediate it as configured, and raise:
    Stalling once the retries are exhausted, else a retried StepError."""
    status = ctx.hr.status
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
    if ctx.hr.status.last_attempted_release_action == "upgrade":
        return Reason.UPGRADE_SUCCEEDED
    return Reason.INSTALL_SUCCEEDED


def _release_message(
    ctx: HelmReleaseContext, snap: Snapshot, outcome: str, *, chart: str, action: str | None = None
) -> str:
    verb = action or ctx.hr.status.last_attempted_release_action or "install"
    return (
        f"Helm {verb} {outcome} for release {snap.namespace}/{snap.name}.v{snap.version} "
        f"with chart {snap.chart_name}@{snap.chart_version}"
    )


def _record_history(ctx: HelmReleaseContext, found: list[tuple[dict[str, Any], Snapshot]]) -> None:
    spec = ctx.hr.spec
    keep = spec.max_history if spec.max_history else DEFAULT_MAX_HISTORY
    ctx.hr.status.history = [snap for _, snap in found[:keep]] or None


async def _remediate(ctx: HelmReleaseContext, action: str, *, chart: str) -> None:
    """Undo a failed action: uninstall a failed install, roll back (or uninstall) an upgrade."""
    spec = ctx.hr.spec
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
    un = ctx.hr.spec.uninstall
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
    test = ctx.hr.spec.test
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
    spec = ctx.hr.spec
    action = ctx.hr.status.last_attempted_release_action
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
    reconcile_release,
)


async def finalize(ctx: HelmReleaseContext) -> None:
    """Uninstall the release and delete the HelmChart it owns."""
    hr = ctx.hr
    if not hr.spec.suspend and hr.status.history:
        try:
            await _uninstall(ctx)
            ctx.events.normal(
                Reason.UNINSTALL_SUCCEEDED,
                f"Helm uninstall succeeded for release {ctx.release_namespace}/{ctx.release_name}",
            )
        except HelmError as error:
            ctx.log.warning("uninstall on deletion failed", error=str(error))
            ctx.events.warning(Reason.UNINSTALL_FAILED, f"Helm uninstall failed: {error}")
    ctx.services.attempts.pop(hr.metadata.uid or hr.key, None)
    if hr.status.helm_chart:
        namespace, name = hr.status.helm_chart.split("/", 1)
        with contextlib.suppress(NotFound):
            await ctx.client.delete(HELMCHART, name, namespace=namespace)


# -- what makes a HelmRelease reconcile ----------------------------------------------------------


def chart_watchers(hrs: Store) -> Callable[[Change], list[str]]:
    """HelmReleases to reconcile when a HelmChart's artifact or readiness changed."""

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
        for obj in hrs.values():
            ref = (obj.get("spec") or {}).get("chartRef") or {}
            ns = obj["metadata"].get("namespace")
            if (
                ref.get("kind") == "HelmChart"
                and f"{ref.get('namespace') or ns}/{ref.get('name')}" == key
            ):
                keys.append(f"{ns}/{obj['metadata']['name']}")
        return keys

    return mapper


def dependent_watchers(hrs: Store) -> Callable[[Change], list[str]]:
    def mapper(change: Change) -> list[str]:
        meta = change.obj["metadata"]
        return dependencies.dependents(
            f"{meta.get('namespace')}/{meta['name']}", list(hrs.values())
        )

    return mapper


def reconciler(services: Services) -> Reconciler[HelmReleaseContext]:
    def make(**base: Any) -> HelmReleaseContext:
        return HelmReleaseContext(services=services, **base)

    return Reconciler(
        model=HelmRelease,
        steps=STEPS,
        context=make,
        negative_conditions=(),
        finalize=finalize,
        trigger_annotations=(FORCE_REQUESTED_AT_ANNOTATION, RESET_REQUESTED_AT_ANNOTATION),
        success_reason=Reason.INSTALL_SUCCEEDED,
    )
