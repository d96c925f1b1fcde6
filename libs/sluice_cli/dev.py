"""`sluice dev`: the whole of Sluice on this machine, in one command.

With no kubeconfig it starts the embedded control plane (etcd and a
kube-apiserver on loopback, built once on first use), installs the CRDs,
then starts every controller (`sluice_cli.controllers`) as a process of its
own, as they run in a cluster, waits until each answers /readyz, and prints
how to use kubectl against it. Ctrl-C stops everything it started, controllers first.
With `--kubeconfig` it runs the controllers against that cluster instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

from sluice_cli.controllers import CONTROLLERS
from sluice_cli.crds_command import all_crds
from sluice_envtest.controlplane import ControlPlane, ControlPlaneError, die_with_parent, free_port
from sluice_envtest.debian import BuildError
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import Conflict, KubeError, one_line
from sluice_runtime.kube.installing import install_crds
from sluice_runtime.kube.resources import NAMESPACE

RUNTIME_NAMESPACE = "flux-system"


@dataclass
class ControllerProcess:
    name: str
    module: str
    health_port: int = field(default_factory=free_port)
    extra: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    log_file: IO[bytes] | None = None

    @property
    def health_addr(self) -> str:
        return f"127.0.0.1:{self.health_port}"


@dataclass(frozen=True)
class Endpoints:
    """Where the controllers listen, on loopback, for people and tools to use."""

    events: str
    receiver: str
    storage: str

    @classmethod
    def pick(cls) -> Endpoints:
        return cls(*(f"127.0.0.1:{free_port()}" for _ in range(3)))


def events_token_file(workdir: Path) -> Path:
    """A fresh random token only this user can read: the controllers run with an
    admin kubeconfig, not service accounts, so they prove to the event hub that
    they are Sluice's with this shared token instead."""
    path = workdir / "events-token"
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(secrets.token_urlsafe(32))
    return path


def controllers(
    workdir: Path, endpoints: Endpoints, *, open_tenancy: bool = False
) -> list[ControllerProcess]:
    """The controllers to start; `open_tenancy` turns their multi-tenancy lockdown off
    (the embedded control plane has one user: objects are applied as the controllers, as
    on a single-tenant cluster); on a cluster of `--kubeconfig` the binaries' defaults,
    the lockdown, hold."""
    token = ["--events-token-file", str(events_token_file(workdir))]
    events = ["--events-addr", f"http://{endpoints.events}", *token]
    source = [
        "--storage-path", str(workdir / "storage"),
        "--storage-addr", endpoints.storage,
        "--storage-adv-addr", endpoints.storage,
    ]  # fmt: skip
    notification = [
        "--events-addr", endpoints.events, *token, "--receiver-addr", endpoints.receiver
    ]  # fmt: skip
    # Every controller posts events to the hub; these two also listen for people.
    extra = {"source-controller": [*events, *source], "notification-controller": notification}
    return [
        ControllerProcess(
            c.name,
            c.module,
            extra=[*extra.get(c.name, events), *(c.open_tenancy if open_tenancy else ())],
        )
        for c in CONTROLLERS
    ]


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "dev", help="run Sluice locally (embedded control plane + every controller)"
    )
    parser.add_argument("--kubeconfig", help="use this cluster instead of the embedded one")
    parser.add_argument("--workdir", type=Path, help="state and logs (default: a temp dir)")
    parser.add_argument("--log-level", default="info")
    parser.add_argument(
        "--exit-when-ready",
        action="store_true",
        help="stop everything once all controllers are ready (for scripts and CI)",
    )
    parser.set_defaults(run=run)


class _Stop(Exception):
    pass


def _raise_stop(signum: int, _frame: FrameType | None) -> None:
    raise _Stop


def say(message: str) -> None:
    print(f"sluice dev: {message}", flush=True)


