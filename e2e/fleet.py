"""A fleet of MTTP-shaped apps and the controllers that deliver them, as processes.

Shared by the MTTP benchmark (`e2e/bench/mttp.py`) and the chaos suite
(`e2e/chaos/`): N apps, each its own source (OCIRepository or GitRepository)
plus a Kustomization with prune, wait and a tenant service account, applied
by the source- and kustomize-controller running as separate processes that
a test can SIGKILL and start again on the same ports and storage.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.watching import Listed, follow
from sluice_envtest.controlplane import die_with_parent, free_port
from sluice_envtest.gitserver import GitHttpServer, WorkRepo
from sluice_envtest.harness import is_ready
from sluice_envtest.measuring import exceptions_in_log
from sluice_envtest.registry import OciRegistry
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import NAMESPACE, SERVICE_ACCOUNT, ResourceType

OCIREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "ocirepositories", "OCIRepository")
GITREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")
KUSTOMIZATION = ResourceType("kustomize.toolkit.fluxcd.io", "v1", "kustomizations", "Kustomization")
ROLE_BINDING = ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
DEPLOYMENT = ResourceType("apps", "v1", "deployments", "Deployment")
SERVICE = ResourceType("", "v1", "services", "Service")
INGRESS = ResourceType("networking.k8s.io", "v1", "ingresses", "Ingress")
APP_KINDS = (DEPLOYMENT, SERVICE_ACCOUNT, SERVICE, INGRESS)
"""The kinds of the four objects each app of `APP` applies."""

APP = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo-${INDEX}
spec:
  replicas: 0
  selector:
    matchLabels:
      app: podinfo-${INDEX}
  template:
    metadata:
      labels:
        app: podinfo-${INDEX}
    spec:
      serviceAccountName: podinfo-${INDEX}
      containers:
        - name: podinfo
          image: ghcr.io/stefanprodan/podinfo:6.5.3
          resources:
            requests:
              cpu: "${MCPU}"
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: podinfo-${INDEX}
---
apiVersion: v1
kind: Service
metadata:
  name: podinfo-${INDEX}
spec:
  selector:
    app: podinfo-${INDEX}
  ports:
    - name: http
      port: 9898
      protocol: TCP
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: podinfo-${INDEX}
spec:
  rules:
    - host: podinfo-${INDEX}.example.com
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service:
                name: podinfo-${INDEX}
                port:
                  number: 9898
"""


