"""`sluice get`, `reconcile`, `suspend` and `resume` against the real API server."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import signal
import subprocess
import sys

import yaml

from sluice_cli import kinds
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.kube.client import KubeClient

from .conftest import (
    CONFIG_MAP,
    GITREPO,
    KUSTOMIZATION,
    Capture,
    Fleet,
    cli_output,
    config_map,
    sluice,
    sluice_sync,
)

GATES = ("gating.toolkit.fluxcd.io", "v1alpha1")


def condition(status: str, reason: str, message: str) -> dict[str, str]:
    return {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-11-21T10:00:00Z",
    }


async def make_kustomization(
    kube: KubeClient,
    namespace: str,
    name: str,
    *,
    suspend: bool = False,
    status: dict | None = None,
) -> None:
    await kube.create(KUSTOMIZATION, {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "interval": "10m", "path": "./", "prune": True, "suspend": suspend,
            "sourceRef": {"kind": "GitRepository", "name": "fleet"},
        },
    })  # fmt: skip
    if status is not None:
        await kube.merge_patch(
            KUSTOMIZATION, name, {"status": status}, namespace=namespace, subresource="status"
        )


async def test_get_kustomizations_shows_flux_columns(
    cluster: Cluster, kube: KubeClient, namespace: str, capsys: Capture
) -> None:
    await make_kustomization(kube, namespace, "apps", status={
        "lastAppliedRevision": "main@sha1:0123abcd",
        "conditions": [condition("True", "ReconciliationSucceeded", "Applied revision: main@sha1:0123abcd")],
    })  # fmt: skip
    await make_kustomization(kube, namespace, "infra", suspend=True, status={
        "conditions": [condition("False", "BuildFailed", "kustomize build failed:\n  accumulating resources")],
    })  # fmt: skip
    await make_kustomization(kube, namespace, "new")

    code = await sluice("get", "ks", "-n", namespace, "--kubeconfig", str(cluster.kubeconfig))
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out == (
        "NAME    REVISION             SUSPENDED   READY   MESSAGE\n"
        "apps    main@sha1:0123abcd   False       True    Applied revision: main@sha1:0123abcd\n"
        "infra                        True        False   kustomize build failed: accumulating resources\n"
        "new                          False       False   waiting to be reconciled\n"
    )


async def test_get_one_by_name_and_as_json_or_yaml(
    cluster: Cluster, kube: KubeClient, namespace: str, capsys: Capture
) -> None:
    await make_kustomization(kube, namespace, "apps")
    await make_kustomization(kube, namespace, "infra")
    flags = ("-n", namespace, "--kubeconfig", str(cluster.kubeconfig))

    assert await sluice("get", "kustomization", "infra", *flags) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[0] == "infra"

    assert await sluice("get", "ks", "apps", *flags, "-o", "json") == 0
    obj = json.loads(capsys.readouterr().out)
    assert (obj["kind"], obj["metadata"]["name"]) == ("Kustomization", "apps")

    assert await sluice("get", "ks", *flags, "-o", "yaml") == 0
    listed = yaml.safe_load(capsys.readouterr().out)
    assert listed["kind"] == "List"
    assert [o["metadata"]["name"] for o in listed["items"]] == ["apps", "infra"]


async def test_get_missing_object_fails_in_one_line(
    cluster: Cluster, namespace: str, capsys: Capture
) -> None:
    flags = ("-n", namespace, "--kubeconfig", str(cluster.kubeconfig))
    assert await sluice("get", "ks", "nope", *flags) == 1
    assert capsys.readouterr().err == f"✗ sluice get: Kustomization {namespace}/nope not found\n"

    assert await sluice("get", "hr", "nope", *flags) == 1
    assert capsys.readouterr().err == f"✗ sluice get: HelmRelease {namespace}/nope not found\n"


async def test_get_all_across_namespaces_names_each_kind(
    cluster: Cluster, kube: KubeClient, namespace: str, capsys: Capture
) -> None:
    await make_kustomization(kube, namespace, "apps")
    await kube.create(GITREPO, {
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": "fleet", "namespace": namespace},
        "spec": {"url": "https://example.com/fleet.git", "interval": "5m"},
    })  # fmt: skip

    code = await sluice("get", "all", "-A", "--kubeconfig", str(cluster.kubeconfig))
    out, _ = capsys.readouterr()
    assert code == 0
    tables = out.split("\n\n")
    sources = tables[0].splitlines()
    assert sources[0].split() == ["NAMESPACE", "NAME", "REVISION", "SUSPENDED", "READY", "MESSAGE"]
    assert [
        namespace,
        "gitrepository/fleet",
        "False",
        "False",
        "waiting",
        "to",
        "be",
        "reconciled",
    ] in [line.split() for line in sources]
    ours = [
        line.split()[:2] for t in tables for line in t.splitlines() if line.startswith(namespace)
    ]
    assert ours == [[namespace, "gitrepository/fleet"], [namespace, "kustomization/apps"]]


async def test_get_all_shows_every_kind_with_its_flux_columns(
    cluster: Cluster, kube: KubeClient, namespace: str, capsys: Capture
) -> None:
    """HelmReleases (the chart version as revision), and the kinds with no
    revision (receivers, alerts, providers) or nothing to suspend (gates)."""
    specs = {
        kinds.HELMRELEASE: ("podinfo", {"interval": "10m", "chart": {"spec": {
            "chart": "podinfo", "sourceRef": {"kind": "HelmRepository", "name": "charts"}}}}),
        kinds.GATE: ("freeze", {"interval": "30s", "default": "closed", "window": "1h"}),
        kinds.RECEIVER: ("ci", {"type": "generic", "secretRef": {"name": "token"},
                                "resources": [{"kind": "GitRepository", "name": "fleet"}]}),
        kinds.ALERT: ("on-call", {"providerRef": {"name": "hook"},
                                  "eventSources": [{"kind": "Kustomization", "name": "*"}]}),
        kinds.PROVIDER: ("hook", {"type": "generic", "address": "https://example.com/hook"}),
    }  # fmt: skip
    for kind, (name, spec) in specs.items():
        await kube.create(kind.rt, {
            "apiVersion": kind.rt.api_version, "kind": kind.rt.kind,
            "metadata": {"name": name, "namespace": namespace}, "spec": spec,
        })  # fmt: skip
    await kube.merge_patch(kinds.HELMRELEASE.rt, "podinfo", {"status": {
        "history": [{"digest": "sha256:" + "0" * 64, "name": "podinfo", "namespace": namespace,
                     "version": 1, "status": "deployed", "chartName": "podinfo",
                     "chartVersion": "6.5.0", "configDigest": "sha256:" + "1" * 64,
                     "firstDeployed": "2026-11-21T10:00:00Z",
                     "lastDeployed": "2026-11-21T10:00:00Z"}],
        "conditions": [condition("True", "InstallSucceeded", "Helm install succeeded")],
    }}, namespace=namespace, subresource="status")  # fmt: skip

    code = await sluice("get", "all", "-n", namespace, "--kubeconfig", str(cluster.kubeconfig))
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    tables = [[line.split() for line in table.splitlines()] for table in out.split("\n\n")]
    waiting = ["waiting", "to", "be", "reconciled"]
    assert tables == [
        [["NAME", "REVISION", "SUSPENDED", "READY", "MESSAGE"],
         ["helmrelease/podinfo", "6.5.0", "False", "True", "Helm", "install", "succeeded"]],
        [["NAME", "READY", "MESSAGE"], ["gate/freeze", "False", *waiting]],
        [["NAME", "SUSPENDED", "READY", "MESSAGE"], ["receiver/ci", "False", "False", *waiting]],
        [["NAME", "SUSPENDED", "READY", "MESSAGE"], ["alert/on-call", "False", "False", *waiting]],
        # A Provider can be suspended (spec.suspend), so it has the column.
        [["NAME", "SUSPENDED", "READY", "MESSAGE"], ["provider/hook", "False", "False", *waiting]],
    ]  # fmt: skip


async def test_get_empty_namespace(cluster: Cluster, namespace: str, capsys: Capture) -> None:
    assert (
        await sluice(
            "get", "sources", "git", "-n", namespace, "--kubeconfig", str(cluster.kubeconfig)
        )
        == 0
    )
    assert capsys.readouterr() == ("", f"no GitRepository objects found in {namespace} namespace\n")


async def test_get_watch_prints_a_row_per_change(
    cluster: Cluster, kube: KubeClient, namespace: str
) -> None:
    await make_kustomization(kube, namespace, "apps")
    watcher = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sluice_cli", "get", "ks", "-n", namespace, "--watch",
        "--kubeconfig", str(cluster.kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert watcher.stdout is not None
    try:
        first = (await asyncio.wait_for(watcher.stdout.readline(), 20)).decode()
        assert first.split() == ["NAME", "REVISION", "SUSPENDED", "READY", "MESSAGE"]
        assert (await asyncio.wait_for(watcher.stdout.readline(), 20)).decode().split()[0] == "apps"
        await kube.merge_patch(KUSTOMIZATION, "apps", {"status": {
            "conditions": [condition("True", "ReconciliationSucceeded", "Applied revision: v2")],
            "lastAppliedRevision": "v2",
        }}, namespace=namespace, subresource="status")  # fmt: skip
        line = (await asyncio.wait_for(watcher.stdout.readline(), 20)).decode()
        assert line.split() == ["apps", "v2", "False", "True", "Applied", "revision:", "v2"]
        # A row of its own: no repeated header, no ANSI colour in a pipe.
        assert "\x1b" not in first + line
        # Ctrl-C is how a watch ends: quietly, exit 0.
        watcher.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(watcher.wait(), 20) == 0
        assert watcher.stderr is not None
        assert (await watcher.stderr.read()).decode() == ""
    finally:
        if watcher.returncode is None:
            watcher.kill()
            await watcher.wait()


# -- reconcile, suspend, resume with the controllers running -----------------------


async def test_reconcile_with_source_applies_the_new_commit(fleet: Fleet, capsys: Capture) -> None:
    repo = fleet.repo("fleet")
    repo.commit("one", files={"cm.yaml": config_map("settings", color="blue")})
    repo.push()
    await fleet.git_repository("fleet")
    await fleet.kustomization("apps", source="fleet")
    await fleet.observe.wait_ready(KUSTOMIZATION, "apps", timeout=30)

    repo.commit("two", files={"cm.yaml": config_map("settings", color="green")})
    repo.push()
    head = repo.head
    code = await sluice("reconcile", "ks", "apps", "--with-source", *fleet.flags())
    out, err = cli_output(capsys)
    ns = fleet.namespace
    assert code == 0, err
    assert out == (
        f"✔ GitRepository {ns}/fleet: fetched revision main@sha1:{head}\n"
        f"✔ Kustomization {ns}/apps: applied revision main@sha1:{head}\n"
    )
    assert err == (
        f"► annotating GitRepository {ns}/fleet\n"
        "◎ waiting for GitRepository reconciliation\n"
        f"► annotating Kustomization {ns}/apps\n"
        "◎ waiting for Kustomization reconciliation\n"
    )
    applied = await fleet.kube.get(CONFIG_MAP, "settings", ns)
    assert applied["data"] == {"color": "green"}


async def test_reconcile_reports_the_failure(fleet: Fleet, capsys: Capture) -> None:
    repo = fleet.repo("broken")
    repo.commit("one", files={"cm.yaml": config_map("settings")})
    repo.push()
    await fleet.git_repository("broken")
    await fleet.kustomization("apps", source="broken", path="./missing")

    code = await sluice("reconcile", "kustomization", "apps", *fleet.flags(), "--timeout", "30s")
    out, err = cli_output(capsys)
    assert code == 1
    assert out == ""
    assert err.splitlines()[-1] == (
        f"✗ sluice reconcile: Kustomization {fleet.namespace}/apps reconciliation failed: "
        "path './missing' not found in the artifact"
    )


async def test_suspend_then_resume_reconciles(fleet: Fleet, capsys: Capture) -> None:
    repo = fleet.repo("fleet")
    repo.commit("one", files={"cm.yaml": config_map("settings")})
    repo.push()
    await fleet.git_repository("fleet")
    await fleet.kustomization("apps", source="fleet")
    await fleet.observe.wait_ready(KUSTOMIZATION, "apps", timeout=30)
    ns = fleet.namespace

    assert await sluice("suspend", "ks", "apps", *fleet.flags()) == 0
    assert cli_output(capsys)[0] == f"✔ Kustomization {ns}/apps suspended\n"
    assert (await fleet.kube.get(KUSTOMIZATION, "apps", ns))["spec"]["suspend"] is True

    assert await sluice("reconcile", "ks", "apps", *fleet.flags()) == 1
    assert cli_output(capsys)[1] == (
        f"✗ sluice reconcile: Kustomization {ns}/apps is suspended: resume it first "
        "(sluice resume ...)\n"
    )

    assert await sluice("resume", "ks", "apps", *fleet.flags()) == 0
    out = cli_output(capsys)[0]
    assert out == (
        f"✔ Kustomization {ns}/apps resumed\n"
        f"✔ Kustomization {ns}/apps: applied revision main@sha1:{repo.head}\n"
    )
    assert "suspend" not in (await fleet.kube.get(KUSTOMIZATION, "apps", ns))["spec"]


async def test_suspend_missing_object(cluster: Cluster, namespace: str, capsys: Capture) -> None:
    code = await sluice(
        "suspend", "source", "git", "nope", "-n", namespace, "--kubeconfig", str(cluster.kubeconfig)
    )
    assert code == 1
    assert cli_output(capsys)[1] == f"✗ sluice suspend: GitRepository {namespace}/nope not found\n"


def test_reconcile_timeout_must_be_a_duration(capsys: Capture) -> None:
    assert (
        sluice_sync("reconcile", "ks", "apps", "--timeout", "soon", "--kubeconfig", "/nonexistent")
        == 2
    )
    assert capsys.readouterr().err == (
        "✗ sluice reconcile: --timeout 'soon' is not a duration such as 30s or 5m\n"
    )


def test_get_a_name_across_namespaces_is_refused(capsys: Capture) -> None:
    assert sluice_sync("get", "ks", "apps", "-A", "--kubeconfig", "/nonexistent") == 2
    assert capsys.readouterr().err == (
        "✗ sluice get: apps: a name needs a namespace; use -n instead of -A\n"
    )


async def test_a_terminal_gets_colour_a_pipe_does_not(
    cluster: Cluster, kube: KubeClient, namespace: str
) -> None:
    await make_kustomization(kube, namespace, "apps")
    argv = [sys.executable, "-m", "sluice_cli", "get", "ks", "-n", namespace,
            "--kubeconfig", str(cluster.kubeconfig)]  # fmt: skip

    def on_a_terminal() -> str:
        primary, secondary = pty.openpty()
        try:
            done = subprocess.run(argv, stdout=secondary, stderr=secondary, timeout=60, check=False)
            os.close(secondary)
            secondary = -1
            chunks = []
            while True:
                try:
                    chunk = os.read(primary, 65536)
                except OSError:  # EIO: the terminal's other end is closed
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            assert done.returncode == 0
            return b"".join(chunks).decode()
        finally:
            os.close(primary)
            if secondary >= 0:
                os.close(secondary)

    shown = await asyncio.to_thread(on_a_terminal)
    assert "\x1b[1m" in shown  # a bold header
    assert "apps" in shown
    piped = await asyncio.to_thread(
        subprocess.run, argv, capture_output=True, text=True, timeout=60, check=True
    )
    assert "\x1b" not in piped.stdout
    assert piped.stdout.splitlines()[0].split() == [
        "NAME",
        "REVISION",
        "SUSPENDED",
        "READY",
        "MESSAGE",
    ]
