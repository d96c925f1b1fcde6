"""A real etcd + kube-apiserver pair on loopback, the envtest way.

Tests and `sluice dev` need a real API server (watches, server-side apply,
RBAC, status subresources) and these machines cannot run containers. Both
processes run as children of the caller, on free loopback ports, with state
in one working directory; they are killed when the caller dies, so an
interrupted test run leaves nothing listening.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import os
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

import yaml

from sluice_envtest.building import Binaries, ensure_binaries
from sluice_envtest.certificates import make_pki
from sluice_envtest.lifecycle import Startable


class ControlPlaneError(RuntimeError):
    """The control plane could not start; the message carries the log tail."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def die_with_parent() -> None:
    # PR_SET_PDEATHSIG: the kernel sends SIGTERM to this child when the
    # parent exits, however it exits (even SIGKILL).
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


class ControlPlane(Startable):
    """Start with `start()` or as a context manager; `kubeconfig` is then usable."""

    def __init__(
        self,
        *,
        workdir: Path | None = None,
        binaries: Binaries | None = None,
        port: int | None = None,
        audit: bool = False,
    ) -> None:
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="sluice-controlplane-"))
        self._binaries = binaries
        self.port = port or free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.kubeconfig = self.workdir / "kubeconfig"
        self._procs: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = []
        # Each part's command line, so it can be stopped and started again on
        # the same ports and data directory (fault-injection tests).
        self._argv: dict[str, list[str]] = {}
        self._client_files: tuple[Path, Path, Path] | None = None
        self.audit_log: Path | None = self.workdir / "audit.log" if audit else None
        """With `audit`: every request the API server answered, one JSON line each
        (the Metadata level: who, verb, URI, timestamps), to count a benchmark's
        requests at the server, helm's own included."""

    def start(self, *, timeout: float = 90.0) -> None:
        binaries = self._binaries or ensure_binaries()
        self.workdir.mkdir(parents=True, exist_ok=True)
        pki = make_pki()
        certs_dir = self.workdir / "pki"
        certs_dir.mkdir(exist_ok=True)
        files = pki.write(certs_dir)
        etcd_port, etcd_peer = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self._spawn(
            "etcd",
            [
                str(binaries.etcd),
                "--data-dir", str(self.workdir / "etcd"),
                "--listen-client-urls", etcd_url,
                "--advertise-client-urls", etcd_url,
                "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_peer}",
                "--initial-cluster", f"default=http://127.0.0.1:{etcd_peer}",
                # Tests do not need durability; fsync dominates etcd latency.
                "--unsafe-no-fsync",
                "--log-level", "warn",
            ],
        )  # fmt: skip
        self._spawn(
            "kube-apiserver",
            [
                str(binaries.kube_apiserver),
                "--etcd-servers", etcd_url,
                "--bind-address", "127.0.0.1",
                "--advertise-address", "127.0.0.1",
                "--secure-port", str(self.port),
                "--insecure-port", "0",
                "--tls-cert-file", str(files["serving.crt"]),
                "--tls-private-key-file", str(files["serving.key"]),
                "--client-ca-file", str(files["ca.crt"]),
                "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
                "--service-account-key-file", str(files["sa.pub"]),
                "--service-account-signing-key-file", str(files["sa.key"]),
                # Room for the Services of a large test or benchmark (MTTP makes 1000).
                "--service-cluster-ip-range", "10.96.0.0/12",
                "--authorization-mode", "RBAC",
                # No controller-manager creates token secrets here.
                "--disable-admission-plugins", "ServiceAccount",
                "--allow-privileged",
                # Without this the apiserver loops reconciling an endpoint
                # for 127.0.0.1, which Kubernetes refuses as loopback.
                "--endpoint-reconciler-type", "none",
                "--v", "0",
                *self._audit_flags(),
            ],
        )  # fmt: skip
        self._write_kubeconfig(pki.ca.cert, pki.admin.cert, pki.admin.key)
        self._client_files = (files["ca.crt"], files["admin.crt"], files["admin.key"])
        self._wait_ready(*self._client_files, timeout)

    PARTS = ("etcd", "kube-apiserver")

    def _audit_flags(self) -> list[str]:
        if self.audit_log is None:
            return []
        policy = self.workdir / "audit-policy.yaml"
        # One event per request, when it is answered: no request bodies, and
        # watches counted once (at their end), not at every stage.
        policy.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "audit.k8s.io/v1",
                    "kind": "Policy",
                    "omitStages": ["RequestReceived", "ResponseStarted"],
                    "rules": [{"level": "Metadata"}],
                }
            )
        )
        return [
            "--audit-policy-file", str(policy),
            "--audit-log-path", str(self.audit_log),
            "--audit-log-format", "json",
            "--audit-log-maxsize", "0",
        ]  # fmt: skip

    def stop_part(self, name: str, *, kill: bool = False, grace: float = 10.0) -> None:
        """Stop `etcd` or `kube-apiserver` (SIGKILL with `kill`); the other part keeps running."""
        for index, (part, proc, log) in enumerate(self._procs):
            if part != name:
                continue
            if kill:
                proc.kill()
            else:
                proc.terminate()
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
            del self._procs[index]
            return
        raise ValueError(f"{name} is not running (parts: {', '.join(self.PARTS)})")

    def start_part(self, name: str, *, timeout: float = 90.0) -> None:
        """Start a stopped part again with the same flags, ports and data; wait for /readyz."""
        if any(part == name for part, _, _ in self._procs):
            raise ValueError(f"{name} is already running")
        if name not in self._argv or self._client_files is None:
            raise ValueError(f"{name} was never started")
        self._spawn(name, self._argv[name])
        self._wait_ready(*self._client_files, timeout)

    def restart_part(self, name: str, *, kill: bool = False, down: float = 0.0) -> None:
        """Stop one part, leave it down `down` seconds, start it again and wait until ready."""
        self.stop_part(name, kill=kill)
        time.sleep(down)
        self.start_part(name)

    def _spawn(self, name: str, argv: list[str]) -> None:
        self._argv[name] = argv
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
            start_new_session=True,
        )
        self._procs.append((name, proc, log))

    def _write_kubeconfig(self, ca: bytes, cert: bytes, key: bytes) -> None:
        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "sluice",
                    "cluster": {"server": self.server, "certificate-authority-data": b64(ca)},
                }
            ],
            "users": [
                {
                    "name": "sluice-admin",
                    "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)},
                }
            ],
            "contexts": [
                {
                    "name": "sluice",
                    "context": {"cluster": "sluice", "user": "sluice-admin"},
                }
            ],
            "current-context": "sluice",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))
        self.kubeconfig.chmod(0o600)

    def _wait_ready(self, ca: Path, cert: Path, key: Path, timeout: float) -> None:
        context = ssl.create_default_context(cafile=str(ca))
        context.load_cert_chain(str(cert), str(key))
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            for name, proc, _log in self._procs:
                if proc.poll() is not None:
                    raise ControlPlaneError(
                        f"{name} exited with code {proc.returncode}:\n{self.log_tail(name)}"
                    )
            try:
                with urllib.request.urlopen(  # noqa: S310 - our own https URL
                    f"{self.server}/readyz", context=context, timeout=2
                ) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError) as error:
                last = str(error)
            time.sleep(0.25)
        self.stop()
        raise ControlPlaneError(
            f"kube-apiserver not ready after {timeout:.0f}s ({last}):\n"
            f"{self.log_tail('kube-apiserver')}"
        )

    def pid(self, name: str) -> int:
        """The process id of the running part `name` ("etcd", "kube-apiserver"),
        to measure what a benchmark costs it."""
        for part, proc, _ in self._procs:
            if part == name:
                return proc.pid
        raise KeyError(f"{name} is not running")

    def log_tail(self, name: str, lines: int = 20) -> str:
        path = self.workdir / f"{name}.log"
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, *, grace: float = 10.0) -> None:
        # API server first, so it does not log a storm of etcd errors.
        for name, proc, log in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            log.close()
            del name
        self._procs.clear()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.stop(grace=1.0)


def env_kubeconfig() -> str | None:
    """The kubeconfig of an existing cluster to test against, per envtest's convention."""
    if os.environ.get("USE_EXISTING_CLUSTER", "").lower() == "true":
        return os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    return None
