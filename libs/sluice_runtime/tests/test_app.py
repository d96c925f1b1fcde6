"""A controller process: probes, shutdown, leadership, traces, and startup errors."""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from sluice_api import Gate
from sluice_envtest.controlplane import free_port
from sluice_envtest.harness import Observer
from sluice_envtest.measuring import cpu_seconds
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime import app
from sluice_runtime.app import size
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import LEASE, ResourceType
from sluice_runtime.observing import tracing

from .conftest import eventually


def start(
    kubeconfig: Path | str, *extra: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], int]:
    """A gating-controller process; the caller's OTEL_* settings are not passed on."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "gating_controller",
            "--kubeconfig", str(kubeconfig),
            "--health-addr", f"127.0.0.1:{port}",
            "--metrics-addr", f"127.0.0.1:{port}",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
            **(env or {}),
        },
    )  # fmt: skip
    return proc, port


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


# How much a gating-controller may spend starting, or stopping, before the test
# gives up: CPU-seconds of its own, not wall time, which a loaded machine
# stretches (measured: ready after 1.1-1.3 CPU-seconds, which took 34-38 s of
# wall time on 2 cores at a load average of 34, past the 30 s the test allowed).
# The wall cap only catches a process stuck without spending CPU.
CPU_BUDGET = 20.0
WALL_CAP = 300.0


def spent(proc: subprocess.Popen[str]) -> float:
    """CPU-seconds the process has spent so far (0 once it is gone)."""
    try:
        return cpu_seconds(proc.pid)
    except OSError:
        return 0.0


def within_budget(proc: subprocess.Popen[str], since_cpu: float, since_wall: float) -> bool:
    spent_here = spent(proc) - since_cpu
    return spent_here < CPU_BUDGET and time.monotonic() - since_wall < WALL_CAP


def wait_ready(proc: subprocess.Popen[str], port: int) -> None:
    """Until /readyz answers 200; fails when the process exits, or runs out of budget."""
    since_cpu, since_wall = spent(proc), time.monotonic()
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode}: {proc.stderr.read()}")
        assert within_budget(proc, since_cpu, since_wall), "not ready within budget"
        try:
            status, _ = get(f"http://127.0.0.1:{port}/readyz")
        except OSError:
            status = 0
        if status == 200:
            return
        time.sleep(0.2)


def finish(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """What the process wrote, once it has exited; killed if it runs out of budget."""
    since_cpu, since_wall = spent(proc), time.monotonic()
    while True:
        try:
            return proc.communicate(timeout=1)
        except subprocess.TimeoutExpired:
            if not within_budget(proc, since_cpu, since_wall):
                proc.kill()
                _, stderr = proc.communicate()
                raise AssertionError(f"did not exit within budget: {stderr}") from None


def stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGTERM, then what the process wrote; it must have stopped cleanly."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    stdout, stderr = finish(proc)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    return stdout, stderr


def test_process_serves_probes_and_metrics_and_stops_cleanly(cluster: Cluster) -> None:
    proc, port = start(cluster.kubeconfig)
    try:
        wait_ready(proc, port)
        assert get(f"http://127.0.0.1:{port}/healthz") == (200, "ok")
        code, metrics = get(f"http://127.0.0.1:{port}/metrics")
        assert code == 200 and "process_resident_memory_bytes" in metrics
    finally:
        stop(proc)


def test_metrics_on_their_own_address_leave_the_health_address_to_the_probes(
    cluster: Cluster,
) -> None:
    metrics_port = free_port()
    proc, port = start(cluster.kubeconfig, "--metrics-addr", f"127.0.0.1:{metrics_port}")
    try:
        wait_ready(proc, port)
        assert get(f"http://127.0.0.1:{port}/healthz") == (200, "ok")
        assert get(f"http://127.0.0.1:{port}/metrics")[0] == 404
        code, metrics = get(f"http://127.0.0.1:{metrics_port}/metrics")
        assert code == 200 and "python_asyncio_tasks" in metrics
        assert get(f"http://127.0.0.1:{metrics_port}/readyz")[0] == 404
    finally:
        stop(proc)


def run_to_exit(kubeconfig: Path | str, *extra: str) -> subprocess.CompletedProcess[str]:
    proc, _ = start(kubeconfig, *extra)
    stdout, stderr = finish(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def assert_one_clear_line(done: subprocess.CompletedProcess[str], *phrases: str) -> None:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("gating-controller: ")
    for phrase in phrases:
        assert phrase in lines[0], lines[0]


def test_a_garbage_kubeconfig_is_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("this: [is not: a kubeconfig\n")
    assert_one_clear_line(run_to_exit(bad), str(bad), "not usable")


def test_a_missing_kubeconfig_file_is_one_clear_line(tmp_path: Path) -> None:
    assert_one_clear_line(run_to_exit(tmp_path / "nope"), "does not exist")


def test_an_unreachable_api_server_is_one_clear_line(cluster: Cluster, tmp_path: Path) -> None:
    text = cluster.kubeconfig.read_text()
    server = next(
        line.split("server:")[1].strip() for line in text.splitlines() if "server:" in line
    )
    dead = tmp_path / "kubeconfig"
    dead.write_text(text.replace(server, f"https://127.0.0.1:{free_port()}"))
    assert_one_clear_line(run_to_exit(dead), "cannot reach API server")


@pytest.mark.timeout(120)
def test_missing_crds_are_one_clear_line(second_cluster: Cluster) -> None:
    assert_one_clear_line(
        run_to_exit(second_cluster.kubeconfig),
        "CRD not installed",
        "gates.gating.toolkit.fluxcd.io",
    )


GATE = ResourceType.of_model(Gate)
LEASE_NAME = "gating-controller-leader-election"


def gate(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": Gate.api_version_str(),
        "kind": "Gate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"interval": "10m", "default": "closed", "window": "1h"},
    }


def reconciled_here(port: int, namespace: str, name: str) -> bool:
    """Whether this process's own metrics count a reconcile of that Gate."""
    _, metrics = get(f"http://127.0.0.1:{port}/metrics")
    return (
        f'gotk_reconcile_duration_seconds_count{{kind="Gate",name="{name}",namespace="{namespace}"'
    ) in metrics


