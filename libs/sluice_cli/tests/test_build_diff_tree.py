"""`sluice build`, `diff` and `tree kustomization|resourceset` against the real API server."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import pytest
import yaml

from sluice_cli import kinds
from sluice_cli.diffing import mask_secrets
from sluice_cli.kinds import HELM_RELEASE
from sluice_cli.tree_command import release_objects
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import SECRET

from .conftest import (
    CONFIG_MAP,
    KUSTOMIZATION,
    Capture,
    Fleet,
    cli_output,
    config_map,
    sluice,
    sluice_sync,
)

SECRET_DOC = """apiVersion: v1
kind: Secret
metadata:
  name: creds
stringData:
  password: {password}
"""


def write(directory: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)
    return directory


# -- build -----------------------------------------------------------------------------


async def test_build_is_what_the_controller_would_apply(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path, capsys: Capture
) -> None:
    await kube.create(CONFIG_MAP, {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "vars", "namespace": namespace}, "data": {"color": "green"},
    })  # fmt: skip
    await kube.create(KUSTOMIZATION, {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": namespace},
        "spec": {
            "interval": "10m", "path": "./somewhere/else", "prune": True,
            "targetNamespace": namespace, "namePrefix": "p-",
            "commonMetadata": {"labels": {"team": "web"}},
            "sourceRef": {"kind": "GitRepository", "name": "fleet"},
            "postBuild": {"substitute": {"env": "prod"}, "substituteFrom": [{"kind": "ConfigMap", "name": "vars"}]},
        },
    })  # fmt: skip
    local = write(
        tmp_path / "apps", {"cm.yaml": config_map("settings", env="${env}", color="${color}")}
    )

    code = await sluice("build", "ks", "apps", "--path", str(local), "-n", namespace,
                        "--kubeconfig", str(cluster.kubeconfig))  # fmt: skip
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert list(yaml.safe_load_all(out)) == [{
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": "p-settings", "namespace": namespace,
            "labels": {
                "team": "web",
                "kustomize.toolkit.fluxcd.io/name": "apps",
                "kustomize.toolkit.fluxcd.io/namespace": namespace,
            },
        },
        "data": {"env": "prod", "color": "green"},
    }]  # fmt: skip
    # The user's directory is left as it was: the build edits a copy.
    assert sorted(p.name for p in local.iterdir()) == ["cm.yaml"]


def test_build_dry_run_from_a_file_needs_no_cluster(tmp_path: Path, capsys: Capture) -> None:
    ks_file = tmp_path / "ks.yaml"
    ks_file.write_text(yaml.safe_dump({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": "flux-system"},
        "spec": {
            "interval": "10m", "path": "./", "prune": True, "targetNamespace": "web",
            "sourceRef": {"kind": "GitRepository", "name": "fleet"},
            "postBuild": {"substitute": {"env": "prod"}},
        },
    }))  # fmt: skip
    local = write(tmp_path / "apps", {"cm.yaml": config_map("settings", env="${env}")})
    code = sluice_sync("build", "ks", "apps", "--path", str(local), "--kustomization-file",
                       str(ks_file), "--dry-run", "--kubeconfig", "/nonexistent")  # fmt: skip
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    (obj,) = yaml.safe_load_all(out)
    assert obj["metadata"]["namespace"] == "web"
    assert obj["data"] == {"env": "prod"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(("--dry-run",), "--dry-run needs --kustomization-file: the cluster is not read", id="dry-run-without-file"),
        pytest.param(("--kustomization-file", "/nonexistent/ks.yaml", "--dry-run"),
                     "--kustomization-file /nonexistent/ks.yaml: [Errno 2] No such file or directory: '/nonexistent/ks.yaml'",
                     id="missing-file"),
    ],
)  # fmt: skip
def test_build_refusals_are_one_line(
    argv: tuple[str, ...], message: str, tmp_path: Path, capsys: Capture
) -> None:
    code = sluice_sync("build", "ks", "apps", "--path", str(tmp_path), *argv)
    assert code == 2
    assert capsys.readouterr().err == f"✗ sluice build: {message}\n"


async def test_build_of_a_broken_directory(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path, capsys: Capture
) -> None:
    await kube.create(KUSTOMIZATION, {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": namespace},
        "spec": {"interval": "10m", "path": "./", "prune": True,
                 "sourceRef": {"kind": "GitRepository", "name": "fleet"}},
    })  # fmt: skip
    local = write(tmp_path / "apps", {"kustomization.yaml": "resources:\n- missing.yaml\n"})
    code = await sluice("build", "ks", "apps", "--path", str(local), "-n", namespace,
                        "--kubeconfig", str(cluster.kubeconfig))  # fmt: skip
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.startswith("✗ sluice build: kustomize build failed: ")
    assert "missing.yaml" in err
    assert err.count("\n") == 1


# -- diff ------------------------------------------------------------------------------


async def test_diff_against_what_the_controller_applied(
    fleet: Fleet, tmp_path: Path, capsys: Capture
) -> None:
    files = {
        "settings.yaml": config_map("settings", color="blue"),
        "old.yaml": config_map("old"),
        "secret.yaml": SECRET_DOC.format(password="hunter2"),
    }
    repo = fleet.repo("fleet")
    repo.commit("one", files=files)
    repo.push()
    await fleet.git_repository("fleet")
    await fleet.kustomization("apps", source="fleet")
    await fleet.observe.wait_ready(KUSTOMIZATION, "apps", timeout=30)
    ns = fleet.namespace
    local = write(tmp_path / "fleet", files)

    # The same files as the applied revision: nothing to show.
    assert await sluice("diff", "ks", "apps", "--path", str(local), *fleet.flags()) == 0
    assert cli_output(capsys) == ("", "")

    (local / "old.yaml").unlink()
    write(local, {
        "settings.yaml": config_map("settings", color="green"),
        "new.yaml": config_map("new"),
        "secret.yaml": SECRET_DOC.format(password="correct-horse"),
    })  # fmt: skip
    assert await sluice("diff", "kustomization", "apps", "--path", str(local), *fleet.flags()) == 1
    out, err = cli_output(capsys)
    assert err == ""
    assert out == (
        f"► ConfigMap/{ns}/new created\n"
        f"► ConfigMap/{ns}/settings drifted\n"
        f"--- ConfigMap/{ns}/settings (cluster)\n"
        f"+++ ConfigMap/{ns}/settings (local)\n"
        "@@ -1,6 +1,6 @@\n"
        " apiVersion: v1\n"
        " data:\n"
        "-  color: blue\n"
        "+  color: green\n"
        " kind: ConfigMap\n"
        " metadata:\n"
        "   labels:\n"
        f"► Secret/{ns}/creds drifted\n"
        f"--- Secret/{ns}/creds (cluster)\n"
        f"+++ Secret/{ns}/creds (local)\n"
        "@@ -1,6 +1,6 @@\n"
        " apiVersion: v1\n"
        " data:\n"
        "-  password: '*** (before)'\n"
        "+  password: '*** (after)'\n"
        " kind: Secret\n"
        " metadata:\n"
        "   labels:\n"
        f"► ConfigMap/{ns}/old deleted\n"
    )
    for secret in ("hunter2", "correct-horse"):
        assert secret not in out
        assert base64.b64encode(secret.encode()).decode() not in out
    # A diff changes nothing.
    live = await fleet.kube.get(CONFIG_MAP, "settings", ns)
    assert live["data"] == {"color": "blue"}


async def test_diff_of_an_invalid_object_fails_naming_it(
    fleet: Fleet, tmp_path: Path, capsys: Capture
) -> None:
    repo = fleet.repo("fleet")
    repo.commit("one", files={"settings.yaml": config_map("settings")})
    repo.push()
    await fleet.git_repository("fleet")
    await fleet.kustomization("apps", source="fleet")
    bad = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Not_Valid\ndata: {}\n"
    local = write(tmp_path / "fleet", {"bad.yaml": bad})
    assert await sluice("diff", "ks", "apps", "--path", str(local), *fleet.flags()) == 2
    _, err = cli_output(capsys)
    assert err.startswith(f"✗ sluice diff: dry-run failed: ConfigMap/{fleet.namespace}/Not_Valid")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("live", "merged", "shown"),
    [
        pytest.param({"a": "eA==", "b": "eQ=="}, {"a": "eA==", "b": "eg=="},
                     ({"a": "***", "b": "*** (before)"}, {"a": "***", "b": "*** (after)"}), id="one-changed"),
        pytest.param({"a": "eA=="}, {"a": "eA==", "c": "eg=="},
                     ({"a": "***"}, {"a": "***", "c": "*** (after)"}), id="added"),
        pytest.param({"a": "eA==", "c": "eg=="}, {"a": "eA=="},
                     ({"a": "***", "c": "*** (before)"}, {"a": "***"}), id="removed"),
    ],
)  # fmt: skip
def test_mask_secrets(live: dict, merged: dict, shown: tuple[dict, dict]) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret"}
    before, after = mask_secrets({**secret, "data": live}, {**secret, "data": merged})
    assert (before["data"], after["data"]) == shown
    assert live != shown[0]  # the caller's objects are left alone


def test_mask_leaves_other_kinds() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "x"}}
    assert mask_secrets(cm, cm) == (cm, cm)


# -- tree ------------------------------------------------------------------------------


async def test_tree_nests_child_kustomizations(fleet: Fleet, capsys: Capture) -> None:
    ns = fleet.namespace
    child = yaml.safe_dump({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps"},
        "spec": {"interval": "1h", "path": "./apps", "prune": True, "targetNamespace": ns,
                 "sourceRef": {"kind": "GitRepository", "name": "fleet"}},
    })  # fmt: skip
    repo = fleet.repo("fleet")
    repo.commit("one", files={
        "root/apps.yaml": child,
        "root/settings.yaml": config_map("root-settings"),
        "apps/settings.yaml": config_map("app-settings"),
        "apps/more.yaml": config_map("app-more"),
    })  # fmt: skip
    repo.push()
    await fleet.git_repository("fleet")
    await fleet.kustomization("root", source="fleet", path="./root")
    await fleet.observe.wait_ready(KUSTOMIZATION, "root", timeout=30)
    await fleet.observe.wait_ready(KUSTOMIZATION, "apps", timeout=30)

    assert await sluice("tree", "ks", "root", *fleet.flags()) == 0
    out, err = cli_output(capsys)
    assert err == ""
    assert out == (
        f"Kustomization/{ns}/root\n"
        f"├── ConfigMap/{ns}/root-settings\n"
        f"└── Kustomization/{ns}/apps\n"
        f"    ├── ConfigMap/{ns}/app-more\n"
        f"    └── ConfigMap/{ns}/app-settings\n"
    )

    assert await sluice("tree", "ks", "root", "--compact", "-o", "json", *fleet.flags()) == 0
    out, _ = cli_output(capsys)
    assert yaml.safe_load(out) == {
        "resource": f"Kustomization/{ns}/root",
        "resources": [{"resource": f"Kustomization/{ns}/apps", "resources": []}],
    }


async def test_tree_of_missing_kustomization(
    cluster: Cluster, namespace: str, capsys: Capture
) -> None:
    code = await sluice(
        "tree", "kustomization", "nope", "-n", namespace, "--kubeconfig", str(cluster.kubeconfig)
    )
    assert code == 1
    assert capsys.readouterr().err == f"✗ sluice tree: Kustomization {namespace}/nope not found\n"


def helm_secret_value(manifest: str, *, gzipped: bool = True) -> str:
    """`data.release` of a Helm storage Secret, encoded as Helm encodes it."""
    raw = json.dumps(
        {"name": "podinfo", "namespace": "web", "version": 3, "manifest": manifest}
    ).encode()
    helm = base64.b64encode(gzip.compress(raw) if gzipped else raw)
    return base64.b64encode(helm).decode()


RELEASE_MANIFEST = """---
# Source: podinfo/templates/service.yaml
apiVersion: v1
kind: Service
metadata:
  name: podinfo
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: podinfo-reader
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
  namespace: elsewhere
