"""The Kustomization's spec: which source to build, how to build it, and how to apply,
wait for and prune what the build produced.

The parts a HelmRelease reuses (dependencies, a remote cluster's kubeconfig)
are defined here once.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, StringConstraints

from sluice_api.kustomize.common import AnyObject
from sluice_api.kustomize.patches import Image, JSON6902Patch, Patch, Selector
from sluice_api.meta import (
    CELRule,
    Duration,
    KubeModel,
    LocalObjectReference,
    NamespacedObjectKindReference,
    SecretKeyReference,
    cel_rules,
)


class CrossNamespaceSourceReference(KubeModel):
    """The source whose artifact a Kustomization applies."""

    api_version: str | None = None
    """API version of the referent."""

    kind: Literal["OCIRepository", "GitRepository", "Bucket", "ExternalArtifact"]
    """Kind of the referent."""

    name: str
    """Name of the referent."""

    namespace: str | None = None
    """Namespace of the referent; the Kustomization's namespace when not set."""


class DependencyReference(KubeModel):
    """A Kustomization that must be ready before this one is applied."""

    name: str
    """Name of the referent."""

    namespace: str | None = None
    """Namespace of the referent; the Kustomization's namespace when not set."""

    ready_expr: str | None = None
    """CEL expression that decides the dependency's readiness instead of Ready."""


class CustomHealthCheck(KubeModel):
    """CEL expressions that assess the health of objects of one kind."""

    api_version: str
    """API version of the objects."""

    kind: str
    """Kind of the objects."""

    current: str
    """CEL expression true when the object is healthy."""

    in_progress: str | None = None
    """CEL expression true while the object is still progressing."""

    failed: str | None = None
    """CEL expression true when the object has failed."""


class DriftIgnoreRule(KubeModel):
    """Paths the controller neither corrects nor reports as drift."""

    paths: list[str]
    """JSON pointers (RFC 6901) to ignore."""

    target: Selector | None = None
    """The objects the rule applies to; every object when not set."""


class CommonMetadata(KubeModel):
    """Labels and annotations set on every applied object."""

    annotations: dict[str, str] | None = None
    """Annotations to set, overriding those with the same key."""

    labels: dict[str, str] | None = None
    """Labels to set, overriding those with the same key."""


class SubstituteReference(KubeModel):
    """A ConfigMap or Secret whose data provides substitution variables."""

    kind: Literal["Secret", "ConfigMap"]
    """Kind of the referent."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    """Name of the referent, in the Kustomization's namespace."""

    optional: bool = False
    """Proceed without its variables when the referent does not exist."""


class PostBuild(KubeModel):
    """What to do with the manifests after kustomize built them."""

    substitute: dict[str, str] | None = None
    """Variables to substitute for `${name}` in the manifests."""

    substitute_from: list[SubstituteReference] | None = None
    """ConfigMaps and Secrets whose data keys are variables, in order."""

    substitute_strategy: Literal["WithVariables", "Always"] | None = None
    """(Flux 2.9) `WithVariables` (the default) substitutes only when at least
    one variable is defined; `Always` substitutes even without any, so
    `${var:=default}` takes its default."""


class Decryption(KubeModel):
    """How to decrypt encrypted Secrets before applying them."""

    provider: Literal["sops"]
    """The decryption engine."""

    service_account_name: str | None = None
    """ServiceAccount to authenticate to cloud KMS services with."""

    secret_ref: LocalObjectReference | None = None
    """Secret with the private keys (age, OpenPGP) or KMS credentials."""


KUBECONFIG_ONE_OF = (
    "exactly one of spec.kubeConfig.configMapRef or spec.kubeConfig.secretRef must be specified"
)
KUBECONFIG_RULES = (
    CELRule("has(self.configMapRef) || has(self.secretRef)", KUBECONFIG_ONE_OF),
    CELRule("!has(self.configMapRef) || !has(self.secretRef)", KUBECONFIG_ONE_OF),
)


class KubeConfigReference(KubeModel):
    """Where to find a kubeconfig for a remote cluster: a Secret, or (Flux 2.7) a
    ConfigMap describing a cloud cluster reached with workload identity."""

    model_config = ConfigDict(json_schema_extra=cel_rules(*KUBECONFIG_RULES))

    secret_ref: SecretKeyReference | None = None
    """Secret holding the kubeconfig; key `value` or `value.yaml` when not set."""

    config_map_ref: LocalObjectReference | None = None
    """(Flux 2.7) ConfigMap with `provider`, `cluster` and `address` of a cloud
    cluster reached with workload identity. Sluice refuses it (Stalled): it has
    no cloud identity providers yet."""