def json_lines(text: str) -> list[str]:
    # Libraries logging through the stdlib may add plain lines.
    return [line for line in text.splitlines() if line.startswith("{")]


async def lease_holder(kube: KubeClient, namespace: str) -> str:
    try:
        lease = await kube.get(LEASE, LEASE_NAME, namespace)
    except NotFound:
        return ""
    return str(lease["spec"].get("holderIdentity") or "")


@pytest.mark.timeout(180)
async def test_with_leader_election_only_the_leader_reconciles_until_it_stops(
    cluster: Cluster, kube: KubeClient, namespace: str
) -> None:
    flags = (
        "--enable-leader-election",
        "--leader-election-lease-duration", "3s",
        "--leader-election-renew-deadline", "2s",
        "--leader-election-retry-period", "200ms",
        "--watch-namespace", namespace,
    )  # fmt: skip
    env = {"RUNTIME_NAMESPACE": namespace}  # where the Lease lives
    first, first_port = start(cluster.kubeconfig, *flags, env=env)
    second: subprocess.Popen[str] | None = None
    try:
        await eventually(
            lambda: lease_holder(kube, namespace),
            timeout=30,
            message="first process holds the lease",
        )
        assert (await lease_holder(kube, namespace)).endswith(f"_{first.pid}")
        second, second_port = start(cluster.kubeconfig, *flags, env=env)
        # A follower serves its probes and fills its cache while it waits.
        await asyncio.to_thread(wait_ready, second, second_port)

        await kube.create(GATE, gate("watched", namespace))
        observe = Observer(kube, namespace)
        await observe.wait_ready(GATE, "watched")
        assert await asyncio.to_thread(reconciled_here, first_port, namespace, "watched")
        assert not await asyncio.to_thread(reconciled_here, second_port, namespace, "watched")
        assert (await lease_holder(kube, namespace)).endswith(f"_{first.pid}")

        _, first_log = await asyncio.to_thread(stop, first)
        assert "released leadership" in first_log
        takes_over = second.pid

        async def second_leads() -> bool:
            return (await lease_holder(kube, namespace)).endswith(f"_{takes_over}")

        await eventually(second_leads, timeout=15, message="second process takes over")
        await observe.poke(GATE, "watched", "2026-11-21T10:00:00Z")
        assert await asyncio.to_thread(reconciled_here, second_port, namespace, "watched")
        lease = await kube.get(LEASE, LEASE_NAME, namespace)
        assert lease["spec"]["leaseTransitions"] >= 1
        _, second_log = await asyncio.to_thread(stop, second)
        messages = [json.loads(line).get("msg") for line in json_lines(second_log)]
        assert messages.index("waiting for leadership") < messages.index("became leader")
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()