def run(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="sluice-dev-"))
    workdir.mkdir(parents=True, exist_ok=True)
    plane: ControlPlane | None = None
    endpoints = Endpoints.pick()
    procs = controllers(workdir, endpoints, open_tenancy=not args.kubeconfig)
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        if args.kubeconfig:
            kubeconfig = str(Path(args.kubeconfig).resolve())
        else:
            say("starting the embedded control plane (etcd + kube-apiserver)")
            plane = ControlPlane(workdir=workdir / "controlplane")
            plane.start()
            kubeconfig = str(plane.kubeconfig)
        say("installing CRDs")
        names = asyncio.run(_prepare_cluster(kubeconfig))
        say(f"{len(names)} CRDs established")
        for controller in procs:
            _start(controller, kubeconfig=kubeconfig, workdir=workdir, log_level=args.log_level)
        _wait_ready(procs)
        _print_summary(kubeconfig, procs, plane, endpoints)
        if args.exit_when_ready:
            return 0
        while True:
            for controller in procs:
                assert controller.proc is not None
                if controller.proc.poll() is not None:
                    say(f"{controller.name} exited with code {controller.proc.returncode}:")
                    print(_tail(controller.log_path), file=sys.stderr)
                    return 1
            time.sleep(0.5)
    except (KeyboardInterrupt, _Stop):
        print()
        say("stopping")
        return 0
    except (BuildError, ControlPlaneError, KubeError, OSError, _NotReady) as error:
        print(f"sluice dev: {one_line(error)}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        # Ignore a second Ctrl-C while tearing down, so nothing is left behind.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _stop_all(procs)
        if plane is not None:
            plane.stop()
        signal.signal(signal.SIGINT, signal.default_int_handler)


async def _prepare_cluster(kubeconfig: str) -> list[str]:
    client = await KubeClient.connect(kubeconfig=kubeconfig)
    try:
        names = await install_crds(client, all_crds())
        with contextlib.suppress(Conflict):
            await client.create(
                NAMESPACE,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RUNTIME_NAMESPACE}},
            )
        return names
    finally:
        await client.close()


def _start(
    controller: ControllerProcess, *, kubeconfig: str, workdir: Path, log_level: str
) -> None:
    logs = workdir / "logs"
    logs.mkdir(exist_ok=True)
    controller.log_path = logs / f"{controller.name}.log"
    controller.log_file = open(controller.log_path, "ab")  # noqa: SIM115 - closed in _stop_all
    argv = [
        sys.executable,
        "-m",
        controller.module,
        "--kubeconfig", kubeconfig,
        "--health-addr", controller.health_addr,
        "--metrics-addr", controller.health_addr,
        "--log-level", log_level,
        *controller.extra,
    ]  # fmt: skip
    env = {**os.environ, "RUNTIME_NAMESPACE": RUNTIME_NAMESPACE}
    controller.proc = subprocess.Popen(
        argv,
        stdout=controller.log_file,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        # Our own process group, so Ctrl-C reaches only us and we stop the
        # controllers in order; and they die with us if we are killed.
        start_new_session=True,
        preexec_fn=die_with_parent,
    )


class _NotReady(Exception):
    pass


def _wait_ready(procs: list[ControllerProcess], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    pending = {p.name: p for p in procs}
    while pending:
        for name, controller in list(pending.items()):
            assert controller.proc is not None
            if controller.proc.poll() is not None:
                raise _NotReady(
                    f"{name} exited with code {controller.proc.returncode}:\n"
                    f"{_tail(controller.log_path)}"
                )
            try:
                with urllib.request.urlopen(
                    f"http://{controller.health_addr}/readyz", timeout=2
                ) as answer:
                    if answer.status == 200:
                        say(f"{name} ready (pid {controller.proc.pid})")
                        del pending[name]
            except (urllib.error.URLError, OSError):
                pass
        if pending:
            if time.monotonic() > deadline:
                raise _NotReady(f"not ready after {timeout:.0f}s: {', '.join(pending)}")
            time.sleep(0.25)


def _stop_all(procs: list[ControllerProcess], grace: float = 15.0) -> None:
    for controller in procs:
        if controller.proc is not None and controller.proc.poll() is None:
            controller.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for controller in procs:
        if controller.proc is None:
            continue
        try:
            controller.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            controller.proc.kill()
            controller.proc.wait()
        if controller.log_file is not None:
            controller.log_file.close()


def _tail(path: Path | None, lines: int = 15) -> str:
    if path is None or not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _print_summary(
    kubeconfig: str,
    procs: list[ControllerProcess],
    plane: ControlPlane | None,
    endpoints: Endpoints,
) -> None:
    where = f"embedded control plane at {plane.server}" if plane else "your cluster"
    print()
    print(f"Sluice is running on {where}.")
    print(f"  export KUBECONFIG={kubeconfig}")
    print("  kubectl get gitrepositories,kustomizations,gates,receivers -A")
    print("  sluice gate list -A")
    print()
    for controller in procs:
        assert controller.proc is not None
        print(
            f"  {controller.name:<24} pid {controller.proc.pid:<7} "
            f"http://{controller.health_addr}/readyz  log {controller.log_path}"
        )
    print()
    print(f"  webhook receiver   http://{endpoints.receiver}/hook/<status.webhookPath>")
    print(f"  event hub          http://{endpoints.events}/")
    print(f"  artifacts          http://{endpoints.storage}/<status.artifact.path>")
    print()
    print("Press Ctrl-C to stop everything.", flush=True)
