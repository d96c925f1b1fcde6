"""The models read Flux manifests unchanged and reject what Flux rejects."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from sluice_api import ALL_KINDS, format_duration, parse_duration
from sluice_api.gating import Gate, GateSpec
from sluice_api.helm import HelmRelease
from sluice_api.kustomize import Kustomization
from sluice_api.meta import Condition, ObjectMeta, Resource
from sluice_api.notification import Alert, Provider, Receiver
from sluice_api.source import Bucket, GitRepository, HelmChart, HelmRepository, OCIRepository

GIT_REPOSITORY = """
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata:
  name: podinfo
  namespace: flux-system
spec:
  interval: 5m0s
  url: https://github.com/stefanprodan/podinfo
  ref:
    branch: master
  secretRef:
    name: https-credentials
  ignore: |
    # exclude all
    /*
    # include deploy dir
    !/deploy
  include:
    - repository:
        name: shared-config
      fromPath: deploy/base
      toPath: base
  sparseCheckout:
    - deploy
  verify:
    mode: HEAD
    secretRef:
      name: pgp-public-keys
"""

KUSTOMIZATION = """
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: apps
  namespace: flux-system
spec:
  interval: 10m
  retryInterval: 2m
  timeout: 5m
  sourceRef:
    kind: GitRepository
    name: flux-system
  path: ./apps/production
  prune: true
  wait: true
  targetNamespace: apps
  dependsOn:
    - name: infra-controllers
    - name: infra-configs
      namespace: flux-system
  healthChecks:
    - apiVersion: apps/v1
      kind: Deployment
      name: podinfo
      namespace: apps
  patches:
    - patch: |-
        - op: replace
          path: /spec/replicas
          value: 3
      target:
        kind: Deployment
        labelSelector: app.kubernetes.io/part-of=podinfo
  images:
    - name: ghcr.io/stefanprodan/podinfo
      newTag: 6.5.0
  commonMetadata:
    labels:
      team: platform
  postBuild:
    substitute:
      cluster_env: production
      cluster_region: eu-central-1
    substituteFrom:
      - kind: ConfigMap
        name: cluster-vars
      - kind: Secret
        name: cluster-secret-vars
        optional: true
  decryption:
    provider: sops
    secretRef:
      name: sops-age
  gates:
    - name: change-freeze
"""

KUSTOMIZATION_WITH_STATUS = """
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: podinfo
  namespace: default
  generation: 3
  resourceVersion: "4242"
  uid: 6f0d9c6e-2f0a-4a39-8b8f-0f7e5d1f2c11
  finalizers:
    - finalizers.fluxcd.io
spec:
  interval: 1h
  sourceRef:
    kind: OCIRepository
    name: podinfo
  prune: false
status:
  observedGeneration: 3
  lastAppliedRevision: 6.5.0@sha256:0d6a1c4c
  lastAttemptedRevision: 6.5.0@sha256:0d6a1c4c
  lastHandledReconcileAt: "2024-05-01T10:00:00Z"
  conditions:
    - type: Ready
      status: "True"
      observedGeneration: 3
      lastTransitionTime: "2024-05-01T10:00:05Z"
      reason: ReconciliationSucceeded
      message: "Applied revision: 6.5.0@sha256:0d6a1c4c"
  inventory:
    entries:
      - id: default_podinfo__Service
        v: v1
      - id: default_podinfo_apps_Deployment
        v: v1
"""

RECEIVER = """
apiVersion: notification.toolkit.fluxcd.io/v1
kind: Receiver
metadata:
  name: github-receiver
  namespace: flux-system
spec:
  type: github
  events:
    - ping
    - push
  secretRef:
    name: webhook-token
  resources:
    - apiVersion: source.toolkit.fluxcd.io/v1
      kind: GitRepository
      name: webapp
    - kind: GitRepository
      name: "*"
      matchLabels:
        repo: webapp
    - kind: Gate
      name: change-freeze
      action: open
"""

OCI_REPOSITORY = """
apiVersion: source.toolkit.fluxcd.io/v1beta2
kind: OCIRepository
metadata:
  name: podinfo
  namespace: default
spec:
  interval: 5m
  url: oci://ghcr.io/stefanprodan/manifests/podinfo
  ref:
    semver: ">=6.0.0"
  layerSelector:
    mediaType: application/vnd.cncf.flux.content.v1.tar+gzip
    operation: copy
  verify:
    provider: cosign
    matchOIDCIdentity:
      - issuer: ^https://token\\.actions\\.githubusercontent\\.com$
        subject: ^https://github\\.com/stefanprodan/podinfo.*$
"""

HELM_REPOSITORY = """
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata:
  name: podinfo
  namespace: default
spec:
  type: oci
  interval: 5m0s
  url: oci://ghcr.io/stefanprodan/charts
"""

HELM_CHART = """
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmChart
metadata:
  name: podinfo
  namespace: default
spec:
  interval: 5m0s
  chart: podinfo
  reconcileStrategy: ChartVersion
  sourceRef:
    kind: HelmRepository
    name: podinfo
  version: "5.*"
  valuesFiles:
    - values-prod.yaml
"""

HELM_RELEASE = """
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: podinfo
  namespace: default
spec:
  interval: 10m
  timeout: 5m
  chart:
    spec:
      chart: podinfo
      version: '6.5.*'
      sourceRef:
        kind: HelmRepository
        name: podinfo
      interval: 5m
  releaseName: podinfo
  install:
    remediation:
      retries: 3
  upgrade:
    remediation:
      retries: 3
      strategy: rollback
  test:
    enable: true
  driftDetection:
    mode: enabled
    ignore:
    - paths: ["/spec/replicas"]
      target:
        kind: Deployment
  valuesFrom:
  - kind: ConfigMap
    name: podinfo-values
    valuesKey: values.yaml
    targetPath: replicaCount
    optional: true
  values:
    replicaCount: 2
    ingress:
      hosts: [{host: a.example.com}]
status:
  observedGeneration: 1
  history:
  - digest: sha256:abc
    name: podinfo
    namespace: default
    version: 1
    status: deployed
    chartName: podinfo
    chartVersion: 6.5.4
    appVersion: 6.5.4
    configDigest: sha256:def
    firstDeployed: "2024-05-07T04:54:21Z"
    lastDeployed: "2024-05-07T04:54:21Z"
  lastAttemptedReleaseAction: install
"""

BUCKET = """
apiVersion: source.toolkit.fluxcd.io/v1
kind: Bucket
metadata:
  name: minio-bucket
  namespace: default
spec:
  interval: 5m0s
  endpoint: minio.example.com
  insecure: true
  secretRef:
    name: minio-bucket-secret
  bucketName: example
"""

ALERT = """
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata:
  name: on-call-webapp
  namespace: flux-system
spec:
  summary: "Cluster addons impacted in us-east-2"
  providerRef:
    name: slack-bot
  eventSeverity: error
  eventSources:
    - kind: GitRepository
      name: "*"
    - kind: Kustomization
      name: "*"
  exclusionList:
    - "^.*timeout waiting for.*$"
  eventMetadata:
    env: production
"""

PROVIDER = """
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata:
  name: slack-bot
  namespace: flux-system
spec:
  type: slack
  channel: general
  address: https://slack.com/api/chat.postMessage
  secretRef:
    name: slack-bot-token
"""

GATE = """
apiVersion: gating.toolkit.fluxcd.io/v1alpha1
kind: Gate
metadata:
  name: change-freeze
  namespace: flux-system
spec:
  interval: 30s
  default: closed
  window: 2h
  schedule:
    - cron: "0 9 * * 1-5"
      timeZone: Europe/Berlin
      window: 8h
"""

MANIFESTS = [
    pytest.param(GitRepository, GIT_REPOSITORY, id="gitrepository-branch-ignore"),
    pytest.param(Kustomization, KUSTOMIZATION, id="kustomization-dependson-patches-postbuild"),
    pytest.param(Kustomization, KUSTOMIZATION_WITH_STATUS, id="kustomization-with-status"),
    pytest.param(Receiver, RECEIVER, id="receiver-github"),
    pytest.param(OCIRepository, OCI_REPOSITORY, id="ocirepository-v1beta2-semver-verify"),
    pytest.param(HelmRepository, HELM_REPOSITORY, id="helmrepository-oci"),
    pytest.param(HelmChart, HELM_CHART, id="helmchart"),
    pytest.param(HelmRelease, HELM_RELEASE, id="helmrelease-values-history"),
    pytest.param(Bucket, BUCKET, id="bucket"),
    pytest.param(Alert, ALERT, id="alert"),
    pytest.param(Provider, PROVIDER, id="provider"),
    pytest.param(Gate, GATE, id="gate-schedule"),
]


def is_subset(small: Any, large: Any) -> bool:
    if isinstance(small, dict):
        return isinstance(large, dict) and all(
            key in large and is_subset(value, large[key]) for key, value in small.items()
        )
    if isinstance(small, list):
        return (
            isinstance(large, list)
            and len(small) == len(large)
            and all(is_subset(a, b) for a, b in zip(small, large, strict=True))
        )
    return bool(small == large)


@pytest.mark.parametrize(("model", "manifest"), MANIFESTS)
def test_manifest_round_trips(model: type[Resource[Any, Any]], manifest: str) -> None:
    obj = yaml.safe_load(manifest)
    parsed = model.from_obj(obj)
    exact = parsed.model_dump(by_alias=True, exclude_none=True, exclude_unset=True)
    assert exact == obj
    # With the defaults filled in, every field of the manifest is still there.
    assert is_subset(obj, parsed.model_dump(by_alias=True, exclude_none=True))
    assert is_subset(obj, parsed.to_obj())


def test_parsed_fields_are_typed() -> None:
    repo = GitRepository.from_obj(yaml.safe_load(GIT_REPOSITORY))
    assert repo.spec.ref is not None
    assert repo.spec.ref.branch == "master"
    assert repo.spec.timeout == "60s"
    assert repo.spec.ignore is not None
    assert "!/deploy" in repo.spec.ignore
    assert repo.status.observed_generation == -1
    assert repo.key == "flux-system/podinfo"

    ks = Kustomization.from_obj(yaml.safe_load(KUSTOMIZATION_WITH_STATUS))
    assert ks.status.inventory is not None
    assert [e.version for e in ks.status.inventory.entries] == ["v1", "v1"]
    assert ks.status.conditions[0].status == "True"

    receiver = Receiver.from_obj(yaml.safe_load(RECEIVER))
    assert [r.action for r in receiver.spec.resources] == [None, None, "open"]


def test_objects_built_in_python_carry_their_type() -> None:
    gate = Gate(metadata=ObjectMeta(name="freeze", namespace="apps"), spec=GateSpec(interval="1m"))
    # Nothing empty that a merge patch would apply as "clear this".
    assert gate.to_obj() == {
        "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
        "kind": "Gate",
        "metadata": {"name": "freeze", "namespace": "apps"},
        "spec": {"interval": "1m", "default": "closed", "window": "1h"},
        "status": {"observedGeneration": -1, "conditions": []},
    }
    assert Gate.api_version_str() == "gating.toolkit.fluxcd.io/v1alpha1"


def test_unknown_fields_are_ignored() -> None:
    obj = yaml.safe_load(GIT_REPOSITORY)
    obj["spec"]["someFutureField"] = True
    obj["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    assert GitRepository.from_obj(obj).spec.url == "https://github.com/stefanprodan/podinfo"


def test_all_kinds_are_distinct() -> None:
    assert len({(m.GROUP, m.KIND) for m in ALL_KINDS}) == len(ALL_KINDS) == 14
    assert len({m.PLURAL for m in ALL_KINDS}) == len(ALL_KINDS)


def set_path(obj: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    """A copy of obj with the dotted path (list indexes as numbers) set or, for None, removed."""
    obj = copy.deepcopy(obj)
    *parents, last = path.split(".")
    node: Any = obj
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    if value is None:
        del node[last]
    else:
        node[last] = value
    return obj


CONDITION = {
    "type": "Ready",
    "status": "True",
    "reason": "Succeeded",
    "message": "",
    "lastTransitionTime": "2024-01-01T00:00:00Z",
}


@pytest.mark.parametrize(
    ("model", "manifest", "path", "value"),
    [
        pytest.param(GitRepository, GIT_REPOSITORY, "spec.interval", "1 minute", id="bad-interval"),
        pytest.param(GitRepository, GIT_REPOSITORY, "spec.interval", "5d", id="days-not-allowed"),
        pytest.param(GitRepository, GIT_REPOSITORY, "spec.timeout", "1h", id="timeout-no-hours"),
        pytest.param(GitRepository, GIT_REPOSITORY, "spec.url", "ftp://example.com", id="git-url"),
        pytest.param(GitRepository, GIT_REPOSITORY, "spec.verify.mode", "Any", id="verify-mode"),
        pytest.param(OCIRepository, OCI_REPOSITORY, "spec.url", "https://ghcr.io/x", id="oci-url"),
        pytest.param(
            OCIRepository, OCI_REPOSITORY, "spec.layerSelector.operation", "unpack", id="layer-op"
        ),
        pytest.param(
            Kustomization, KUSTOMIZATION, "spec.sourceRef.kind", "HelmRepository", id="source-kind"
        ),
        pytest.param(Kustomization, KUSTOMIZATION, "spec.prune", "maybe", id="prune-bool"),
        pytest.param(
            Kustomization, KUSTOMIZATION, "spec.deletionPolicy", "Keep", id="deletion-policy"
        ),
        pytest.param(
            Kustomization, KUSTOMIZATION, "spec.targetNamespace", "x" * 64, id="target-ns-length"
        ),
        pytest.param(
            Kustomization,
            KUSTOMIZATION,
            "spec.postBuild.substituteFrom.0.kind",
            "Namespace",
            id="substitute-from-kind",
        ),
        pytest.param(Gate, GATE, "spec.default", "open", id="gate-default"),
        pytest.param(Gate, GATE, "spec.schedule.0.window", "forever", id="gate-schedule-window"),
        pytest.param(Receiver, RECEIVER, "spec.type", "jenkins", id="receiver-type"),
        pytest.param(Receiver, RECEIVER, "spec.resources.0.filter", 5, id="receiver-filter"),
        pytest.param(Receiver, RECEIVER, "spec.resources.2.action", "toggle", id="gate-action"),
        pytest.param(Alert, ALERT, "spec.eventSeverity", "warning", id="alert-severity"),
        pytest.param(Provider, PROVIDER, "spec.type", "carrier-pigeon", id="provider-type"),
        pytest.param(
            Kustomization,
            KUSTOMIZATION_WITH_STATUS,
            "status.conditions.0.reason",
            "not a reason",
            id="condition-reason",
        ),
        pytest.param(
            Kustomization,
            KUSTOMIZATION_WITH_STATUS,
            "status.conditions.0.status",
            "Yes",
            id="condition-status",
        ),
    ],
)
def test_invalid_values_are_rejected_naming_the_field(
    model: type[Resource[Any, Any]], manifest: str, path: str, value: object
) -> None:
    obj = set_path(yaml.safe_load(manifest), path, value)
    with pytest.raises(ValidationError) as caught:
        model.from_obj(obj)
    locations = [".".join(str(part) for part in error["loc"]) for error in caught.value.errors()]
    assert path in locations
    assert path in str(caught.value)


def test_condition_message_length_is_bounded() -> None:
    with pytest.raises(ValidationError, match="message"):
        Condition.model_validate({**CONDITION, "message": "x" * 32769})
    assert Condition.model_validate(CONDITION).message == ""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("0", timedelta(0), id="bare-zero"),
        pytest.param("0s", timedelta(0), id="zero-seconds"),
        pytest.param("30s", timedelta(seconds=30), id="seconds"),
        pytest.param("5m", timedelta(minutes=5), id="minutes"),
        pytest.param("1h30m", timedelta(hours=1, minutes=30), id="hours-minutes"),
        pytest.param("5m0s", timedelta(minutes=5), id="flux-style"),
        pytest.param("0.5s", timedelta(milliseconds=500), id="fraction"),
        pytest.param(".5s", timedelta(milliseconds=500), id="leading-dot"),
        pytest.param("1.5h", timedelta(minutes=90), id="fractional-hours"),
        pytest.param("300ms", timedelta(milliseconds=300), id="milliseconds"),
        pytest.param("2h45m30.5s", timedelta(hours=2, minutes=45, seconds=30.5), id="mixed"),
        pytest.param("1us", timedelta(microseconds=1), id="us"),
        pytest.param("1µs", timedelta(microseconds=1), id="micro-sign"),
        pytest.param("1μs", timedelta(microseconds=1), id="greek-mu"),
        pytest.param("1500ns", timedelta(microseconds=1.5), id="nanoseconds"),
        pytest.param("-1m30s", -timedelta(minutes=1, seconds=30), id="negative"),
        pytest.param("+5s", timedelta(seconds=5), id="plus-sign"),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("1", id="no-unit"),
        pytest.param("1d", id="days"),
        pytest.param("h", id="no-number"),
        pytest.param("1h30", id="trailing-number"),
        pytest.param("1.5.5s", id="two-dots"),
        pytest.param(" 1s", id="leading-space"),
        pytest.param("-", id="sign-only"),
        pytest.param("1 m", id="inner-space"),
        pytest.param("9" * 400 + "h", id="overflows-a-float"),
        pytest.param("99999999999999999999h", id="overflows-timedelta"),
        pytest.param("2562048h", id="over-go-int64-nanoseconds"),
    ],
)
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=f"invalid duration {text!r}"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(timedelta(0), "0s", id="zero"),
        pytest.param(timedelta(hours=1, minutes=30), "1h30m0s", id="hours"),
        pytest.param(timedelta(minutes=1, seconds=1), "1m1s", id="minutes"),
        pytest.param(timedelta(seconds=1.5), "1.5s", id="fractional-seconds"),
        pytest.param(timedelta(milliseconds=500), "500ms", id="milliseconds"),
        pytest.param(timedelta(microseconds=1500), "1.5ms", id="fractional-milliseconds"),
        pytest.param(timedelta(microseconds=2), "2µs", id="microseconds"),
        pytest.param(-timedelta(minutes=1), "-1m0s", id="negative"),
        pytest.param(timedelta(days=2), "48h0m0s", id="days-as-hours"),
    ],
)
def test_format_duration(value: timedelta, expected: str) -> None:
    assert format_duration(value) == expected
    assert parse_duration(expected) == value


@pytest.mark.parametrize(
    ("metadata", "namespace", "key"),
    [
        pytest.param({"name": "a", "namespace": "team"}, "team", "team/a", id="namespaced"),
        pytest.param({"name": "a"}, "default", "/a", id="no-namespace-is-default"),
    ],
)
def test_resource_namespace(metadata: dict[str, str], namespace: str, key: str) -> None:
    obj = GitRepository.from_obj(
        {"metadata": metadata, "spec": {"url": "https://example.com/r.git", "interval": "1m"}}
    )
    assert (obj.namespace, obj.key) == (namespace, key)