async def no_controllers(runtime: app.Runtime) -> None:
    """A controller process's wiring without reconcilers: leadership is what is tested."""


@pytest.mark.timeout(120)
async def test_a_leader_whose_event_loop_is_busy_keeps_its_lease(
    cluster: Cluster, kube: KubeClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reconcile work holding the event loop past the lease duration (as 200 sources
    fetched on a starved node did) must not cost the leader its Lease: the standby,
    a process of its own, must not take it over meanwhile."""
    flags = [
        "--enable-leader-election",
        "--leader-election-lease-duration", "2s",
        "--leader-election-renew-deadline", "1500ms",
        "--leader-election-retry-period", "200ms",
    ]  # fmt: skip
    monkeypatch.setenv("RUNTIME_NAMESPACE", namespace)
    options = app.parser(service="gating-controller", description="test", concurrency=1)
    parsed = options.parse_args(
        ["--kubeconfig", str(cluster.kubeconfig), "--health-addr", "127.0.0.1:0",
         "--metrics-addr", "127.0.0.1:0", "--watch-namespace", namespace, *flags]
    )  # fmt: skip
    ours = f"_{os.getpid()}"
    standby: subprocess.Popen[str] | None = None
    try:
        async with app.running(
            service="gating-controller", options=parsed, kinds=(Gate,), setup=no_controllers
        ):
            assert (await lease_holder(kube, namespace)).endswith(ours)
            transitions = (await kube.get(LEASE, LEASE_NAME, namespace))["spec"]["leaseTransitions"]
            standby, port = start(
                cluster.kubeconfig, *flags, "--watch-namespace", namespace,
                env={"RUNTIME_NAMESPACE": namespace},
            )  # fmt: skip
            await asyncio.to_thread(wait_ready, standby, port)
            # CPU-bound work on the loop (not a sleep: it holds the GIL, as a parse does)
            # for three lease durations, with no await in between.
            busy_until = time.monotonic() + 6.0
            while time.monotonic() < busy_until:
                pass
            lease = await kube.get(LEASE, LEASE_NAME, namespace)
            assert lease["spec"]["holderIdentity"].endswith(ours), "the standby took over"
            assert lease["spec"]["leaseTransitions"] == transitions
        # Released on the way out: the standby takes over at once.
        await eventually(
            lambda: lease_holder_is(kube, namespace, f"_{standby.pid}" if standby else "?"),
            timeout=15,
            message="the standby takes over after the release",
        )
    finally:
        if standby is not None:
            stop(standby)


async def lease_holder_is(kube: KubeClient, namespace: str, suffix: str) -> bool:
    return (await lease_holder(kube, namespace)).endswith(suffix)


@dataclass(frozen=True)
class ExportedSpan:
    name: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, Any]
    service: str


def console_spans(stdout: str) -> list[ExportedSpan]:
    """Spans as ConsoleSpanExporter prints them: indented JSON objects, one after another."""
    decoder, spans, position = json.JSONDecoder(), [], 0
    text = stdout.strip()
    while position < len(text):
        span, end = decoder.raw_decode(text, position)
        spans.append(
            ExportedSpan(
                name=span["name"],
                span_id=span["context"]["span_id"].removeprefix("0x"),
                parent_id=(span["parent_id"] or "").removeprefix("0x") or None,
                attributes=span["attributes"],
                service=span["resource"]["attributes"]["service.name"],
            )
        )
        position = end
        while position < len(text) and text[position].isspace():
            position += 1
    return spans


def otlp_spans(bodies: list[bytes]) -> list[ExportedSpan]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    def values(pairs: Any) -> dict[str, Any]:
        return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in pairs}

    spans = []
    for body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            service = values(resource_spans.resource.attributes)["service.name"]
            for scope in resource_spans.scope_spans:
                spans += [
                    ExportedSpan(
                        name=span.name,
                        span_id=f"{int.from_bytes(span.span_id):016x}",
                        parent_id=(
                            f"{int.from_bytes(span.parent_span_id):016x}"
                            if span.parent_span_id
                            else None
                        ),
                        attributes=values(span.attributes),
                        service=service,
                    )
                    for span in scope.spans
                ]
    return spans


async def reconcile_one_gate(
    cluster: Cluster, kube: KubeClient, namespace: str, env: dict[str, str]
) -> str:
    """Run a gating-controller with `env` until it has reconciled a Gate; its stdout."""
    proc, port = start(cluster.kubeconfig, "--watch-namespace", namespace, env=env)
    try:
        await asyncio.to_thread(wait_ready, proc, port)
        await kube.create(GATE, gate("traced", namespace))
        await Observer(kube, namespace).wait_ready(GATE, "traced")
    finally:
        # Spans are batched; stopping flushes them.
        stdout, _ = await asyncio.to_thread(stop, proc)
    return stdout


def test_tracing_is_off_without_otel_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    assert tracing.configure("gating-controller") is False
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert tracing.configure("gating-controller") is False


async def test_a_process_without_otel_settings_exports_no_spans(
    cluster: Cluster, kube: KubeClient, namespace: str
) -> None:
    stdout = await reconcile_one_gate(cluster, kube, namespace, env={})
    assert stdout == ""


def assert_a_span_per_reconcile(spans: list[ExportedSpan], namespace: str) -> None:
    roots = [
        s for s in spans
        if s.name == "reconcile Gate" and s.attributes.get("sluice.object.name") == "traced"
    ]  # fmt: skip
    assert roots, [s.name for s in spans]
    root = roots[0]
    assert root.parent_id is None
    assert root.service == "gating-controller"
    assert root.attributes["k8s.namespace.name"] == namespace
    assert root.attributes["sluice.reconcile.result"] == "success"
    assert len(root.attributes["sluice.reconcile.id"]) == 12
    assert len({s.attributes["sluice.reconcile.id"] for s in roots}) == len(roots)
    steps = [s.name for s in spans if s.parent_id == root.span_id]
    assert steps == ["reconcile_gate"]


async def test_otel_traces_exporter_console_prints_a_span_per_reconcile(
    cluster: Cluster, kube: KubeClient, namespace: str
) -> None:
    stdout = await reconcile_one_gate(
        cluster, kube, namespace, env={"OTEL_TRACES_EXPORTER": "console"}
    )
    assert_a_span_per_reconcile(console_spans(stdout), namespace)


async def test_an_otlp_endpoint_receives_a_span_per_reconcile(
    cluster: Cluster, kube: KubeClient, namespace: str
) -> None:
    bodies: list[bytes] = []

    async def collect(request: web.Request) -> web.Response:
        bodies.append(await request.read())
        return web.Response(content_type="application/x-protobuf", body=b"")

    collector = web.Application()
    collector.router.add_post("/v1/traces", collect)
    runner = web.AppRunner(collector)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        await reconcile_one_gate(
            cluster,
            kube,
            namespace,
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"},
        )
    finally:
        await runner.cleanup()
    assert_a_span_per_reconcile(otlp_spans(bodies), namespace)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("65536", 65536, id="bytes"),
        pytest.param("64Mi", 64 << 20, id="mebibytes"),
        pytest.param("1Gi", 1 << 30, id="gibibytes"),
        pytest.param("10K", 10_000, id="kilobytes"),
    ],
)
def test_size_flags_read_kubernetes_quantities(text: str, expected: int) -> None:
    assert size(text) == expected


@pytest.mark.parametrize("text", ["", "Mi", "1.5Gi", "-1", "1Ti", "64MiB"])
def test_size_flags_refuse_what_is_not_a_size(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not a size"):
        size(text)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param([], False, id="absent"),
        pytest.param(["--no-cross-namespace-refs"], True, id="bare"),
        pytest.param(["--no-cross-namespace-refs=true"], True, id="go-style-true"),
        pytest.param(["--no-cross-namespace-refs=false"], False, id="go-style-false"),
        pytest.param(
            ["--no-cross-namespace-refs=true", "--no-cross-namespace-refs=false"],
            False,
            id="last-wins-so-a-patch-can-turn-it-off",
        ),
    ],
)
def test_switches_take_go_style_values(argv: list[str], expected: bool) -> None:
    parser = app.parser(service="test", description="test", concurrency=1)
    app.switch(parser, "--no-cross-namespace-refs", help="")
    assert parser.parse_args(argv).no_cross_namespace_refs is expected


def test_a_switch_refuses_other_values() -> None:
    parser = app.parser(service="test", description="test", concurrency=1)
    app.switch(parser, "--no-cross-namespace-refs", help="")
    with pytest.raises(SystemExit):
        parser.parse_args(["--no-cross-namespace-refs=maybe"])


def test_version_prints_the_distributions_version(capsys: pytest.CaptureFixture[str]) -> None:
    parser = app.parser(service="source-controller", description="test", concurrency=1)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"source-controller {importlib.metadata.version('sluice')}\n"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(
            [],
            {
                "requeue_dependency": 30.0,
                # The lockdown is the binaries' default (Flux's is open).
                "no_cross_namespace_refs": True,
                "default_service_account": "default",
                "insecure_kubeconfig_exec": False,
                "insecure_kubeconfig_tls": False,
            },
            id="locked-down-defaults",
        ),
        pytest.param(
            ["--no-cross-namespace-refs=false", "--default-service-account="],
            {"no_cross_namespace_refs": False, "default_service_account": ""},
            id="opened-explicitly",
        ),
        pytest.param(
            [
                "--requeue-dependency=1m",
                "--no-cross-namespace-refs=true",
                "--default-service-account=tenant",
                "--insecure-kubeconfig-exec",
                "--insecure-kubeconfig-tls=true",
            ],
            {
                "requeue_dependency": 60.0,
                "no_cross_namespace_refs": True,
                "default_service_account": "tenant",
                "insecure_kubeconfig_exec": True,
                "insecure_kubeconfig_tls": True,
            },
            id="all-set",
        ),
    ],
)
def test_tenant_arguments_are_the_flags_both_appliers_take(
    argv: list[str], expected: dict[str, Any]
) -> None:
    parser = app.parser(service="test", description="test", concurrency=1)
    app.add_tenant_arguments(parser, kind="HelmRelease", remote="remote releases")
    options = vars(parser.parse_args(argv))
    assert {key: options[key] for key in expected} == expected


@pytest.mark.parametrize(
    ("doc", "shown"),
    [
        pytest.param(
            "gating-controller: opens Gates.\n\nWiring only.",
            "gating-controller: opens Gates.",
            id="first-line",
        ),
        pytest.param(None, "test-controller", id="no-docstring-names-the-service"),
    ],
)
def test_an_entry_point_describes_the_service_and_takes_its_flags(
    doc: str | None,
    shown: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def setup(runtime: app.Runtime) -> None:
        raise AssertionError("--help must not start the service")

    main = app.entry_point(
        service="test-controller",
        doc=doc,
        kinds=(Gate,),
        setup=setup,
        add_arguments=lambda parser: app.add_tenant_arguments(
            parser, kind="Kustomization", remote="remote apply"
        ),
    )
    monkeypatch.setattr(sys, "argv", ["test-controller", "--help"])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert shown in help_text
    assert "when a Kustomization names none" in help_text