"""


@pytest.mark.parametrize(
    "gzipped", [pytest.param(True, id="gzipped"), pytest.param(False, id="plain")]
)
def test_release_objects_decodes_helm_storage(gzipped: bool) -> None:
    assert release_objects(helm_secret_value(RELEASE_MANIFEST, gzipped=gzipped)) == [
        ("v1", "Service", "", "podinfo"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole", "", "podinfo-reader"),
        ("apps/v1", "Deployment", "elsewhere", "podinfo"),
    ]


@pytest.mark.parametrize(
    ("stored", "problem"),
    [
        pytest.param("not base64!", "base64", id="not-base64"),
        pytest.param(base64.b64encode(b"also not").decode(), "base64", id="inner-not-base64"),
        pytest.param(base64.b64encode(base64.b64encode(b"{not json")).decode(), "Expecting property name", id="not-json"),
    ],
)  # fmt: skip
def test_release_objects_refuses_what_is_not_a_release(stored: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        release_objects(stored)


async def test_tree_shows_a_helmrelease_where_its_api_is_not_served(
    cluster: Cluster, kube: KubeClient, namespace: str, capsys: Capture
) -> None:
    await kube.create(KUSTOMIZATION, {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": namespace},
        "spec": {"interval": "10m", "path": "./", "prune": True,
                 "sourceRef": {"kind": "GitRepository", "name": "fleet"}},
    })  # fmt: skip
    await kube.merge_patch(KUSTOMIZATION, "apps", {"status": {"inventory": {"entries": [
        {"id": f"{namespace}_podinfo_helm.toolkit.fluxcd.io_HelmRelease", "v": "v2"},
        {"id": f"_{namespace}__Namespace", "v": "v1"},
        {"id": f"{namespace}_settings__ConfigMap", "v": "v1"},
    ]}}}, namespace=namespace, subresource="status")  # fmt: skip
    code = await sluice(
        "tree", "ks", "apps", "-n", namespace, "--kubeconfig", str(cluster.kubeconfig)
    )
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out == (
        f"Kustomization/{namespace}/apps\n"
        f"├── Namespace/{namespace}\n"
        f"├── ConfigMap/{namespace}/settings\n"
        f"└── HelmRelease/{namespace}/podinfo\n"
    )


async def test_tree_nests_a_helmreleases_objects_from_helms_storage(
    cluster: Cluster, kube: KubeClient, namespace: str, capsys: Capture
) -> None:
    """What the helm-controller installed is read from the release's Secret in
    Helm's storage, as `flux tree` does; a namespaced object the chart left
    without a namespace is in the release's namespace."""
    await kube.create(KUSTOMIZATION, {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": namespace},
        "spec": {"interval": "10m", "path": "./", "prune": True,
                 "sourceRef": {"kind": "GitRepository", "name": "fleet"}},
    })  # fmt: skip
    await kube.merge_patch(KUSTOMIZATION, "apps", {"status": {"inventory": {"entries": [
        {"id": f"{namespace}_podinfo_helm.toolkit.fluxcd.io_HelmRelease", "v": "v2"},
    ]}}}, namespace=namespace, subresource="status")  # fmt: skip
    await kube.create(HELM_RELEASE, {
        "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": {"name": "podinfo", "namespace": namespace},
        "spec": {"interval": "10m", "chart": {"spec": {
            "chart": "podinfo", "sourceRef": {"kind": "HelmRepository", "name": "charts"}}}},
    })  # fmt: skip
    await kube.merge_patch(HELM_RELEASE, "podinfo", {"status": {
        "storageNamespace": namespace,
        "history": [{"digest": "sha256:" + "0" * 64, "name": "podinfo", "namespace": namespace,
                     "version": 3, "status": "deployed", "chartName": "podinfo",
                     "chartVersion": "6.5.0", "configDigest": "sha256:" + "1" * 64,
                     "firstDeployed": "2026-11-21T10:00:00Z",
                     "lastDeployed": "2026-11-21T10:00:00Z"}],
    }}, namespace=namespace, subresource="status")  # fmt: skip
    await kube.create(SECRET, {
        "apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
        "metadata": {"name": "sh.helm.release.v1.podinfo.v3", "namespace": namespace},
        "data": {"release": helm_secret_value(RELEASE_MANIFEST)},
    })  # fmt: skip
    code = await sluice(
        "tree", "ks", "apps", "-n", namespace, "--kubeconfig", str(cluster.kubeconfig)
    )
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out == (
        f"Kustomization/{namespace}/apps\n"
        f"└── HelmRelease/{namespace}/podinfo\n"
        "    ├── ClusterRole/podinfo-reader\n"
        "    ├── Deployment/elsewhere/podinfo\n"
        f"    └── Service/{namespace}/podinfo\n"
    )


