"""Helm, as Sluice uses it: the real `helm` binary, and what two programs need around it.

The helm-controller releases charts and the `sluice` CLI previews them
(`sluice build|diff helmrelease`); both must render a HelmRelease the same
way, so what that takes lives here, by concern: `running` (one bounded,
private run of the helm binary), `values` (a HelmRelease's `valuesFrom` and
`values` composed as Flux composes them, and their digest), `storage`
(Helm's release Secrets decoded within limits, since a tenant may write
them) and `postrendering` (Flux's post-renderers and `commonMetadata`, the
program helm pipes its output through). The source-controller uses
`running` and `values` to package charts.
"""

from sluice_runtime.helming.running import (
    DISTRIBUTION,
    OUTPUT_LIMIT,
    HelmError,
    HelmMissing,
    HelmResult,
    KubeCache,
    helm_binary,
    run_helm,
)
from sluice_runtime.helming.values import merge_values

__all__ = [
    "DISTRIBUTION",
    "OUTPUT_LIMIT",
    "HelmError",
    "HelmMissing",
    "HelmResult",
    "KubeCache",
    "helm_binary",
    "merge_values",
    "run_helm",
]
