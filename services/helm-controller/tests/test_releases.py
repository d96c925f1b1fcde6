"""Pure release logic: naming, Helm's storage format, values, and when to act."""

from __future__ import annotations

import base64
import gzip
import json
import tarfile
import zlib
from pathlib import Path
from typing import Any

import pytest

from helm_controller import releases
from helm_controller.charting import desired_chart
from helm_controller.validating import HELM3, invalid_fields, unsupported_fields
from sluice_api.helm import HelmRelease, Snapshot
from sluice_runtime.helming import values as helm_values
from sluice_runtime.helming.storage import MAX_RELEASE_SIZE, StorageError, release_name


@pytest.mark.parametrize(
    ("name", "target", "release", "expected"),
    [
        pytest.param("web", None, None, "web", id="name"),
        pytest.param("web", "prod", None, "prod-web", id="target-namespace-prefix"),
        pytest.param("web", "prod", "custom", "custom", id="release-name-wins"),
        pytest.param("a" * 53, None, None, "a" * 53, id="53-kept"),
        pytest.param(
            "b" * 30, "n" * 30, None,
            "n" * 30 + "-" + "b" * 9 + "-" + releases.hashlib.sha256(("n" * 30 + "-" + "b" * 30).encode()).hexdigest()[:12],
            id="long-shortened",
        ),
    ],
)  # fmt: skip
def test_release_names_follow_flux(
    name: str, target: str | None, release: str | None, expected: str
) -> None:
    got = release_name(name, target, release)
    assert got == expected
    assert len(got) <= 53


def encoded(release: dict[str, Any]) -> str:
    inner = base64.b64encode(gzip.compress(json.dumps(release).encode())).decode()
    return base64.b64encode(inner.encode()).decode()


RELEASE = {
    "name": "web",
    "namespace": "apps",
    "version": 2,
    "info": {
        "status": "deployed",
        "first_deployed": "2026-01-02T03:04:05.123456789+01:00",
        "last_deployed": "2026-01-03T03:04:05.1Z",
        "deleted": "",
        "description": "Upgrade complete",
    },
    "chart": {"metadata": {"name": "app", "version": "1.1.0", "appVersion": "6.0"}},
    "config": {"b": 1, "a": {"x": 2}},
    "hooks": [
        {
            "name": "web-test",
            "events": ["test"],
            "last_run": {
                "started_at": "2026-01-03T03:05:00Z",
                "completed_at": "2026-01-03T03:05:09Z",
                "phase": "Succeeded",
            },
        },
        {"name": "web-pre", "events": ["pre-upgrade"]},
    ],
}


def test_helm_storage_secrets_become_history_snapshots_newest_first() -> None:
    older = {**RELEASE, "version": 1, "info": {**RELEASE["info"], "status": "superseded"}}  # type: ignore[dict-item]
    found = releases.history(
        [
            {"data": {"release": encoded(older)}},
            {"data": {"release": encoded(RELEASE)}},
            {"data": {}},
        ],
        keep=5,
    )
    assert [snap.version for _, snap in found] == [2, 1]
    snap = found[0][1]
    assert (snap.name, snap.namespace, snap.status) == ("web", "apps", "deployed")
    assert (snap.chart_name, snap.chart_version, snap.app_version) == ("app", "1.1.0", "6.0")
    assert snap.first_deployed == "2026-01-02T03:04:05Z"
    assert snap.deleted is None
    assert snap.config_digest == helm_values.config_digest({"a": {"x": 2}, "b": 1})
    assert snap.test_hooks is not None and list(snap.test_hooks) == ["web-test"]
    assert snap.test_hooks["web-test"].phase == "Succeeded"


def stored(release: dict[str, Any], *, label: str | None = None) -> dict[str, Any]:
    """A Helm storage Secret as the API lists it."""
    version = str(release.get("version"))
    return {
        "metadata": {
            "name": f"sh.helm.release.v1.web.v{version}",
            "labels": {"owner": "helm", "name": "web", "version": label or version},
        },
        "data": {"release": encoded(release)},
    }