async def test_diff_of_a_remote_cluster_kustomization_is_refused(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path, capsys: Capture
) -> None:
    await kube.create(KUSTOMIZATION, {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "remote", "namespace": namespace},
        "spec": {"interval": "10m", "path": "./", "prune": True,
                 "kubeConfig": {"secretRef": {"name": "prod-kubeconfig"}},
                 "sourceRef": {"kind": "GitRepository", "name": "fleet"}},
    })  # fmt: skip
    local = write(tmp_path / "apps", {"cm.yaml": config_map("settings")})
    code = await sluice("diff", "ks", "remote", "--path", str(local), "-n", namespace,
                        "--kubeconfig", str(cluster.kubeconfig))  # fmt: skip
    assert code == 2
    assert capsys.readouterr().err == (
        f"✗ sluice diff: Kustomization {namespace}/remote applies to another cluster "
        "(spec.kubeConfig); diff it with --kubeconfig of that cluster and --kustomization-file\n"
    )


async def test_tree_of_a_resourceset_nests_its_kustomizations_and_resourcesets(
    cluster: Cluster, kube: KubeClient, namespace: str, capsys: Capture
) -> None:
    """A ResourceSet's inventory has the Kustomization's form: the tree follows the
    Kustomizations and ResourceSets it generated into their own inventories."""
    rset = kinds.RESOURCESET.rt
    for name, entries in (
        ("tenants", [
            {"id": f"{namespace}_tenant-a__ConfigMap", "v": "v1"},
            {"id": f"{namespace}_apps_kustomize.toolkit.fluxcd.io_Kustomization", "v": "v1"},
            {"id": f"{namespace}_inner_fluxcd.controlplane.io_ResourceSet", "v": "v1"},
        ]),
        ("inner", [{"id": f"{namespace}_tenant-b__ServiceAccount", "v": "v1"}]),
    ):  # fmt: skip
        await kube.create(rset, {
            "apiVersion": rset.api_version, "kind": "ResourceSet",
            "metadata": {"name": name, "namespace": namespace}, "spec": {},
        })  # fmt: skip
        await kube.merge_patch(rset, name, {"status": {"inventory": {"entries": entries}}},
                               namespace=namespace, subresource="status")  # fmt: skip
    await kube.create(KUSTOMIZATION, {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": namespace},
        "spec": {"interval": "10m", "path": "./", "prune": True,
                 "sourceRef": {"kind": "GitRepository", "name": "fleet"}},
    })  # fmt: skip
    await kube.merge_patch(KUSTOMIZATION, "apps", {"status": {"inventory": {"entries": [
        {"id": f"{namespace}_settings__ConfigMap", "v": "v1"},
    ]}}}, namespace=namespace, subresource="status")  # fmt: skip
    flags = ("-n", namespace, "--kubeconfig", str(cluster.kubeconfig))

    assert await sluice("tree", "rset", "tenants", *flags) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out == (
        f"ResourceSet/{namespace}/tenants\n"
        f"├── ConfigMap/{namespace}/tenant-a\n"
        f"├── Kustomization/{namespace}/apps\n"
        f"│   └── ConfigMap/{namespace}/settings\n"
        f"└── ResourceSet/{namespace}/inner\n"
        f"    └── ServiceAccount/{namespace}/tenant-b\n"
    )
    assert await sluice("tree", "resourceset", "tenants", "--compact", "-o", "json", *flags) == 0
    assert json.loads(capsys.readouterr().out) == {
        "resource": f"ResourceSet/{namespace}/tenants",
        "resources": [
            {"resource": f"Kustomization/{namespace}/apps", "resources": []},
            {"resource": f"ResourceSet/{namespace}/inner", "resources": []},
        ],
    }
    assert await sluice("tree", "rset", "nope", *flags) == 1
    assert capsys.readouterr().err == f"✗ sluice tree: ResourceSet {namespace}/nope not found\n"
