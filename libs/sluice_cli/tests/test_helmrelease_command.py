"""`sluice build helmrelease` and `diff helmrelease` against the real API server and helm."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path
from typing import Any

import yaml

from sluice_cli.kinds import HELM_RELEASE
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.helming import helm_binary
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import SECRET

from .conftest import CONFIG_MAP, Capture, cli_output, sluice

CHART = {
    "Chart.yaml": "apiVersion: v2\nname: web\nversion: 1.0.0\n",
    "values.yaml": "color: blue\nreplicas: 1\npassword: hunter2\nextra: false\n",
    "templates/cm.yaml": (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-settings\n"
        "data:\n  color: {{ .Values.color | quote }}\n  replicas: {{ .Values.replicas | quote }}\n"
    ),
    "templates/secret.yaml": (
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {{ .Release.Name }}-creds\n"
        "stringData:\n  password: {{ .Values.password | quote }}\n"
    ),
    "templates/extra.yaml": (
        "{{- if .Values.extra }}\napiVersion: v1\nkind: ConfigMap\nmetadata:\n"
        "  name: {{ .Release.Name }}-extra\ndata: {}\n{{- end }}\n"
    ),
    "templates/hook.yaml": (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-hook\n"
        "  annotations:\n    helm.sh/hook: pre-install\ndata: {}\n"
    ),
    "templates/tests/test.yaml": (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {{ .Release.Name }}-test\n"
        "  annotations:\n    helm.sh/hook: test\nspec:\n  containers: [{name: t, image: busybox}]\n"
    ),
}


def chart(directory: Path, **overrides: str) -> Path:
    for name, text in {**CHART, **overrides}.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)
    return directory


def helmrelease(namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "interval": "10m",
            "chart": {
                "spec": {"chart": "web", "sourceRef": {"kind": "HelmRepository", "name": "r"}}
            },
            **spec,
        },
    }


async def helm_install(cluster: Cluster, namespace: str, chart_dir: Path, name: str) -> None:
    """A release installed by the helm binary itself, as the helm-controller runs it."""
    home = chart_dir.parent / "helm-home"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "KUBECONFIG": str(cluster.kubeconfig),
    }
    proc = await asyncio.create_subprocess_exec(
        str(helm_binary()), "install", name, str(chart_dir), "--namespace", namespace,
        "--skip-crds", "--no-hooks",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()


def flags(cluster: Cluster, namespace: str) -> tuple[str, ...]:
    return ("-n", namespace, "--kubeconfig", str(cluster.kubeconfig))


async def test_build_renders_with_the_controllers_values(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path, capsys: Capture
) -> None:
    await kube.create(CONFIG_MAP, {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "web-values", "namespace": namespace},
        "data": {"values.yaml": "color: green\nreplicas: 2\n"},
    })  # fmt: skip
    await kube.create(HELM_RELEASE, helmrelease(
        namespace,
        valuesFrom=[{"kind": "ConfigMap", "name": "web-values"}],
        values={"replicas": 3},
        commonMetadata={"labels": {"team": "web"}},
    ))  # fmt: skip
    local = chart(tmp_path / "web")
    override = tmp_path / "override.yaml"
    override.write_text("password: s3cret\n")

    code = await sluice("build", "helmrelease", "web", "--chart", str(local),
                        "--values", str(override), *flags(cluster, namespace))  # fmt: skip
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    objects = {o["metadata"]["name"]: o for o in yaml.safe_load_all(out)}
    # valuesFrom, then values over it, then --values; the release named as Flux names it.
    assert objects["web-settings"]["data"] == {"color": "green", "replicas": "3"}
    assert objects["web-creds"]["stringData"] == {"password": "s3cret"}
    # commonMetadata by the controller's own post-renderer; hooks shown, tests not.
    assert objects["web-settings"]["metadata"]["labels"] == {"team": "web"}
    assert "web-hook" in objects and "web-test" not in objects


async def test_build_offline_from_a_file(tmp_path: Path, capsys: Capture) -> None:
    local = chart(tmp_path / "web")
    file = tmp_path / "hr.yaml"
    file.write_text(yaml.safe_dump(helmrelease(
        "apps", targetNamespace="prod", values={"color": "red"},
        valuesFrom=[{"kind": "Secret", "name": "unread"}],
    )))  # fmt: skip

    code = await sluice("build", "hr", "web", "-n", "apps", "--chart", str(local),
                        "--helmrelease-file", str(file), "--dry-run")  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0
    assert err == "note: 1 valuesFrom reference(s) not read (--dry-run)\n"
    objects = {o["metadata"]["name"]: o for o in yaml.safe_load_all(out)}
    # The release of a targetNamespace'd HelmRelease is `<targetNamespace>-<name>`.
    assert objects["prod-web-settings"]["data"]["color"] == "red"


async def test_build_without_a_chart_offline_is_refused(tmp_path: Path, capsys: Capture) -> None:
    assert await sluice("build", "hr", "web", "--dry-run") == 2
    _, err = cli_output(capsys)
    assert err == "✗ sluice build: --dry-run needs --chart: the chart's artifact is not read\n"


async def test_diff_against_what_helm_installed(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path, capsys: Capture
) -> None:
    installed = chart(tmp_path / "installed")
    await helm_install(cluster, namespace, installed, "web")
    await kube.create(HELM_RELEASE, helmrelease(namespace))
    local = chart(tmp_path / "web")

    # The same chart and values as the release: nothing to show (hooks are not compared).
    assert await sluice("diff", "hr", "web", "--chart", str(local), *flags(cluster, namespace)) == 0
    assert cli_output(capsys) == ("", "")

    changed = tmp_path / "changed.yaml"
    changed.write_text("color: green\npassword: correct-horse\nextra: true\n")
    code = await sluice("diff", "helmrelease", "web", "--chart", str(local),
                        "--values", str(changed), *flags(cluster, namespace))  # fmt: skip
    out, err = cli_output(capsys)
    assert (code, err) == (1, "")
    ns = namespace
    assert f"► ConfigMap/{ns}/web-extra created\n" in out
    assert f"► ConfigMap/{ns}/web-settings drifted\n" in out
    assert "-  color: blue\n+  color: green\n" in out
    assert f"► Secret/{ns}/web-creds drifted\n" in out
    assert "-  password: '*** (before)'\n+  password: '*** (after)'\n" in out
    for secret in ("hunter2", "correct-horse"):
        assert secret not in out
        assert base64.b64encode(secret.encode()).decode() not in out
    # A diff changes nothing.
    live = await kube.get(CONFIG_MAP, "web-settings", ns)
    assert live["data"]["color"] == "blue"


async def test_diff_lists_what_the_new_manifest_drops_as_deleted(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path, capsys: Capture
) -> None:
    installed = chart(
        tmp_path / "installed",
        **{"values.yaml": "color: blue\nreplicas: 1\npassword: hunter2\nextra: true\n"},
    )
    await helm_install(cluster, namespace, installed, "web")
    await kube.create(HELM_RELEASE, helmrelease(namespace))
    local = chart(tmp_path / "web")  # extra: false

    code = await sluice("diff", "hr", "web", "--chart", str(local), *flags(cluster, namespace))
    out, _ = cli_output(capsys)
    assert code == 1
    assert out == f"► ConfigMap/{namespace}/web-extra deleted\n"


async def test_diff_of_a_release_whose_storage_is_a_gzip_bomb_fails_naming_it(
    cluster: Cluster, kube: KubeClient, namespace: str, tmp_path: Path, capsys: Capture
) -> None:
    import gzip

    bomb = gzip.compress(b"{" + b" " * (32 << 20) + b"}", compresslevel=9)
    await kube.create(SECRET, {
        "apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
        "metadata": {"name": "sh.helm.release.v1.web.v1", "namespace": namespace,
                     "labels": {"owner": "helm", "name": "web", "version": "1"}},
        "data": {"release": base64.b64encode(base64.b64encode(bomb)).decode()},
    })  # fmt: skip
    await kube.create(HELM_RELEASE, helmrelease(namespace))
    local = chart(tmp_path / "web")

    code = await sluice("diff", "hr", "web", "--chart", str(local), *flags(cluster, namespace))
    _, err = cli_output(capsys)
    assert code == 2
    assert err == (
        "✗ sluice diff: release Secret 'sh.helm.release.v1.web.v1' inflates to more than 16 MiB\n"
    )
