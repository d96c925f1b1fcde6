"""`sluice events`, `check` and `version` against the real API server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sluice_cli import checking, controllers, events_command
from sluice_cli.controllers import DEPLOYMENT, Deployed
from sluice_cli.terminal import human_duration
from sluice_cli.version_command import cli_version
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import EVENT

from .conftest import (
    KUSTOMIZATION,
    Capture,
    Fleet,
    cli_output,
    config_map,
    sluice,
    sluice_sync,
)


def stamp(ago: timedelta) -> str:
    return (datetime.now(UTC) - ago).strftime("%Y-%m-%dT%H:%M:%SZ")


async def make_event(
    kube: KubeClient,
    namespace: str,
    name: str,
    *,
    kind: str,
    api_version: str,
    obj: str,
    reason: str,
    message: str,
    ago: timedelta,
    type_: str = "Normal",
) -> None:
    await kube.create(EVENT, {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {"apiVersion": api_version, "kind": kind, "name": obj, "namespace": namespace},
        "reason": reason, "message": message, "type": type_,
        "firstTimestamp": stamp(ago), "lastTimestamp": stamp(ago), "count": 1,
        "source": {"component": "kustomize-controller"},
    })  # fmt: skip


async def test_events_of_toolkit_objects_oldest_first(
    cluster: Cluster, kube: KubeClient, namespace: str, capsys: Capture
) -> None:
    ks = "kustomize.toolkit.fluxcd.io/v1"
    await make_event(kube, namespace, "e1", kind="Kustomization", api_version=ks, obj="apps",
                     reason="ReconciliationSucceeded", message="Reconciliation finished in 1s",
                     ago=timedelta(hours=5))  # fmt: skip
    await make_event(kube, namespace, "e2", kind="GitRepository", api_version="source.toolkit.fluxcd.io/v1",
                     obj="fleet", reason="NewArtifact", message="stored artifact for commit 'one'",
                     ago=timedelta(days=10))  # fmt: skip
    await make_event(kube, namespace, "e3", kind="Kustomization", api_version=ks, obj="infra",
                     reason="BuildFailed", message="kustomize build failed:\n  no such file",
                     ago=timedelta(hours=3), type_="Warning")  # fmt: skip
    await make_event(kube, namespace, "e4", kind="Pod", api_version="v1", obj="web-1",
                     reason="Scheduled", message="noise", ago=timedelta(seconds=1))  # fmt: skip
    flags = ("-n", namespace, "--kubeconfig", str(cluster.kubeconfig))

    assert await sluice("events", *flags) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.splitlines()[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert [line.split(None, 4) for line in out.splitlines()[1:]] == [
        ["10d", "Normal", "NewArtifact", "GitRepository/fleet", "stored artifact for commit 'one'"],
        [
            "5h",
            "Normal",
            "ReconciliationSucceeded",
            "Kustomization/apps",
            "Reconciliation finished in 1s",
        ],
        [
            "3h",
            "Warning",
            "BuildFailed",
            "Kustomization/infra",
            "kustomize build failed: no such file",
        ],
    ]

    assert await sluice("events", "--for", "kustomization/apps", *flags) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[1].split()[3] == "Kustomization/apps"

    assert await sluice("events", "--for", "Kustomization/nope", *flags) == 0
    assert capsys.readouterr() == (
        "",
        f"no events found for Kustomization/nope in {namespace} namespace\n",
    )


async def test_events_for_needs_kind_and_name(cluster: Cluster, capsys: Capture) -> None:
    assert await sluice("events", "--for", "apps", "--kubeconfig", str(cluster.kubeconfig)) == 2
    assert capsys.readouterr().err == (
        "✗ sluice events: --for 'apps' is not KIND/NAME, e.g. Kustomization/podinfo\n"
    )


async def test_events_the_controllers_record(fleet: Fleet, capsys: Capture) -> None:
    repo = fleet.repo("fleet")
    repo.commit("one", files={"cm.yaml": config_map("settings")})
    repo.push()
    await fleet.git_repository("fleet")
    await fleet.kustomization("apps", source="fleet")
    await fleet.observe.wait_ready(KUSTOMIZATION, "apps", timeout=30)
    assert await sluice("reconcile", "ks", "apps", *fleet.flags()) == 0
    cli_output(capsys)

    assert await sluice("events", "--for", "Kustomization/apps", *fleet.flags()) == 0
    out, _ = cli_output(capsys)
    rows = [line.split(None, 4) for line in out.splitlines()[1:]]
    assert rows
    assert {row[3] for row in rows} == {"Kustomization/apps"}
    assert any("ConfigMap/" in row[4] and "created" in row[4] for row in rows), out


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        pytest.param(0, "0s", id="now"),
        pytest.param(119, "119s", id="seconds"),
        pytest.param(192, "3m12s", id="minutes-seconds"),
        pytest.param(45 * 60, "45m", id="minutes"),
        pytest.param(5 * 3600 + 180, "5h3m", id="hours-minutes"),
        pytest.param(30 * 3600, "30h", id="hours"),
        pytest.param(52 * 3600, "2d4h", id="days-hours"),
        pytest.param(40 * 86400, "40d", id="days"),
    ],
)
def test_human_duration(seconds: int, shown: str) -> None:
    assert human_duration(seconds) == shown


# -- check ---------------------------------------------------------------------------


async def make_deployment(kube: KubeClient, namespace: str, name: str, *, ready: int) -> None:
    await kube.create(DEPLOYMENT, {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "manager", "image": "ghcr.io/sluice-gitops/sluice:0.1.0"}]},
            },
        },
    })  # fmt: skip
    await kube.merge_patch(
        DEPLOYMENT, name, {"status": {"replicas": 1, "readyReplicas": ready}},
        namespace=namespace, subresource="status",
    )  # fmt: skip


async def test_check_passes_with_ready_controllers_and_current_crds(
    cluster: Cluster, kube: KubeClient, namespace: str, capsys: Capture
) -> None:
    # Every controller the chart deploys by default, helm- and resourceset-controller included.
    for name in controllers.DEFAULT:
        await make_deployment(kube, namespace, name, ready=1)
    code = await sluice("check", "-n", namespace, "--kubeconfig", str(cluster.kubeconfig))
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), out
    lines = out.splitlines()
    assert lines[0] == "► checking prerequisites"
    assert lines[1].startswith("✔ Kubernetes 1.") and lines[1].endswith(" >=1.20.0")
    assert lines[2 : lines.index("► checking crds")] == [
        "► checking controllers",
        *(
            line
            for name in controllers.DEFAULT
            for line in (f"✔ {name}: deployment ready", "► ghcr.io/sluice-gitops/sluice:0.1.0")
        ),
    ]
    assert "application-controller" not in out  # opt-in: checked only when asked
    crds = lines[lines.index("► checking crds") + 1 : -1]
    assert "✔ kustomizations.kustomize.toolkit.fluxcd.io/v1" in crds
    assert "✔ gates.gating.toolkit.fluxcd.io/v1alpha1" in crds
    assert all(line.startswith("✔ ") for line in crds)
    assert lines[-1] == "✔ all checks passed"


async def test_check_fails_naming_what_is_missing(
    cluster: Cluster, kube: KubeClient, namespace: str, capsys: Capture
) -> None:
    await make_deployment(kube, namespace, "source-controller", ready=0)
    code = await sluice("check", "-n", namespace, "--kubeconfig", str(cluster.kubeconfig))
    out, _ = capsys.readouterr()
    assert code == 1
    lines = out.splitlines()
    assert "✗ source-controller: deployment not ready (0/1 replicas ready)" in lines
    assert (
        f"✗ kustomize-controller: deployment {namespace}/kustomize-controller not found; "
        "if it is not installed, name the others with --components"
    ) in lines
    assert lines[-1] == "✗ check failed"

    assert (
        await sluice("check", "--pre", "-n", namespace, "--kubeconfig", str(cluster.kubeconfig))
        == 0
    )
    assert capsys.readouterr().out.splitlines()[-1] == "✔ all checks passed"


async def test_check_components_name_the_controllers_to_check(
    cluster: Cluster, kube: KubeClient, namespace: str, capsys: Capture
) -> None:
    await make_deployment(kube, namespace, "source-controller", ready=1)
    flags = ("-n", namespace, "--kubeconfig", str(cluster.kubeconfig))
    # A cluster installed with only some controllers names them, as with flux check.
    assert await sluice("check", "--components", "source-controller", *flags) == 0
    out = capsys.readouterr().out
    assert "✔ source-controller: deployment ready" in out
    assert "kustomize-controller" not in out
    # The opt-in application-controller is checked when asked for.
    code = await sluice(
        "check", "--components=source-controller",
        "--components-extra=application-controller", *flags,
    )  # fmt: skip
    assert code == 1
    assert (
        f"✗ application-controller: deployment {namespace}/application-controller not found; "
        "if it is not installed, name the others with --components"
        in capsys.readouterr().out.splitlines()
    )


def test_check_refuses_an_unknown_component(capsys: Capture) -> None:
    with pytest.raises(SystemExit) as exited:
        sluice_sync("check", "--components", "source-controller,image-reflector-controller")
    assert exited.value.code == 2
    assert "unknown controller image-reflector-controller (known: source-controller," in (
        capsys.readouterr().err
    )


WANTED = {"spec": {"versions": [
    {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {"type": "object"}}},
]}}  # fmt: skip


@pytest.mark.parametrize(
    ("installed", "problem"),
    [
        pytest.param(WANTED, None, id="same"),
        pytest.param({"spec": {"versions": []}}, "version v1 is missing", id="missing-version"),
        pytest.param({"spec": {"versions": [{**WANTED["spec"]["versions"][0], "served": False}]}},
                     "version v1 is not served", id="not-served"),
        pytest.param({"spec": {"versions": [{**WANTED["spec"]["versions"][0], "storage": False}]}},
                     "version v1 storage is False", id="not-storage"),
        pytest.param({"spec": {"versions": [{**WANTED["spec"]["versions"][0], "schema": {}}]}},
                     "version v1 has a different schema", id="old-schema"),
    ],
)  # fmt: skip
def test_crd_problem(installed: dict[str, Any], problem: str | None) -> None:
    assert checking.crd_problem(installed, WANTED) == problem


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        pytest.param("v1.31.2", (1, 31, 2), id="plain"),
        pytest.param("v1.29.0+k3s1", (1, 29, 0), id="distribution"),
        pytest.param("v1.30.1-eks-abc", (1, 30, 1), id="suffix"),
        pytest.param("nonsense", None, id="not-a-version"),
    ],
)
def test_kubernetes_version(given: str, parsed: tuple[int, int, int] | None) -> None:
    assert checking.kubernetes_version(given) == parsed


# -- version ---------------------------------------------------------------------------


async def test_version_of_cli_server_and_controllers(
    cluster: Cluster, kube: KubeClient, namespace: str, capsys: Capture
) -> None:
    await make_deployment(kube, namespace, "kustomize-controller", ready=1)
    await make_deployment(kube, namespace, "helm-controller", ready=1)
    code = await sluice("version", "-n", namespace, "--kubeconfig", str(cluster.kubeconfig))
    out, _ = capsys.readouterr()
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "sluice: v0.1.0"
    assert lines[1].startswith("kubernetes: v1.")
    assert lines[2:] == ["kustomize-controller: 0.1.0", "helm-controller: 0.1.0"]


async def test_version_client_needs_no_cluster(capsys: Capture) -> None:
    assert await sluice("version", "--client", "-o", "json", "--kubeconfig", "/nonexistent") == 0
    assert capsys.readouterr().out == '{\n  "sluice": "v0.1.0"\n}\n'
    assert cli_version() == "v0.1.0"


@pytest.mark.parametrize(
    ("image", "version"),
    [
        pytest.param("ghcr.io/sluice-gitops/sluice:0.1.0", "0.1.0", id="tag"),
        pytest.param("localhost:5000/sluice", "latest", id="registry-port-no-tag"),
        pytest.param("sluice@sha256:abc", "sha256:abc", id="digest"),
    ],
)
def test_deployed_version(image: str, version: str) -> None:
    assert Deployed("x", image, 1, 1).version == version


async def test_unreachable_cluster_is_one_line_and_exit_2(tmp_path: Any, capsys: Capture) -> None:
    missing = tmp_path / "nope"
    assert await sluice("check", "--kubeconfig", str(missing)) == 2
    assert capsys.readouterr().err == f"✗ sluice check: kubeconfig {missing} does not exist\n"


def involving(api_version: str, kind: str) -> dict[str, Any]:
    return {"involvedObject": {"apiVersion": api_version, "kind": kind, "name": "x"},
            "lastTimestamp": "2026-11-21T10:00:00Z"}  # fmt: skip


@pytest.mark.parametrize(
    ("event", "shown"),
    [
        pytest.param(involving("kustomize.toolkit.fluxcd.io/v1", "Kustomization"), True, id="toolkit"),
        pytest.param(involving("image.toolkit.fluxcd.io/v1", "ImagePolicy"), True, id="any-toolkit-group"),
        pytest.param(involving("fluxcd.controlplane.io/v1", "ResourceSet"), True, id="resourceset"),
        pytest.param(involving("fluxcd.controlplane.io/v1", "ResourceSetInputProvider"), True,
                     id="input-provider"),
        pytest.param(involving("source.extensions.fluxcd.io/v1beta1", "ArtifactGenerator"), True,
                     id="artifact-generator"),
        pytest.param(involving("gitops.kubesphere.io/v1alpha1", "Application"), True,
                     id="kubesphere-application"),
        pytest.param(involving("v1", "Pod"), False, id="pod-noise"),
        pytest.param(involving("apps/v1", "Deployment"), False, id="deployment-noise"),
        pytest.param(involving("example.com/v1", "Widget"), False, id="other-custom-kind"),
    ],
)  # fmt: skip
def test_events_are_those_of_sluices_kinds(event: dict[str, Any], shown: bool) -> None:
    assert events_command.select([event], None) == ([event] if shown else [])
