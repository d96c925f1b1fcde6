"""Plain manifests built without kustomize: the same objects, in the same order, as kustomize.

Each tree is built twice: by kustomize (the real binary, over the
kustomization.yaml the controller generates) and by `build` (which reads
plain manifests itself). The objects must match field for field, key order
included; trees the Python path is not sure of must go to kustomize.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sluice_api.kustomize import KustomizationSpec
from sluice_runtime.building import BuildError, Kustomize, build, find_kustomize
from sluice_runtime.building.kustomizations import generate, resolve_path
from sluice_runtime.building.plain import build_plain


@pytest.fixture(scope="module")
def kustomize() -> Kustomize:
    return find_kustomize()


def spec(**fields: Any) -> KustomizationSpec:
    return KustomizationSpec.model_validate(
        {"sourceRef": {"kind": "GitRepository", "name": "s"}, "interval": "5m", **fields}
    )


def obj(kind: str, name: str, api: str = "v1", ns: str | None = None, body: str = "") -> str:
    namespace = f"\n  namespace: {ns}" if ns else ""
    return f"apiVersion: {api}\nkind: {kind}\nmetadata:\n  name: {name}{namespace}\n{body}"


CM = obj("ConfigMap", "cm", body="data:\n  a: b\n")
SCALARS = """
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: scalars
      labels: {app: x, "quoted": 'yes', zeta: "1.0"}
    data:
      hex: 0x1F
      octal: 0755
      binary: 0b101
      under: 1_000
      plus: +1
      negative: -42
      sexagesimal: 10:30
      tilde: ~
      nulls: [NULL, null, Null]
      empty: ''
      quantity: 1Gi
      millis: 100m
      port: 8080/TCP
      bools: [true, False, TRUE]
      unicode: "h\u00e9llo ünïcode"
      literal: |
        line one
        --- not a separator
      folded: >-
        folded
        text
      comment: value # trailing comment
      bang: "hello !world and * stars & co"
      quoted: ["yes", "1e3", "2024-01-01", '1.5']
      B: upper case sorts first
    """
DEPLOYMENT = """
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: web
      namespace: other
    spec:
      replicas: 1
      selector: {matchLabels: {app: web}}
      template:
        metadata: {labels: {app: web}}
        spec:
          containers: [{name: web, image: "nginx:1.27", args: ["--a=*"]}]
    """
ORDER = "---\n".join(
    [
        obj("ValidatingWebhookConfiguration", "vw", "admissionregistration.k8s.io/v1"),
        obj("Widget", "w", "example.com/v1", ns="zz"),
        obj("Service", "svc", body="spec:\n  ports: [{port: 80}]\n"),
        obj("Deployment", "d", "apps/v1", body="spec: {}\n"),
        obj("Namespace", "ns"),
        obj("ConfigMap", "b"),
        obj("ConfigMap", "a", ns="x"),
        obj("ConfigMap", "a"),
        obj("ConfigMap", "c", ns="default"),
        obj("ClusterRole", "cr", "rbac.authorization.k8s.io/v1"),
        obj("Widget", "w", "example.com/v1beta1", ns="aa"),
        obj("Gadget", "g", "other.io/v2"),
        obj("Secret", "s", body="stringData: {k: v}\n"),
        obj("CustomResourceDefinition", "widgets.example.com", "apiextensions.k8s.io/v1"),
    ]
)

GENERATED = """
apiVersion: apps/v1
kind: Deployment
metadata:
  creationTimestamp: null
  labels:
    app: web
  name: web
  namespace: ""
spec:
  replicas: 1
  selector:
    matchLabels:
      app: web
  strategy: {}
  template:
    metadata:
      creationTimestamp: null
      labels:
        app: web
    spec:
      containers:
      - image: nginx
        name: nginx
        resources: {}
        env:
        - name: FLAG
          value: "true"
        - name: EMPTY
          value: ""
        ports:
        - containerPort: 80
          protocol: TCP
status: {}
---
apiVersion: v1
kind: Service
metadata:
  name: web
  annotations:
    json: '{"a": [1, 2], "b": null}'
    multi: |
      line1
      line2
spec:
  ports:
  - port: 80
    targetPort: http
  selector: {app: web}
  type: ClusterIP
"""

FLUX = """
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: apps
  namespace: flux-system
spec:
  interval: 10m0s
  path: ./apps
  prune: true
  sourceRef:
    kind: GitRepository
    name: flux-system
  postBuild:
    substitute:
      cluster: prod
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata:
  name: flux-system
  namespace: flux-system
spec:
  interval: 1m0s
  ref:
    branch: main
  url: ssh://git@github.com/org/repo