class Controller:
    """One controller process: ready probe, peak memory, SIGKILL and restart on the same ports."""

    def __init__(
        self,
        name: str,
        module: str,
        argv: list[str],
        log: Path,
        *,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.env = {**os.environ, **(env or {})}
        self.module = module
        self.port = free_port()
        self.log = log
        self.argv = argv
        self.restarts = 0
        self.storage_port = 0  # the artifact server's, for a source-controller
        self.handle = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", self.module, "--health-addr", f"127.0.0.1:{self.port}",
             "--metrics-addr", f"127.0.0.1:{self.port}", "--log-level", "warning", *self.argv],
            stdout=self.handle, stderr=subprocess.STDOUT, preexec_fn=die_with_parent, env=self.env,
        )  # fmt: skip

    def wait_ready(self, timeout: float = 60, *, probe: str = "readyz") -> None:
        """Until the probe answers 200; `healthz` for a standby, which is not Ready."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/{probe}", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready")

    def kill(self) -> None:
        """SIGKILL: no drain, no shutdown hooks, whatever it was doing is cut."""
        self.proc.kill()
        self.proc.wait()

    def restart(self) -> None:
        """Start again with the same flags, ports and storage, as a Deployment would."""
        if self.proc.poll() is None:
            raise RuntimeError(f"{self.name} is still running")
        self.restarts += 1
        self.proc = self._spawn()

    def peak_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2):
                return True
        except OSError:
            return False

    def api_requests(self) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        found = re.search(r"^rest_client_requests_total\{[^}]*\} ([0-9.e+]+)$", text, re.MULTILINE)
        return float(found.group(1)) if found else float("nan")

    def reconciles(self) -> float:
        """Reconciles this process has run, every kind and result (lost on a restart)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        found = re.findall(
            r"^controller_runtime_reconcile_total\{[^}]*\} ([0-9.e+]+)$", text, re.MULTILINE
        )
        return sum(float(value) for value in found)

    def tracebacks(self) -> list[str]:
        """Lines of its log that carry an exception: a plain traceback, or the runtime's
        JSON line with an `exception` field (which holds no "Traceback" text)."""
        return exceptions_in_log(self.log.read_text(errors="replace"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.handle.close()


def source_controller(
    kubeconfig: str,
    workdir: Path,
    *,
    concurrent: int = 10,
    extra: list[str] | None = None,
    replica: str = "",
    env: Mapping[str, str] | None = None,
) -> Controller:
    """One replica; each has storage and an artifact address of its own, as pods do."""
    storage_port = free_port()
    made = Controller(
        f"source-controller{replica}",
        "source_controller",
        ["--kubeconfig", kubeconfig, "--concurrent", str(concurrent),
         "--storage-path", str(workdir / f"storage{replica}"),
         "--storage-addr", f"127.0.0.1:{storage_port}",
         "--storage-adv-addr", f"127.0.0.1:{storage_port}", *(extra or [])],
        workdir / f"source-controller{replica}.log",
        env=env,
    )  # fmt: skip
    made.storage_port = storage_port
    return made


def kustomize_controller(
    kubeconfig: str,
    workdir: Path,
    *,
    concurrent: int = 20,
    extra: list[str] | None = None,
    replica: str = "",
    env: Mapping[str, str] | None = None,
) -> Controller:
    return Controller(
        f"kustomize-controller{replica}",
        "kustomize_controller",
        ["--kubeconfig", kubeconfig, "--concurrent", str(concurrent), *(extra or [])],
        workdir / f"kustomize-controller{replica}.log",
        env=env,
    )


async def prepare_namespace(client: KubeClient, ns: str, *, create: bool = True) -> None:
    """The namespace (unless it exists) and the `flux` tenant with admin rights in it."""
    if create:
        await client.create(
            NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        )
    await client.create(
        SERVICE_ACCOUNT,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "flux", "namespace": ns},
        },
    )
    await client.create(
        ROLE_BINDING,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "flux", "namespace": ns},
            # `admin` is an aggregated ClusterRole, and aggregation is the
            # controller-manager's job, which this control plane lacks;
            # cluster-admin bound in one namespace grants the same there.
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "flux", "namespace": ns}],
        },
    )


@dataclass
class Origin:
    """Where the apps' manifests are published: one OCI repository or one Git repository."""

    kind: str
    rt: ResourceType
    spec: dict[str, Any]
    registry: OciRegistry | None = None
    work: WorkRepo | None = None
    repository: str = "manifests/podinfo"

    def publish(self, files: Mapping[str, str]) -> str:
        """Publish `files` (over the same paths each time); the manifest digest or commit id."""
        if self.registry is not None:
            return self.registry.push_artifact(self.repository, "latest", files=dict(files))
        assert self.work is not None
        commit = self.work.commit("publish", files=dict(files))
        self.work.push()
        return commit


def oci_origin(registry: OciRegistry, repository: str = "manifests/podinfo") -> Origin:
    return Origin(
        kind="OCIRepository",
        rt=OCIREPO,
        spec={"url": registry.oci_url(repository), "insecure": True, "ref": {"tag": "latest"}},
        registry=registry,
        repository=repository,
    )


def git_origin(git: GitHttpServer, name: str = "podinfo") -> Origin:
    work = git.create_repo(name)
    return Origin(
        kind="GitRepository",
        rt=GITREPO,
        spec={"url": git.url(name), "ref": {"branch": "main"}},
        work=work,
    )


