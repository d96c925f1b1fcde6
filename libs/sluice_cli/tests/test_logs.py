"""`sluice logs`: filtering the controllers' real JSON lines, and the API path in a cluster."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import ssl
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import structlog
from aiohttp import web

from sluice_cli.controllers import POD
from sluice_cli.logs_command import Filter, format_line
from sluice_envtest.certificates import make_serving_pki
from sluice_envtest.controlplane import free_port
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import ResourceType
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
        "(source-controller,kustomize-controller,helm-controller,application-controller,"
        "resourceset-controller,gating-controller,notification-controller)); "
        "pass --flux-namespace if they run elsewhere, or read `sluice dev`'s output when they "
        "run as local processes\n"
    )


async def make_pod(
    kube: KubeClient, namespace: str, name: str, app: str = "kustomize-controller", **spec: str
) -> None:
    await kube.create(POD, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
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


async def test_logs_are_read_from_every_controller_not_only_the_first_four(
    cluster: Cluster, kube: KubeClient, namespace: str, capsys: Capture
) -> None:
    # The helm-controller's pod is one of the controllers': its log is read
    # (and cannot be, bound to a node that does not exist), not skipped.
    await make_pod(kube, namespace, "helm-controller-1", app="helm-controller", nodeName="gone")
    flags = ("--flux-namespace", namespace, "--kubeconfig", str(cluster.kubeconfig))
    code = await sluice("logs", "--kind", "HelmRelease", *flags)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.startswith(
        f"✗ sluice logs: cannot read the logs of pod {namespace}/helm-controller-1: "
    )


# -- --follow, through the API server to a kubelet on loopback -------------------------

NODE = ResourceType("", "v1", "nodes", "Node", namespaced=False)


def log_line(kind: str, name: str, msg: str) -> str:
    return json.dumps({"ts": "2026-11-24T10:00:00.000Z", "level": "info", "msg": msg,
                       "kind": kind, "namespace": "team", "name": name})  # fmt: skip


@contextlib.asynccontextmanager
async def kubelet(more: asyncio.Event) -> AsyncIterator[tuple[int, list[str]]]:
    """An HTTPS peer answering the API server's containerLogs requests as a
    kubelet does: the log so far, then, when following, what comes later.
    With no --kubelet-certificate-authority the API server does not verify it."""
    asked: list[str] = []
    finished = asyncio.Event()

    async def container_logs(request: web.Request) -> web.StreamResponse:
        asked.append(request.path_qs)
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(
            (log_line("GitRepository", "apps", "fetched") + "\n"
             + log_line("Kustomization", "apps", "reconciled") + "\n").encode()
        )  # fmt: skip
        if request.query.get("follow") == "true":
            await more.wait()
            await response.write((log_line("Kustomization", "apps", "later") + "\n").encode())
            await finished.wait()  # open until the test is done with it
        return response

    app = web.Application()
    app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", container_logs)
    runner = web.AppRunner(app)
    await runner.setup()
    pki = make_serving_pki()
    with tempfile.TemporaryDirectory() as directory:
        files = pki.write(Path(directory))
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(files["tls.crt"], files["tls.key"])
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=tls).start()
    try:
        yield port, asked
    finally:
        finished.set()  # else cleanup waits out aiohttp's shutdown timeout for the stream
        await runner.cleanup()


async def test_logs_follow_prints_the_lines_of_the_object_as_they_come(
    cluster: Cluster, kube: KubeClient, namespace: str
) -> None:
    more = asyncio.Event()
    node = f"kubelet-{namespace}"[:63]
    async with kubelet(more) as (port, asked):
        await kube.create(NODE, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
        try:
            await kube.merge_patch(NODE, node, {"status": {
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            }}, subresource="status")  # fmt: skip
            await make_pod(kube, namespace, "kustomize-controller-1", nodeName=node)
            follower = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "sluice_cli", "logs", "--follow",
                "--kind", "Kustomization", "--name", "apps", "-n", "team",
                "--flux-namespace", namespace, "--kubeconfig", str(cluster.kubeconfig),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
            assert follower.stdout is not None and follower.stderr is not None
            try:
                first = (await asyncio.wait_for(follower.stdout.readline(), 60)).decode()
                assert first.split(" ", 1)[1] == "info Kustomization/apps.team - reconciled\n"
                more.set()  # a line written after `sluice logs` started reading
                later = (await asyncio.wait_for(follower.stdout.readline(), 60)).decode()
                assert later.split(" ", 1)[1] == "info Kustomization/apps.team - later\n"
                follower.send_signal(signal.SIGINT)
                assert await asyncio.wait_for(follower.wait(), 30) == 0
                assert (await follower.stderr.read()).decode() == ""
            finally:
                if follower.returncode is None:
                    follower.kill()
                    await follower.wait()
            assert asked == [
                f"/containerLogs/{namespace}/kustomize-controller-1/manager?follow=true"
            ]
        finally:
            await kube.delete(NODE, node)
