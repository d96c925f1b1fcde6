"""What a Kustomization's spec asks for, in the runtime's terms, and what it asks
for that Sluice refuses. Pure functions of the spec: the table tests in
tests/test_flux_fields.py and tests/test_versions.py reach them without a cluster.
"""

from __future__ import annotations

from sluice_api.kustomize import KUBECONFIG_ONE_OF, Kustomization
from sluice_api.meta import parse_duration
from sluice_runtime.kube.expressions import HealthCheckExpr, HealthRules
from sluice_runtime.kube.ignoring import IgnoreRule, rules_of


def unsupported(ks: Kustomization) -> str | None:
    """Why this Kustomization's spec cannot be honoured, naming the field; None when
    it can. Fields Sluice accepts (Flux manifests must apply) but has not built
    are refused here rather than silently ignored, as are combinations Flux's CEL
    rules forbid, which API servers before 1.25 cannot check."""
    spec = ks.spec
    if spec.kube_config is not None:
        refs = (spec.kube_config.config_map_ref, spec.kube_config.secret_ref)
        if all(ref is None for ref in refs) or all(ref is not None for ref in refs):
            return KUBECONFIG_ONE_OF  # Flux's CEL rule, for servers without CEL
        if spec.kube_config.config_map_ref is not None:
            return (
                "spec.kubeConfig.configMapRef (workload identity for remote clusters) is not "
                "supported by this version of Sluice; use spec.kubeConfig.secretRef"
            )
    return None


def ignore_rules_by_field(ks: Kustomization) -> dict[str, list[IgnoreRule]]:
    """Each ignore field's rules, so a rule that cannot be used is named by its field.

    Flux's API gave the same rules two names (`ignore` in Flux 2.9's API,
    `driftIgnoreRules` as the pull request ended), both in manifests people write.
    """
    spec = ks.spec
    return {
        "driftIgnoreRules": rules_of(spec.drift_ignore_rules or []),
        "ignore": rules_of(spec.ignore or []),
    }


def ignore_rules(ks: Kustomization) -> list[IgnoreRule]:
    """`driftIgnoreRules` and `ignore` in the apply's terms: both take their JSON
    pointers out of what is applied, so a manifest using either name is honoured."""
    return [rule for rules in ignore_rules_by_field(ks).values() for rule in rules]


def health_rules(ks: Kustomization) -> HealthRules:
    """The compiled `healthCheckExprs`; raises InvalidExpression naming a bad one."""
    return HealthRules(
        HealthCheckExpr(
            api_version=check.api_version,
            kind=check.kind,
            current=check.current,
            in_progress=check.in_progress,
            failed=check.failed,
        )
        for check in ks.spec.health_check_exprs or []
    )


def dry_run_first_of(ks: Kustomization) -> bool:
    """v1beta1's `validation`: `client` and `none` skip the up-front server-side
    dry-run of the whole set; each stage is still dry-run before it is applied."""
    return ks.spec.validation in (None, "server")


def intervals(ks: Kustomization) -> tuple[float, float, float]:
    """`(interval, retry, timeout)` in seconds.

    A failure is retried after `retryInterval`, else `interval`, as in Flux,
    and never sooner than a second: asking again sooner would rebuild and
    dry-run a broken revision many times for the same answer. Waits (the
    apply's and the health checks') last `timeout`, else `interval`.
    """
    spec = ks.spec
    interval = parse_duration(spec.interval).total_seconds()
    retry = parse_duration(spec.retry_interval).total_seconds() if spec.retry_interval else interval
    timeout = parse_duration(spec.timeout).total_seconds() if spec.timeout else interval
    return interval, max(retry, 1.0), timeout