def app_objects(
    source_kind: str,
    source_spec: Mapping[str, Any],
    ns: str,
    i: int,
    *,
    interval: str = "60m",
    retry_interval: str = "2m",
    timeout: str = "1m",
) -> tuple[dict[str, Any], dict[str, Any]]:
    """App `i`'s source and Kustomization, in Flux's benchmark shape."""
    source = {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": source_kind,
        "metadata": {"name": f"podinfo-{i}", "namespace": ns},
        "spec": {"interval": interval, **source_spec},
    }
    kustomization = {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": f"podinfo-{i}", "namespace": ns},
        "spec": {
            "sourceRef": {"kind": source_kind, "name": f"podinfo-{i}"},
            "interval": interval,
            "retryInterval": retry_interval,
            "path": "./",
            "prune": True,
            "wait": True,
            "timeout": timeout,
            "serviceAccountName": "flux",
            "targetNamespace": ns,
            "postBuild": {"substitute": {"INDEX": f"{i}app", "PODS": "1", "MCPU": "1m"}},
        },
    }
    return source, kustomization


async def create_apps(
    client: KubeClient,
    origin: Origin,
    ns: str,
    count: int,
    *,
    interval: str = "60m",
    retry_interval: str = "2m",
    timeout: str = "1m",
    first: int = 0,
    source_spec: Callable[[int], Mapping[str, Any]] | None = None,
    in_flight: int = 32,
) -> None:
    """Each app's source and Kustomization, in Flux's benchmark shape.

    Apps are numbered from `first`, so two origins can share a namespace;
    `source_spec(i)`, when given, replaces the origin's spec for app `i`
    (e.g. a URL of its own, to tell its requests apart at a proxy). Up to
    `in_flight` apps are created at once: one by one, creating 2000 objects
    took the benchmark itself most of a minute, which "sources Ready" then
    measured instead of the controllers.
    """
    limit = asyncio.Semaphore(max(in_flight, 1))

    async def create(i: int) -> None:
        spec = source_spec(i) if source_spec is not None else origin.spec
        source, kustomization = app_objects(
            origin.kind, spec, ns, i, interval=interval, retry_interval=retry_interval,
            timeout=timeout,
        )  # fmt: skip
        async with limit:
            await client.create(origin.rt, source)
            await client.create(KUSTOMIZATION, kustomization)

    await asyncio.gather(*(create(i) for i in range(first, first + count)))


async def all_ready(
    client: KubeClient,
    rt: ResourceType,
    ns: str,
    count: int,
    *,
    limit: float = 1800,
    check: Any = is_ready,
) -> float:
    """Seconds until `count` objects of `rt` pass `check` (Ready for their generation).

    Seen as `kubectl wait` sees it: one list, then a watch. Listing every half
    second, as this did, read all N objects each time: at 1,000 Kustomizations
    a few MB that the API server served and this process parsed twice a second,
    taken from the run being measured.
    """
    start = time.monotonic()
    passing: set[str] = set()
    failing: dict[str, JSON] = {}  # the latest version of each object not passing yet

    def seen(obj: JSON, deleted: bool = False) -> None:
        name = obj["metadata"]["name"]
        if not deleted and check(obj):
            passing.add(name)
            failing.pop(name, None)
        else:
            passing.discard(name)
            if deleted:
                failing.pop(name, None)
            else:
                failing[name] = obj

    if count <= 0:
        return 0.0  # nothing to wait for: not even the one list
    try:
        async with asyncio.timeout(limit):
            changes = follow(client, rt, ns)
            async with contextlib.aclosing(changes):  # ends the watch once enough pass
                async for change in changes:
                    if isinstance(change, Listed):
                        passing.clear()
                        failing.clear()
                        for obj in change.objects:
                            seen(obj)
                    else:
                        seen(change.object, deleted=change.deleted)
                    if len(passing) >= count:
                        break
    except TimeoutError:
        stuck: JSON = next(iter(failing.values()), {})
        raise RuntimeError(
            f"{rt.kind}s not ready after {limit}s ({len(passing)} of {count}), e.g. "
            f"{stuck.get('metadata', {}).get('name')}: {stuck.get('status')}"
        ) from None
    return time.monotonic() - start