"""

PLAIN_TREES = [
    pytest.param({"flux.yaml": FLUX}, {}, id="flux-kustomization-kind"),
    pytest.param({"app.yaml": GENERATED}, {}, id="kubectl-generated-nulls-and-empty-namespace"),
    pytest.param({"cm.yaml": CM}, {}, id="one-object"),
    pytest.param(
        {"a.yaml": f"---\n# only a comment\n---\n{CM}---\n---\n" + obj("Secret", "s") + "...\n"},
        {},
        id="empty-and-comment-documents",
    ),
    pytest.param({"all.yaml": ORDER}, {}, id="legacy-order-kinds-groups-namespaces"),
    pytest.param({"scalars.yaml": SCALARS}, {}, id="scalars-as-kubernetes-reads-them"),
    pytest.param(
        {
            "z.yml": obj("ConfigMap", "z"),
            "a/b/c.yaml": DEPLOYMENT,
            ".hidden/h.yaml": obj("ConfigMap", "hidden"),
            "README.md": "# not yaml: x",
            "data.json": '{"apiVersion": "v1", "kind": "ConfigMap"}',
            "values.yaml": "replicas: 3\nimage: {tag: x}\n",
            "ci/.gitlab-ci.yaml": "stages: [build]\n.base: &base {on: yes}\njob: *base\n",
            "chart/values.yaml": "enabled: yes\nratio: 1.5\nx: 1\nx: 2\n",
            "empty.yaml": "",
            "nulls.yaml": "---\n~\n",
        },
        {},
        id="nested-hidden-non-yaml-and-non-manifest-files",
    ),
    pytest.param(
        {"cm.yaml": CM, "d.yaml": DEPLOYMENT, "s.yaml": obj("Secret", "s", ns="elsewhere")},
        {"targetNamespace": "target"},
        id="target-namespace",
    ),
    pytest.param(
        {"cm.yaml": CM},
        {
            "commonMetadata": {"labels": {"team": "a"}},
            "postBuild": {"substitute": {"A": "b"}},
            "prune": True,
            "wait": True,
        },
        id="spec-fields-kustomize-never-sees",
    ),
    pytest.param(
        {"n.yaml": obj("ConfigMap", "n", body="data:\n  a: null\nbinaryData: {}\n")},
        {},
        id="null-and-empty-values",
    ),
]

KUSTOMIZE_TREES = [
    pytest.param({"l.yaml": "apiVersion: v1\nkind: List\nitems:\n- " + CM.replace("\n", "\n  ")}, {}, id="list-kind"),
    pytest.param({"a.yaml": CM + "  ref: &x 1\n  again: *x\n"}, {}, id="anchor-and-alias"),
    pytest.param({"a.yaml": CM.replace("a: b", "a: !!str 1")}, {}, id="explicit-tag"),
    pytest.param({"a.yaml": CM + "  a: c\n"}, {}, id="duplicate-key"),
    pytest.param({"a.yaml": CM, "b.yaml": CM}, {}, id="duplicate-id"),
    pytest.param({"a.yaml": CM, "sub/kustomization.yaml": "resources: [c.yaml]\n", "sub/c.yaml": obj("ConfigMap", "c")}, {}, id="nested-kustomization"),
    pytest.param({"a.yaml": CM}, {"namePrefix": "p-"}, id="name-prefix"),
    pytest.param({"a.yaml": CM}, {"images": [{"name": "nginx", "newTag": "1"}]}, id="images"),
    pytest.param({"a.yaml": obj("RoleBinding", "rb", "rbac.authorization.k8s.io/v1", body="roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: r}\nsubjects: [{kind: ServiceAccount, name: sa, namespace: default}]\n")}, {"targetNamespace": "t"}, id="target-namespace-rolebinding"),
    pytest.param({"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n"}, {}, id="no-name"),
    pytest.param({"a.yaml": CM + "data: [\n"}, {}, id="syntax-error"),
    pytest.param({"a.yaml": CM.replace("\n", "\r\n")}, {}, id="crlf"),
    *(
        pytest.param({"a.yaml": CM.replace("a: b", line)}, {}, id=f"scalar-{label}")
        for label, line in [
            ("yes", "a: yes"), ("on-key", "on: b"), ("true-key", "true: b"), ("int-key", "1: b"),
            ("null-key", "~: b"),
            ("exponent", "a: 1e3"), ("float", "a: 1.50"), ("whole-float", "a: 1."),
            ("date", "a: 2024-01-01"), ("big-int", "a: 123456789012345678901234567890"),
            ("octal-o", "a: 0o17"), ("leading-zero", "a: 08"), ("plus-inf", "a: +inf"),
            ("dot-inf", "a: .inf"), ("hex-float", "a: 0x1p-2"),
        ]
    ),
    pytest.param({"a.yaml": CM.replace("metadata:\n", "metadata:\n  annotations: {}\n")}, {}, id="empty-annotations"),
    pytest.param({"a.yaml": CM.replace("metadata:\n", "metadata:\n  annotations: {config.kubernetes.io/index: '3'}\n")}, {}, id="kustomize-annotation"),
]  # fmt: skip


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip() if text.startswith("\n") else text)


async def both(tmp_path: Path, files: dict[str, str], fields: dict[str, Any], kustomize: Kustomize):  # type: ignore[no-untyped-def]
    """(kustomize's objects or error, build's objects or error, what build_plain gave)."""
    results: list[object] = []
    for which in ("kustomize", "build"):
        root = tmp_path / which
        write(root, files)
        if which == "kustomize":
            # The controller's generated kustomization: kustomize builds it as before.
            generate(root.resolve(), resolve_path(root.resolve(), None))
        try:
            results.append(await build(root, spec(**fields), kustomize=kustomize))
        except BuildError as error:
            results.append(f"BuildError: {error}")
    fresh = tmp_path / "plain"
    write(fresh, files)
    real = fresh.resolve()
    plain = build_plain(real, resolve_path(real, None), spec(**fields), max_output=1 << 26)
    return results[0], results[1], plain


def exact(value: object) -> str:
    """Order-sensitive: two object lists are the same only with keys in the same order."""
    return json.dumps(value, default=str)


@pytest.mark.parametrize(("files", "fields"), PLAIN_TREES)
async def test_plain_trees_build_like_kustomize(
    tmp_path: Path, files: dict[str, str], fields: dict[str, Any], kustomize: Kustomize
) -> None:
    by_kustomize, by_build, plain = await both(tmp_path, files, fields, kustomize)
    assert plain is not None, "expected the Python path"
    assert isinstance(by_kustomize, list) and by_kustomize
    assert exact(by_build) == exact(by_kustomize)
    if not fields.get("commonMetadata"):
        assert exact(plain) == exact(by_kustomize)


@pytest.mark.parametrize(("files", "fields"), KUSTOMIZE_TREES)
async def test_unusual_trees_go_to_kustomize(
    tmp_path: Path, files: dict[str, str], fields: dict[str, Any], kustomize: Kustomize
) -> None:
    by_kustomize, by_build, plain = await both(tmp_path, files, fields, kustomize)
    assert plain is None
    assert exact(by_build) == exact(by_kustomize)


async def test_generated_tree_builds_like_kustomize(tmp_path: Path, kustomize: Kustomize) -> None:
    rng = random.Random(19)
    kinds = [("v1", "ConfigMap"), ("v1", "Secret"), ("apps/v1", "Deployment"), ("v1", "Service")]
    kinds += [("example.com/v1", "Widget"), ("rbac.authorization.k8s.io/v1", "ClusterRole")]
    documents = []
    for i in range(400):
        api, kind = rng.choice(kinds)
        ns = rng.choice([None, "default", "a", "b"]) if kind != "ClusterRole" else None
        documents.append(obj(kind, f"o-{rng.randrange(10**6):06d}-{i}", api, ns, "data: {k: v}\n"))
    files = {f"d{i % 3}/f{i:02d}.yaml": "---\n".join(documents[i::20]) for i in range(20)}
    by_kustomize, by_build, plain = await both(tmp_path, files, {}, kustomize)
    assert plain is not None
    assert exact(plain) == exact(by_kustomize) == exact(by_build)


async def test_a_manifest_outside_the_artifact_is_refused(
    tmp_path: Path, kustomize: Kustomize
) -> None:
    outside = tmp_path / "outside.yaml"
    outside.write_text(CM)
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(outside, root / "escape.yaml")
    shutil.copy(outside, root / "inside.yaml")
    with pytest.raises(BuildError, match=r"'escape\.yaml' points outside the artifact"):
        await build(root, spec(), kustomize=kustomize)


async def test_plain_manifests_need_no_kustomize_process(tmp_path: Path) -> None:
    missing = Kustomize("/nonexistent/kustomize", "v5.5.0", embedded=False)
    write(tmp_path / "plain", {"cm.yaml": CM, "d.yaml": DEPLOYMENT})
    objects = await build(tmp_path / "plain", spec(targetNamespace="t"), kustomize=missing)
    assert [(o["kind"], o["metadata"]["namespace"]) for o in objects] == [
        ("ConfigMap", "t"),
        ("Deployment", "t"),
    ]
    write(tmp_path / "prefixed", {"cm.yaml": CM})
    with pytest.raises((BuildError, OSError)):
        await build(tmp_path / "prefixed", spec(namePrefix="p-"), kustomize=missing)