class KustomizationSpec(KubeModel):
    """How to build manifests from a source and apply them."""

    source_ref: CrossNamespaceSourceReference
    """The source whose artifact is built and applied."""

    path: str | None = None
    """Directory in the artifact with a kustomization.yaml or plain manifests;
    the root of the artifact when not set."""

    interval: Duration
    """How often to reconcile, even without a new revision."""

    retry_interval: Duration | None = None
    """How soon to retry after a failure; the interval when not set."""

    timeout: Duration | None = None
    """Timeout for the apply and the health checks; the interval when not set."""

    prune: bool = False
    """Delete objects that are no longer in the built manifests. Flux v1 requires
    it; v1beta1 manifests (the kustomize-controller design's own) leave it out."""

    deletion_policy: Literal["MirrorPrune", "Delete", "WaitForTermination", "Orphan"] | None = None
    """What happens to applied objects when the Kustomization is deleted;
    MirrorPrune (the default) deletes them when prune is true."""

    force: bool = False
    """Re-create objects whose immutable fields changed."""

    wait: bool = False
    """Wait for every applied object to be ready; healthChecks are ignored."""

    suspend: bool = False
    """Stop reconciling this object; a reconcile under way finishes."""

    depends_on: list[DependencyReference] | None = None
    """Kustomizations that must be ready before this one is applied."""

    health_checks: list[NamespacedObjectKindReference] | None = None
    """Objects whose health decides the Healthy condition."""

    health_check_exprs: list[CustomHealthCheck] | None = None
    """CEL health checks for custom resources, used with wait or healthChecks."""

    target_namespace: Annotated[str, StringConstraints(min_length=1, max_length=63)] | None = None
    """Namespace to set on every namespaced object."""

    name_prefix: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    """Prefix for the names of all objects."""

    name_suffix: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    """Suffix for the names of all objects."""

    patches: list[Patch] | None = None
    """Strategic merge and JSON 6902 patches to apply to the built objects."""

    images: list[Image] | None = None
    """Image names, tags or digests to replace."""

    components: list[str] | None = None
    """Paths to kustomize components, relative to path."""

    ignore_missing_components: bool = False
    """Leave out components that do not exist instead of failing."""

    common_metadata: CommonMetadata | None = None
    """Labels and annotations to set on every object."""

    post_build: PostBuild | None = None
    """Variable substitution after the build."""

    decryption: Decryption | None = None
    """Decrypt SOPS-encrypted Secrets before applying them."""

    service_account_name: str | None = None
    """ServiceAccount to impersonate for every apply, prune and health read."""

    kube_config: KubeConfigReference | None = None
    """Apply to a remote cluster with this kubeconfig."""

    drift_ignore_rules: list[DriftIgnoreRule] | None = None
    """Fields to leave alone when correcting drift."""

    ignore: list[DriftIgnoreRule] | None = None
    """(Flux 2.9) JSON pointers the server-side apply neither sets nor corrects,
    e.g. replicas an autoscaler owns: the same rules as driftIgnoreRules, and
    applied with them."""

    build_metadata: list[Literal["originAnnotations", "transformerAnnotations"]] | None = None
    """(Flux 2.8) kustomize `buildMetadata` options for the build, as if the
    kustomization.yaml listed them: annotations naming each object's origin
    and transformers."""

    gates: list[LocalObjectReference] | None = None
    """Sluice: Gates that must all be open before anything is applied."""

    validation: Literal["none", "client", "server"] | None = None
    """(v1beta1, v1beta2) When the built objects are validated: `server` (the
    default) dry-runs the whole set on the API server before anything is applied;
    `client` and `none` check each object locally, then dry-run and apply stage
    by stage (CRDs and Namespaces first), so an earlier stage can be applied
    before a later one is refused. The API server validates every object before
    it is applied either way."""

    patches_strategic_merge: list[AnyObject] | None = None
    """(v1beta1, v1beta2) Strategic merge patches, each naming its target object;
    applied like `patches` entries without a target."""

    patches_json6902: list[JSON6902Patch] | None = None
    """(v1beta1, v1beta2) JSON 6902 patches; applied like `patches` entries."""
