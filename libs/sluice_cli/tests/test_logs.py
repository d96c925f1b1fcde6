"""`sluice logs`: filtering the controllers' real JSON lines, and the API path in a cluster."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
import structlog

from sluice_cli.controllers import POD
from sluice_cli.logs_command import Filter, format_line
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.observing import logging as observing

from .conftest import Capture, sluice


@pytest.fixture(scope="module")
def controller_lines() -> Iterator[list[str]]:
    """Lines as a controller writes them: its own logging setup, bound as its runner binds."""
    stream = io.StringIO()
    observing.configure(level="debug", encoding="json", stream=stream)
    try:
        log = structlog.get_logger("sluice_runtime.reconciling.running")
        log.info("started", service="kustomize-controller", controllers=["Kustomization"])
        for kind, namespace, name in (
            ("Kustomization", "flux-system", "apps"),
            ("Kustomization", "team-a", "apps"),
            ("GitRepository", "flux-system", "fleet"),
        ):
            with structlog.contextvars.bound_contextvars(
                kind=kind, namespace=namespace, name=name, reconcileID="0123456789ab"
            ):
                log.info("reconciled", revision="main@sha1:abc")
                log.error("reconcile failed, retrying", reason="BuildFailed", error="no such path")
        yield stream.getvalue().splitlines()
    finally:
        structlog.reset_defaults()


def test_the_lines_are_the_controllers_json(controller_lines: list[str]) -> None:
    assert len(controller_lines) == 7
    assert all(line.startswith("{") for line in controller_lines)


@pytest.mark.parametrize(
    ("wanted", "shown"),
    [
        pytest.param(
            Filter(namespace="flux-system"),
            [
                "info Kustomization/apps.flux-system - reconciled revision=main@sha1:abc",
                'error Kustomization/apps.flux-system - reconcile failed, retrying reason=BuildFailed error="no such path"',
                "info GitRepository/fleet.flux-system - reconciled revision=main@sha1:abc",
                'error GitRepository/fleet.flux-system - reconcile failed, retrying reason=BuildFailed error="no such path"',
            ],
            id="namespace",
        ),
        pytest.param(
            Filter(kind="kustomization", name="apps", namespace=None),
            [
                "info Kustomization/apps.flux-system - reconciled revision=main@sha1:abc",
                'error Kustomization/apps.flux-system - reconcile failed, retrying reason=BuildFailed error="no such path"',
                "info Kustomization/apps.team-a - reconciled revision=main@sha1:abc",
                'error Kustomization/apps.team-a - reconcile failed, retrying reason=BuildFailed error="no such path"',
            ],
            id="kind-and-name-all-namespaces",
        ),
        pytest.param(
            Filter(kind="GitRepository", namespace="flux-system", level="info"),
            ["info GitRepository/fleet.flux-system - reconciled revision=main@sha1:abc"],
            id="level",
        ),
        pytest.param(
            Filter(namespace=None),
            [
                'info controller - started service=kustomize-controller controllers=["Kustomization"]',
                "info Kustomization/apps.flux-system - reconciled revision=main@sha1:abc",
            ],
            id="everything-starts-with-the-controller-lines",
        ),
        pytest.param(Filter(name="nope", namespace=None), [], id="nothing"),
    ],
)
def test_format_and_filter(controller_lines: list[str], wanted: Filter, shown: list[str]) -> None:
    lines = [format_line(line, wanted) for line in controller_lines]
    kept = [line.split(" ", 1)[1] for line in lines if line is not None]  # drop the time
    assert kept[: len(shown)] == shown
    if wanted != Filter(namespace=None):
        assert len(kept) == len(shown)
    for line in lines:
        assert line is None or line[:4] == "2026" or line[:2] == "20"  # an ISO time first


@pytest.mark.parametrize(
    ("line", "wanted", "shown"),
    [
        pytest.param("Traceback (most recent call last):", Filter(namespace=None), "Traceback (most recent call last):", id="plain-line-kept"),
        pytest.param("Traceback (most recent call last):", Filter(kind="Kustomization", namespace=None), None, id="plain-line-filtered"),
        pytest.param("", Filter(namespace=None), None, id="blank"),
        pytest.param("[1, 2]", Filter(namespace=None), "[1, 2]", id="json-but-not-an-object"),
    ],
)  # fmt: skip
def test_lines_that_are_not_json(line: str, wanted: Filter, shown: str | None) -> None:
    assert format_line(line, wanted) == shown


async def test_no_controller_pods_says_where_the_logs_are(
    cluster: Cluster, namespace: str, capsys: Capture
) -> None:
    code = await sluice(
        "logs", "--flux-namespace", namespace, "--kubeconfig", str(cluster.kubeconfig)
    )
    assert code == 1
    assert capsys.readouterr().err == (
        f"✗ sluice logs: no controller pods in namespace {namespace} (labels app in "
        "(source-controller,kustomize-controller,notification-controller,gating-controller)); "
        "pass --flux-namespace if they run elsewhere, or read `sluice dev`'s output when they "
        "run as local processes\n"
    )


async def make_pod(kube: KubeClient, namespace: str, name: str, **spec: str) -> None:
    await kube.create(POD, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "kustomize-controller"}},
        "spec": {"containers": [{"name": "manager", "image": "ghcr.io/sluice-gitops/sluice:0.1.0"}], **spec},
    })  # fmt: skip


async def test_logs_are_read_from_the_pods_log_endpoint(
    cluster: Cluster, kube: KubeClient, namespace: str, capsys: Capture
) -> None:
    # No kubelet here: a pod not yet scheduled has an empty log, as the API
    # server answers; one bound to a node that does not exist cannot be read.
    await make_pod(kube, namespace, "kustomize-controller-1")
    flags = ("--flux-namespace", namespace, "--kubeconfig", str(cluster.kubeconfig))
    assert await sluice("logs", *flags) == 0
    assert capsys.readouterr() == ("", "")

    await make_pod(kube, namespace, "kustomize-controller-2", nodeName="gone")
    code = await sluice("logs", *flags)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.startswith(
        f"✗ sluice logs: cannot read the logs of pod {namespace}/kustomize-controller-2: "
    )
    assert "gone" in err
    assert err.count("\n") == 1