def bomb(size: int) -> str:
    """A release Secret's `data.release` whose gzip inflates to `size` bytes of JSON."""
    # Compressed a MiB at a time: the test itself must not hold what the bomb holds.
    packer = zlib.compressobj(9, wbits=16 + zlib.MAX_WBITS)
    parts = [packer.compress(b'{"name": "web", "pad": "')]
    block = b"0" * (1 << 20)
    for _ in range(size >> 20):
        parts.append(packer.compress(block))
    parts.append(packer.compress(b'"}') + packer.flush())
    inner = base64.b64encode(b"".join(parts)).decode()
    return base64.b64encode(inner.encode()).decode()


class CountingInflater:
    """zlib's inflater, counting the bytes it hands out (the budget the cap holds)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.out = 0

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        chunk: bytes = self.inner.decompress(data, max_length)
        self.out += len(chunk)
        return chunk

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_gzip_bomb_in_helm_storage_is_refused_within_the_byte_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 256 MiB of JSON from a few hundred kB of Secret: the shape of issue 32's 725 kB one.
    encoded_bomb = bomb(256 << 20)
    assert len(encoded_bomb) < 2 << 20
    made: list[CountingInflater] = []
    real = zlib.decompressobj

    def counting(*args: Any, **kwargs: Any) -> CountingInflater:
        made.append(CountingInflater(real(*args, **kwargs)))
        return made[-1]

    monkeypatch.setattr(zlib, "decompressobj", counting)
    secret = {"metadata": {"name": "sh.helm.release.v1.web.v1"}, "data": {"release": encoded_bomb}}
    with pytest.raises(StorageError) as refused:
        releases.history([secret], keep=5)
    assert str(refused.value) == (
        "release Secret 'sh.helm.release.v1.web.v1' inflates to more than 16 MiB"
    )
    [inflater] = made
    # Never more than the cap and one chunk inflated, not the 256 MiB.
    assert MAX_RELEASE_SIZE < inflater.out <= MAX_RELEASE_SIZE + (64 << 10)


def test_only_the_versions_status_keeps_are_decoded() -> None:
    versions = [{**RELEASE, "version": v} for v in range(1, 9)]
    secrets = [stored(r) for r in versions]
    # Older versions are bombs: never inflated, so never refused.
    for old in secrets[:5]:
        old["data"]["release"] = bomb(32 << 20)
    found = releases.history(secrets, keep=3)
    assert [snap.version for _, snap in found] == [8, 7, 6]
    # What is kept of each release: its info and manifest, not its chart.
    assert set(found[0][0]) == {"info", "manifest"}


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        pytest.param({"name": "w" * 2000}, "has a name of 2000 characters", id="long-name"),
        pytest.param(
            {"chart": {"metadata": {"name": "app", "version": "1" * 5000}}},
            "has a chartVersion of 5000 characters",
            id="long-chart-version",
        ),
        pytest.param({"version": 1 << 70}, "has revision", id="revision-past-int64"),
        pytest.param({"version": -1}, "has revision -1", id="negative-revision"),
        pytest.param(
            {"info": {"status": "deployed", "first_deployed": "yesterday"}},
            "has a firstDeployed that is not an RFC 3339 time: 'yesterday'",
            id="not-a-time",
        ),
        pytest.param(
            {"hooks": [{"name": f"t{i}", "events": ["test"]} for i in range(300)]},
            "has more than 256 test hooks",
            id="too-many-test-hooks",
        ),
        pytest.param({"info": ["deployed"]}, "list where a map belongs", id="info-not-a-map"),
        pytest.param({"config": [1]}, "its config is not a map", id="config-not-a-map"),
    ],
)
def test_a_snapshot_the_status_cannot_hold_is_refused_naming_the_field(
    change: dict[str, Any], refusal: str
) -> None:
    with pytest.raises(StorageError) as refused:
        releases.history([stored({**RELEASE, **change}, label="2")], keep=5)
    assert refusal in str(refused.value)
    assert str(refused.value).startswith("release Secret 'sh.helm.release.v1.web.v")


@pytest.mark.parametrize(
    ("data", "refusal"),
    [
        pytest.param("%%%", "is not base64", id="not-base64"),
        pytest.param(
            base64.b64encode(base64.b64encode(b"\x1f\x8b\x08garbage")).decode(),
            "is not valid gzip",
            id="bad-gzip",
        ),
        pytest.param(
            base64.b64encode(base64.b64encode(gzip.compress(b"{}" * 100)[:20])).decode(),
            "is truncated gzip",
            id="truncated",
        ),
        pytest.param(
            base64.b64encode(base64.b64encode(b"[1, 2]")).decode(),
            "not a JSON object",
            id="not-an-object",
        ),
    ],
)
def test_a_release_secret_that_is_not_a_release_is_refused(data: str, refusal: str) -> None:
    secret = {"metadata": {"name": "sh.helm.release.v1.web.v1"}, "data": {"release": data}}
    with pytest.raises(StorageError) as refused:
        releases.history([secret], keep=5)
    assert refusal in str(refused.value)


def snap(version: int, status: str, chart: str = "1.0.0", config: str = "sha256:a") -> Snapshot:
    return Snapshot(
        digest="sha256:x", name="web", namespace="apps", version=version, status=status,
        chart_name="app", chart_version=chart, config_digest=config,
        first_deployed="", last_deployed="",
    )  # fmt: skip


DESIRED = releases.Desired(chart_name="app", chart_version="1.0.0", config_digest="sha256:a")


@pytest.mark.parametrize(
    ("latest", "generation_changed", "forced", "expected"),
    [
        pytest.param(None, False, False, "install", id="no-release"),
        pytest.param(
            snap(1, "uninstalled"), False, False, "install", id="uninstalled-kept-history"
        ),
        pytest.param(snap(1, "deployed"), False, False, None, id="steady-state-no-upgrade"),
        pytest.param(snap(1, "deployed", chart="0.9.0"), False, False, "upgrade", id="new-chart"),
        pytest.param(
            snap(1, "deployed", config="sha256:b"), False, False, "upgrade", id="new-values"
        ),
        pytest.param(snap(1, "deployed"), True, False, "upgrade", id="new-generation"),
        pytest.param(snap(1, "deployed"), False, True, "upgrade", id="forceAt"),
        pytest.param(snap(2, "failed"), False, False, "upgrade", id="failed-latest"),
        pytest.param(snap(2, "pending-upgrade"), False, False, "upgrade", id="pending"),
    ],
)
def test_the_next_action(
    latest: Snapshot | None, generation_changed: bool, forced: bool, expected: str | None
) -> None:
    got = releases.next_action(
        latest, DESIRED, generation_changed=generation_changed, forced=forced
    )
    assert got == expected


@pytest.mark.parametrize(
    ("status", "reinstall", "expected"),
    [
        pytest.param("deployed", True, "reinstall", id="renamed-reinstall-default"),
        pytest.param("failed", True, "reinstall", id="renamed-failed-reinstall"),
        pytest.param("deployed", False, "upgrade", id="renamed-in-place-update"),
        pytest.param("uninstalled", True, "install", id="renamed-but-uninstalled"),
    ],
)
def test_a_new_chart_name_reinstalls_unless_in_place(
    status: str, reinstall: bool, expected: str
) -> None:
    latest = snap(1, status)
    renamed = releases.Desired(chart_name="other", chart_version="1.0.0", config_digest="sha256:a")
    got = releases.next_action(
        latest, renamed, generation_changed=False, forced=False, reinstall_on_rename=reinstall
    )
    assert got == expected


def test_rollback_target_skips_failed_upgrades_that_were_superseded() -> None:
    failed = ({"info": {"description": 'Upgrade "web" failed: boom'}}, snap(2, "superseded"))
    good = ({"info": {"description": "Install complete"}}, snap(1, "superseded"))
    assert releases.last_successful([failed, good]) == good[1]
    assert releases.last_successful([failed]) is None


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        pytest.param("a", "x", {"a": "x", "keep": 1}, id="top"),
        pytest.param("a.b.c", "x", {"a": {"b": {"c": "x"}}, "keep": 1}, id="nested"),
        pytest.param("keep", "x", {"keep": "x"}, id="replace"),
        pytest.param("l[1]", "x", {"l": [None, "x"], "keep": 1}, id="list-index"),
        pytest.param("a\\.b", "x", {"a.b": "x", "keep": 1}, id="escaped-dot"),
    ],
)
def test_target_path_sets_like_helm_set(path: str, value: str, expected: dict[str, Any]) -> None:
    values: dict[str, Any] = {"keep": 1}
    helm_values.set_path(values, path, value)
    assert values == expected


def test_a_bad_target_path_is_refused() -> None:
    with pytest.raises(helm_values.ValuesError, match="invalid targetPath"):
        helm_values.set_path({}, "a..b", "x")


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("a[100000000]", id="list-index"),
        pytest.param("a[0][65537].b", id="nested-index"),
    ],
)
def test_a_target_path_index_past_helms_maximum_is_refused(path: str) -> None:
    # Found by the fuzz (test_fuzz_helming.py): the list was filled with nulls up to
    # the index, 800 MB for a[100000000]. Helm's strvals refuses past 65536.
    values: dict[str, Any] = {}
    with pytest.raises(helm_values.ValuesError, match="greater than maximum supported index 65536"):
        helm_values.set_path(values, path, "x")
    assert values == {}


def hr(**spec: Any) -> HelmRelease:
    return HelmRelease.from_obj(
        {
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": {
                "interval": "5m",
                "chart": {
                    "spec": {"chart": "app", "sourceRef": {"kind": "HelmRepository", "name": "r"}}
                },
                **spec,
            },
        }
    )


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({}, [], id="plain"),
        pytest.param({"driftDetection": {"mode": "disabled"}}, [], id="drift-disabled-is-fine"),
        pytest.param({"driftDetection": {"mode": "warn"}}, [], id="drift-warn-is-built"),
        pytest.param({"chartRef": {"kind": "OCIRepository", "name": "o"}, "chart": None}, [], id="oci-chart-ref-is-built"),
        pytest.param({"kubeConfig": {"secretRef": {"name": "k"}}}, [], id="kubeconfig-secret-is-built"),
        pytest.param({"kubeConfig": {"configMapRef": {"name": "k"}}}, ["spec.kubeConfig.configMapRef"], id="kubeconfig-workload-identity"),
        pytest.param({"postRenderers": [{"kustomize": {}}]}, [], id="post-renderers-are-built"),
        pytest.param({"storageNamespace": "apps"}, [], id="storage-same"),
        pytest.param({"storageNamespace": "other"}, ["spec.storageNamespace (different from the release namespace)"], id="storage-other"),
        pytest.param({"upgrade": {"crds": "CreateReplace"}}, [], id="upgrade-crds-are-built"),
        pytest.param({"dependsOn": [{"name": "x", "readyExpr": "true"}]}, ["spec.dependsOn[].readyExpr"], id="ready-expr"),
        pytest.param({"commonMetadata": {"labels": {"a": "b"}}}, [], id="common-metadata-is-built"),
        pytest.param({"chart": {"spec": {"chart": "app", "sourceRef": {"kind": "HelmRepository", "name": "r"}, "verify": {"provider": "cosign"}}}}, [], id="chart-verify-is-built"),
        # Flux 2.6-2.9: helm 3's behaviour is honoured, Helm 4's is refused.
        pytest.param({"install": {"serverSideApply": False}}, [], id="install-client-side-is-built"),
        pytest.param({"install": {"serverSideApply": True}}, [f"spec.install.serverSideApply: true ({HELM3})"], id="install-ssa"),
        pytest.param({"upgrade": {"serverSideApply": "auto"}, "rollback": {"serverSideApply": "disabled"}}, [], id="upgrade-auto-rollback-disabled-are-built"),
        pytest.param({"upgrade": {"serverSideApply": "enabled"}}, [f"spec.upgrade.serverSideApply: enabled ({HELM3})"], id="upgrade-ssa"),
        pytest.param({"rollback": {"serverSideApply": "enabled"}}, [f"spec.rollback.serverSideApply: enabled ({HELM3})"], id="rollback-ssa"),
        pytest.param({"waitStrategy": {"name": "legacy"}}, [], id="legacy-wait-is-built"),
        pytest.param({"waitStrategy": {"name": "poller"}}, ["spec.waitStrategy.name: poller (this version's helm waits the legacy way)"], id="poller-wait"),
        pytest.param({"healthCheckExprs": [{"apiVersion": "a/v1", "kind": "K", "current": "true"}]}, ["spec.healthCheckExprs (evaluated by the poller wait, not built)"], id="health-check-exprs"),
        pytest.param({"postRenderStrategy": "nohooks"}, [], id="post-render-nohooks-is-built"),
        pytest.param({"postRenderStrategy": "combined"}, ["spec.postRenderStrategy: combined (this version's helm post-renders without hooks: nohooks)"], id="post-render-combined"),
        pytest.param({"postRenderStrategy": "separate"}, ["spec.postRenderStrategy: separate (this version's helm post-renders without hooks: nohooks)"], id="post-render-separate"),
        pytest.param({"upgrade": {"chartNameChangeStrategy": "InPlaceUpdate"}}, [], id="in-place-update-is-built"),
        pytest.param({"upgrade": {"chartNameChangeStrategy": "Reinstall"}}, [], id="reinstall-is-built"),
        pytest.param({"install": {"disableTakeOwnership": True, "strategy": {"name": "RetryOnFailure", "retryInterval": "1m"}}}, [], id="take-ownership-and-retry-are-built"),
        pytest.param({"valuesFrom": [{"kind": "Secret", "name": "s", "targetPath": "a", "literal": True}]}, [], id="literal-is-built"),
    ],
)  # fmt: skip
def test_unbuilt_fields_are_named(spec: dict[str, Any], expected: list[str]) -> None:
    assert unsupported_fields(hr(**spec)) == expected


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({"install": {"strategy": {"name": "RetryOnFailure", "retryInterval": "1m"}}}, [], id="retry-interval-with-retry"),
        pytest.param({"upgrade": {"strategy": {"name": "RemediateOnFailure"}}}, [], id="remediate-without-interval"),
        pytest.param({"install": {"strategy": {"name": "RemediateOnFailure", "retryInterval": "1m"}}}, ["spec.install.strategy.retryInterval can only be set when spec.install.strategy.name is RetryOnFailure"], id="install-interval-with-remediate"),
        pytest.param({"upgrade": {"strategy": {"name": "RemediateOnFailure", "retryInterval": "1m"}}}, ["spec.upgrade.strategy.retryInterval can only be set when spec.upgrade.strategy.name is RetryOnFailure"], id="upgrade-interval-with-remediate"),
    ],
)  # fmt: skip
def test_invalid_fields_are_named(spec: dict[str, Any], expected: list[str]) -> None:
    assert invalid_fields(hr(**spec)) == expected


@pytest.mark.parametrize(
    ("version", "description", "action"),
    [
        pytest.param(1, "install by Sluice helm-controller", "install", id="controller-install"),
        pytest.param(2, "upgrade by Sluice helm-controller", "upgrade", id="controller-upgrade"),
        pytest.param(3, "Rollback to 1", "rollback", id="rollback"),
        pytest.param(1, "Install complete", "install", id="helm-install"),
        pytest.param(4, "Upgrade complete", "upgrade", id="helm-upgrade"),
        pytest.param(1, 'Release "web" failed: timed out', "install", id="failed-install"),
        pytest.param(2, 'Upgrade "web" failed: timed out', "upgrade", id="failed-upgrade"),
        pytest.param(1, "", "install", id="first-without-description"),
        pytest.param(5, "something else", "upgrade", id="later-without-known-description"),
    ],
)
def test_each_revision_names_the_action_that_made_it(
    version: int, description: str, action: str
) -> None:
    release = {"version": version, "info": {"description": description}}
    assert releases.release_action(release) == action


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("3", 3, id="integer"),
        pytest.param("-12", -12, id="negative"),
        pytest.param("0", 0, id="zero"),
        pytest.param("007", "007", id="leading-zero-stays-a-string"),
        pytest.param("1.5", "1.5", id="float-stays-a-string"),
        pytest.param("True", True, id="true-any-case"),
        pytest.param("false", False, id="false"),
        pytest.param("NULL", None, id="null"),
        pytest.param("9223372036854775808", "9223372036854775808", id="past-int64-stays-a-string"),
        pytest.param("1_000", "1_000", id="underscores-stay-a-string"),
        pytest.param("hello", "hello", id="text"),
    ],
)
def test_target_path_values_are_typed_as_helm_set_types_them(text: str, value: Any) -> None:
    assert helm_values.typed_value(text) == value
    assert type(helm_values.typed_value(text)) is type(value)


@pytest.mark.parametrize(
    ("template", "files"),
    [
        pytest.param({}, None, id="none"),
        pytest.param({"valuesFiles": ["b.yaml"]}, ["b.yaml"], id="values-files"),
        pytest.param({"valuesFile": "a.yaml"}, ["a.yaml"], id="v2beta1-values-file"),
        pytest.param({"valuesFile": "a.yaml", "valuesFiles": ["b.yaml"]}, ["a.yaml", "b.yaml"], id="values-file-merged-first"),
    ],
)  # fmt: skip
def test_the_old_values_file_goes_before_values_files(
    template: dict[str, Any], files: list[str] | None
) -> None:
    source = {"kind": "HelmRepository", "name": "r"}
    release = hr(chart={"spec": {"chart": "app", "sourceRef": source, **template}})
    assert desired_chart(release)["spec"].get("valuesFiles") == files


@pytest.mark.parametrize(
    ("template", "verify"),
    [
        pytest.param({}, None, id="no-verify"),
        pytest.param({"verify": {"provider": "cosign", "secretRef": {"name": "keys"}}}, {"provider": "cosign", "secretRef": {"name": "keys"}}, id="cosign-keys"),
        pytest.param({"verify": {"provider": "notation"}}, {"provider": "notation"}, id="notation-passed-on-to-be-refused"),
    ],
)  # fmt: skip
def test_the_chart_template_verify_reaches_the_helmchart(
    template: dict[str, Any], verify: dict[str, Any] | None
) -> None:
    source = {"kind": "HelmRepository", "name": "r"}
    release = hr(chart={"spec": {"chart": "app", "sourceRef": source, **template}})
    assert desired_chart(release)["spec"].get("verify") == verify


def _crd_file(name: str) -> str:
    return f"apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {name}\n"


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param({}, [], id="no-crds"),
        pytest.param(
            {"app/crds/b.yaml": _crd_file("b"), "app/crds/a.yml": _crd_file("a")},
            ["a", "b"],
            id="name-order",
        ),
        pytest.param(
            # helm concatenates files without a separator: each is read on its own.
            {"app/crds/a.yaml": _crd_file("a").rstrip("\n"), "app/crds/b.yaml": _crd_file("b")},
            ["a", "b"],
            id="files-without-separators",
        ),
        pytest.param(
            {"app/crds/x.yaml": _crd_file("x") + "---\n" + _crd_file("y"), "app/crds/README.md": "x"},
            ["x", "y"],
            id="several-per-file-and-other-files-ignored",
        ),
        pytest.param(
            {"app/crds/a.yaml": _crd_file("a"), "app/charts/sub/Chart.yaml": "name: sub\n", "app/charts/sub/crds/s.yaml": _crd_file("s")},
            ["a", "s"],
            id="subchart-directory",
        ),
        pytest.param(
            {"app/templates/x.yaml": _crd_file("not-a-crds-file")},
            [],
            id="templates-are-not-crds",
        ),
    ],
)  # fmt: skip
def test_chart_crds(files: dict[str, str], expected: list[str], tmp_path: Path) -> None:
    for name, text in files.items():
        path = tmp_path / "chart" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "chart" / "app").mkdir(parents=True, exist_ok=True)
    work = tmp_path / "work"
    work.mkdir()
    found = releases.chart_crds(tmp_path / "chart" / "app", work)
    assert [doc["metadata"]["name"] for doc in found] == expected


def test_chart_crds_from_a_packaged_subchart(tmp_path: Path) -> None:
    sub = tmp_path / "src" / "sub"
    (sub / "crds").mkdir(parents=True)
    (sub / "Chart.yaml").write_text("apiVersion: v2\nname: sub\nversion: 0.1.0\n")
    (sub / "crds" / "s.yaml").write_text(_crd_file("s"))
    app = tmp_path / "app"
    (app / "charts").mkdir(parents=True)
    with tarfile.open(app / "charts" / "sub-0.1.0.tgz", "w:gz") as archive:
        archive.add(sub, arcname="sub")
    work = tmp_path / "work"
    work.mkdir()
    assert [d["metadata"]["name"] for d in releases.chart_crds(app, work)] == ["s"]


def test_unreadable_crds_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "app" / "crds").mkdir(parents=True)
    (tmp_path / "app" / "crds" / "bad.yaml").write_text("a: [\n")
    with pytest.raises(releases.ChartCRDsError, match=r"app/crds/bad\.yaml"):
        releases.chart_crds(tmp_path / "app", tmp_path)
