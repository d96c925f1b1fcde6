"""The generated CRDs: up to date, structural, and shaped like Flux's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sluice_api import ALL_KINDS
from sluice_api.crds import (
    CHART_CRDS,
    HEADER,
    check,
    crd_for,
    file_name,
    main,
    render_all,
    render_chart,
    write,
)
from sluice_api.gating import Gate
from sluice_api.kustomize import Kustomization
from sluice_api.notification import Alert, Provider, Receiver
from sluice_api.source import (
    Bucket,
    ExternalArtifact,
    GitRepository,
    HelmChart,
    HelmRepository,
    OCIRepository,
)

REPO_CRDS = Path(__file__).resolve().parents[3] / "crds"

KIND_PARAMS = [pytest.param(model, id=model.KIND) for model in ALL_KINDS]

# Keywords that are JSON Schema but not structural OpenAPI. CEL rules
# (x-kubernetes-validations, 1.25+) are generated; the installer strips them
# for older servers.
FORBIDDEN_KEYWORDS = {
    "$ref",
    "$defs",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "title",
    "const",
    "nullable",
}


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def storage_schema(model: Any) -> dict[str, Any]:
    schema: dict[str, Any] = crd_for(model)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_crds_directory_is_up_to_date() -> None:
    problems = check(out_dir=REPO_CRDS, files=render_all())
    assert problems == [], "crds/ is out of date; run `python -m sluice_api.crds`"


def test_chart_crds_directory_is_up_to_date() -> None:
    problems = check(out_dir=REPO_CRDS.parent / CHART_CRDS, files=render_chart())
    assert problems == [], "charts/sluice/crds/ is out of date; run `python -m sluice_api.crds`"


def test_the_chart_has_the_same_crds_without_the_kustomization() -> None:
    # Helm installs every file of a chart's crds/ as an object; a kustomize
    # Kustomization there would be refused.
    chart, top = render_chart(), render_all()
    assert "kustomization.yaml" not in chart
    assert chart == {name: text for name, text in top.items() if name != "kustomization.yaml"}


def test_main_writes_and_checks_both_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["--check"]) == 1
    assert main([]) == 0
    assert sorted(p.name for p in (tmp_path / CHART_CRDS).iterdir()) == sorted(render_chart())
    assert (tmp_path / "crds" / "kustomization.yaml").exists()
    assert main(["--check"]) == 0
    (tmp_path / CHART_CRDS / file_name(ALL_KINDS[0])).write_text("edited\n", encoding="utf-8")
    assert main(["--check"]) == 1


def test_rendering_is_deterministic() -> None:
    assert render_all() == render_all()


def test_kustomization_lists_every_crd() -> None:
    files = render_all()
    kustomization = yaml.safe_load(files["kustomization.yaml"])
    assert kustomization["resources"] == sorted(file_name(model) for model in ALL_KINDS)


@pytest.mark.parametrize("model", KIND_PARAMS)
def test_files_carry_the_generated_header_and_parse(model: Any) -> None:
    text = render_all()[file_name(model)]
    assert text.startswith(HEADER)
    assert yaml.safe_load(text) == crd_for(model, cel=False)


@pytest.mark.parametrize("model", KIND_PARAMS)
def test_schema_is_structural(model: Any) -> None:
    for path, node in walk(storage_schema(model)):
        assert (
            "type" in node
            or node.get("x-kubernetes-preserve-unknown-fields")
            or node.get("x-kubernetes-int-or-string")
        ), f"{path or '<root>'} has no type"
        assert not FORBIDDEN_KEYWORDS & node.keys(), f"{path}: {FORBIDDEN_KEYWORDS & node.keys()}"
        assert node.get("default", "unset") is not None, f"{path} has default: null"
        if "additionalProperties" in node:
            assert node["type"] == "object", path
            assert isinstance(node["additionalProperties"], dict), path


@pytest.mark.parametrize("model", KIND_PARAMS)
def test_every_field_is_documented(model: Any) -> None:
    # List items and map values are described by their field; metadata by Kubernetes.
    undocumented = [
        path
        for path, node in walk(storage_schema(model))
        if path != ".metadata" and not path.endswith(("[]", "{}")) and "description" not in node
    ]
    assert undocumented == []


@pytest.mark.parametrize("model", KIND_PARAMS)
def test_top_level_shape(model: Any) -> None:
    schema = storage_schema(model)
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert "required" not in schema
    assert schema["properties"]["status"]["default"] == {"observedGeneration": -1}


@pytest.mark.parametrize("model", KIND_PARAMS)
def test_names_scope_and_versions(model: Any) -> None:
    crd = crd_for(model)
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{model.PLURAL}.{model.GROUP}"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == model.KIND
    assert spec["names"]["listKind"] == f"{model.KIND}List"
    versions = spec["versions"]
    assert [v["name"] for v in versions] == [model.VERSION, *model.EXTRA_VERSIONS]
    assert [v["storage"] for v in versions] == [True] + [False] * len(model.EXTRA_VERSIONS)
    assert all(v["served"] for v in versions)
    assert all(v["subresources"] == {"status": {}} for v in versions)
    assert all(v["schema"] == versions[0]["schema"] for v in versions)


@pytest.mark.parametrize(
    ("model", "group", "version", "extra_versions"),
    [
        pytest.param(
            GitRepository, "source.toolkit.fluxcd.io", "v1", ("v1beta2", "v1beta1"), id="git"
        ),
        pytest.param(OCIRepository, "source.toolkit.fluxcd.io", "v1", ("v1beta2",), id="oci"),
        pytest.param(
            HelmRepository, "source.toolkit.fluxcd.io", "v1", ("v1beta2", "v1beta1"), id="helmrepo"
        ),
        pytest.param(
            HelmChart, "source.toolkit.fluxcd.io", "v1", ("v1beta2", "v1beta1"), id="helmchart"
        ),
        pytest.param(Bucket, "source.toolkit.fluxcd.io", "v1", ("v1beta2", "v1beta1"), id="bucket"),
        pytest.param(ExternalArtifact, "source.toolkit.fluxcd.io", "v1", (), id="external"),
        pytest.param(
            Kustomization, "kustomize.toolkit.fluxcd.io", "v1", ("v1beta2", "v1beta1"), id="ks"
        ),
        pytest.param(Gate, "gating.toolkit.fluxcd.io", "v1alpha1", (), id="gate"),
        pytest.param(
            Receiver, "notification.toolkit.fluxcd.io", "v1", ("v1beta2", "v1beta1"), id="receiver"
        ),
        pytest.param(
            Alert, "notification.toolkit.fluxcd.io", "v1beta3", ("v1beta2", "v1beta1"), id="alert"
        ),
        pytest.param(
            Provider,
            "notification.toolkit.fluxcd.io",
            "v1beta3",
            ("v1beta2", "v1beta1"),
            id="provider",
        ),
    ],
)
def test_groups_and_versions_match_the_api_contract(
    model: Any, group: str, version: str, extra_versions: tuple[str, ...]
) -> None:
    assert (group, version, extra_versions) == (model.GROUP, model.VERSION, model.EXTRA_VERSIONS)


READY = '.status.conditions[?(@.type=="Ready")].status'
MESSAGE = '.status.conditions[?(@.type=="Ready")].message'
AGE = ".metadata.creationTimestamp"
REVISION = ("Revision", ".status.artifact.revision")


@pytest.mark.parametrize(
    ("model", "columns"),
    [
        pytest.param(
            GitRepository,
            [("URL", ".spec.url"), ("Age", AGE), ("Ready", READY), ("Status", MESSAGE), REVISION],
            id="git",
        ),
        pytest.param(
            OCIRepository,
            [("URL", ".spec.url"), ("Ready", READY), ("Status", MESSAGE), ("Age", AGE), REVISION],
            id="oci",
        ),
        pytest.param(
            HelmRepository,
            [("URL", ".spec.url"), ("Age", AGE), ("Ready", READY), ("Status", MESSAGE), REVISION],
            id="helmrepo",
        ),
        pytest.param(
            HelmChart,
            [
                ("Chart", ".spec.chart"),
                ("Version", ".spec.version"),
                ("Source Kind", ".spec.sourceRef.kind"),
                ("Source Name", ".spec.sourceRef.name"),
                ("Age", AGE),
                ("Ready", READY),
                ("Status", MESSAGE),
                REVISION,
            ],
            id="helmchart",
        ),
        pytest.param(
            Bucket,
            [
                ("Endpoint", ".spec.endpoint"),
                ("Age", AGE),
                ("Ready", READY),
                ("Status", MESSAGE),
                REVISION,
            ],
            id="bucket",
        ),
        pytest.param(
            Kustomization,
            [
                ("Age", AGE),
                ("Ready", READY),
                ("Status", MESSAGE),
                ("Revision", ".status.lastAppliedRevision"),
            ],
            id="ks",
        ),
        pytest.param(
            Gate,
            [
                ("Opened", '.status.conditions[?(@.type=="Opened")].status'),
                ("Until", ".status.resetToDefaultAt"),
                ("Status", '.status.conditions[?(@.type=="Opened")].message'),
                ("Age", AGE),
            ],
            id="gate",
        ),
        pytest.param(
            Receiver, [("Age", AGE), ("Ready", READY), ("Status", MESSAGE)], id="receiver"
        ),
        pytest.param(Alert, [("Age", AGE)], id="alert"),
        pytest.param(Provider, [("Age", AGE)], id="provider"),
    ],
)
def test_printer_columns(model: Any, columns: list[tuple[str, str]]) -> None:
    for version in crd_for(model)["spec"]["versions"]:
        printed = [(c["name"], c["jsonPath"]) for c in version["additionalPrinterColumns"]]
        assert printed == columns


@pytest.mark.parametrize(
    ("model", "path", "default"),
    [
        pytest.param(GitRepository, ".spec.timeout", "60s", id="git-timeout"),
        pytest.param(GitRepository, ".spec.verify.mode", "HEAD", id="git-verify-mode"),
        pytest.param(OCIRepository, ".spec.timeout", "60s", id="oci-timeout"),
        pytest.param(OCIRepository, ".spec.provider", "generic", id="oci-provider"),
        pytest.param(Bucket, ".spec.timeout", "60s", id="bucket-timeout"),
        pytest.param(HelmChart, ".spec.version", "*", id="helmchart-version"),
        pytest.param(HelmChart, ".spec.reconcileStrategy", "ChartVersion", id="helmchart-strat"),
        pytest.param(Receiver, ".spec.interval", "10m", id="receiver-interval"),
        pytest.param(Alert, ".spec.eventSeverity", "info", id="alert-severity"),
        pytest.param(Gate, ".spec.default", "closed", id="gate-default"),
        pytest.param(Gate, ".spec.window", "1h", id="gate-window"),
        pytest.param(Gate, ".spec.schedule[].timeZone", "UTC", id="gate-schedule-tz"),
        pytest.param(GitRepository, ".spec.suspend", None, id="no-default-for-bools"),
        pytest.param(Kustomization, ".spec.dependsOn", None, id="no-default-for-lists"),
        pytest.param(Kustomization, ".status.observedGeneration", None, id="none-in-status"),
    ],
)
def test_defaults(model: Any, path: str, default: object) -> None:
    nodes = dict(walk(storage_schema(model)))
    assert nodes[path].get("default") == default


@pytest.mark.parametrize(
    ("model", "path", "keyword", "value"),
    [
        pytest.param(
            GitRepository, ".spec.url", "pattern", "^(http|https|ssh)://.*$", id="git-url"
        ),
        pytest.param(OCIRepository, ".spec.url", "pattern", "^oci://.*$", id="oci-url"),
        pytest.param(
            OCIRepository,
            ".spec.layerSelector.operation",
            "enum",
            ["extract", "copy"],
            id="oci-layer-operation",
        ),
        pytest.param(
            Kustomization,
            ".spec.sourceRef.kind",
            "enum",
            ["OCIRepository", "GitRepository", "Bucket", "ExternalArtifact"],
            id="ks-source-kinds",
        ),
        pytest.param(Kustomization, ".spec.targetNamespace", "maxLength", 63, id="ks-target-ns"),
        pytest.param(Kustomization, ".spec.decryption.provider", "enum", ["sops"], id="sops"),
        pytest.param(
            Kustomization, ".spec.interval", "pattern", r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$", id="iv"
        ),
        pytest.param(
            Kustomization,
            ".status.inventory.entries[]",
            "required",
            ["id", "v"],
            id="inventory-entry",
        ),
        pytest.param(
            Kustomization, ".spec.postBuild.substitute", "type", "object", id="substitute-map"
        ),
        pytest.param(
            Receiver,
            ".spec.resources[].action",
            "enum",
            ["open", "close"],
            id="receiver-gate-action",
        ),
        pytest.param(
            GitRepository,
            ".status.conditions[].message",
            "maxLength",
            32768,
            id="condition-message",
        ),
        pytest.param(GitRepository, ".status.observedGeneration", "format", "int64", id="int64"),
        pytest.param(
            OCIRepository,
            ".spec.verify.matchOIDCIdentity[]",
            "required",
            ["issuer", "subject"],
            id="explicit-alias",
        ),
    ],
)
def test_validation_keywords(model: Any, path: str, keyword: str, value: object) -> None:
    nodes = dict(walk(storage_schema(model)))
    assert nodes[path][keyword] == value


def test_required_spec_fields() -> None:
    spec = storage_schema(Kustomization)["properties"]["spec"]
    # Flux v1 requires prune, but one schema serves v1beta1 too, whose manifests
    # (the kustomize-controller design's own example) leave it out.
    assert spec["required"] == ["sourceRef", "interval"]
    assert spec["properties"]["prune"].get("default") is None
    receiver = storage_schema(Receiver)["properties"]["spec"]
    # generic-oidc (Flux 2.8) needs no secret; the controller requires it of the others.
    assert set(receiver["required"]) == {"type", "resources"}


def test_receiver_resource_kinds_include_gate() -> None:
    nodes = dict(walk(storage_schema(Receiver)))
    assert "Gate" in nodes[".spec.resources[].kind"]["enum"]


def test_write_then_check(tmp_path: Path) -> None:
    files = render_all()
    assert check(out_dir=tmp_path, files=files) == [f"{tmp_path / name}: missing" for name in files]
    write(out_dir=tmp_path, files=files)
    assert check(out_dir=tmp_path, files=files) == []


def test_check_reports_changed_and_extra_files(tmp_path: Path) -> None:
    files = render_all()
    write(out_dir=tmp_path, files=files)
    (tmp_path / "kustomization.yaml").write_text("edited\n", encoding="utf-8")
    (tmp_path / "hand-written.yaml").write_text("kind: ConfigMap\n", encoding="utf-8")
    assert check(out_dir=tmp_path, files=files) == [
        f"{tmp_path / 'kustomization.yaml'}: out of date",
        f"{tmp_path / 'hand-written.yaml'}: not generated by python -m sluice_api.crds",
    ]


def test_write_removes_only_stale_generated_files(tmp_path: Path) -> None:
    stale = tmp_path / "source.toolkit.fluxcd.io_olds.yaml"
    stale.write_text(HEADER + "---\n{}\n", encoding="utf-8")
    hand_written = tmp_path / "hand-written.yaml"
    hand_written.write_text("kind: ConfigMap\n", encoding="utf-8")
    write(out_dir=tmp_path, files=render_all())
    assert not stale.exists()
    assert hand_written.exists()


def test_main_check_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check", "--out", str(tmp_path)]) == 1
    assert "missing" in capsys.readouterr().err
    assert main(["--out", str(tmp_path)]) == 0
    assert main(["--check", "--out", str(tmp_path)]) == 0


@pytest.mark.parametrize(
    ("model", "path", "rules"),
    [
        pytest.param(
            Kustomization,
            ".spec.kubeConfig",
            [
                "has(self.configMapRef) || has(self.secretRef)",
                "!has(self.configMapRef) || !has(self.secretRef)",
            ],
            id="ks-kubeconfig-one-of",
        ),
        pytest.param(
            Receiver,
            ".spec",
            ["self.type == 'generic-oidc' || has(self.secretRef)"],
            id="receiver-secret-ref",
        ),
    ],
)
def test_cel_rules_are_generated_for_servers_that_evaluate_them(
    model: Any, path: str, rules: list[str]
) -> None:
    for version in crd_for(model)["spec"]["versions"]:
        nodes = dict(walk(version["schema"]["openAPIV3Schema"]))
        assert [r["rule"] for r in nodes[path]["x-kubernetes-validations"]] == rules
        assert all(r["message"] for r in nodes[path]["x-kubernetes-validations"])


def test_the_crds_directory_carries_no_cel_rules() -> None:
    """`kubectl apply -k charts/sluice` must work on servers before 1.25 too."""
    for name, text in render_all().items():
        assert "x-kubernetes-validations" not in text, name


@pytest.mark.parametrize(
    ("model", "category"),
    [
        pytest.param(GitRepository, "fluxcd-sources", id="git"),
        pytest.param(ExternalArtifact, "fluxcd-sources", id="external-artifact"),
        pytest.param(Kustomization, "fluxcd-appliers", id="ks"),
        pytest.param(Receiver, "fluxcd-notifications", id="receiver"),
        pytest.param(Alert, "fluxcd-notifications", id="alert"),
        pytest.param(Provider, "fluxcd-notifications", id="provider"),
    ],
)
def test_categories_as_flux_has_them(model: Any, category: str) -> None:
    """`kubectl get fluxcd` lists every Flux object; `fluxcd-appliers` the appliers."""
    assert crd_for(model)["spec"]["names"]["categories"] == ["all", "fluxcd", category]
