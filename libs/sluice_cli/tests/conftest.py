"""What the everyday verbs' tests share: running `sluice` in-process, and a small fleet.

`sluice(...)` parses with the real `main` parser and runs the verb in a
thread of its own (each verb runs its own event loop), so a test sees exactly
what a user would: stdout, stderr and the exit code. The `fleet` fixture runs
the source- and kustomize-controller in-process, confined to the test's
namespace, over a Git repository on the loopback Git server.
"""

from __future__ import annotations

import argparse
import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from sluice_cli import main
from sluice_envtest.controlplane import free_port
from sluice_envtest.gitserver import GitHttpServer, WorkRepo
from sluice_envtest.harness import Observer, running_service
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import ResourceType

GITREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")
KUSTOMIZATION = ResourceType("kustomize.toolkit.fluxcd.io", "v1", "kustomizations", "Kustomization")
CONFIG_MAP = ResourceType("", "v1", "configmaps", "ConfigMap")


def parser() -> argparse.ArgumentParser:
    """Every verb, as `sluice` itself builds them."""
    return main.make_parser()


def sluice_sync(*argv: str) -> int:
    args = parser().parse_args(list(argv))
    return int(args.run(args))


async def sluice(*argv: str) -> int:
    """`sluice <argv>` as main() runs it, in a thread (the verb runs its own event loop)."""
    return await asyncio.to_thread(sluice_sync, *argv)


def config_map(name: str, **data: str) -> str:
    body = "".join(f"\n  {k}: {v!r}" for k, v in data.items()) or " {}"
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:{body}\n"


@dataclass
class Fleet:
    kube: KubeClient
    namespace: str
    kubeconfig: str
    git: GitHttpServer
    observe: Observer

    def flags(self) -> tuple[str, ...]:
        return ("-n", self.namespace, "--kubeconfig", self.kubeconfig)

    def repo(self, name: str) -> WorkRepo:
        return self.git.create_repo(f"{name}-{self.namespace}")

    async def git_repository(self, name: str, **spec: Any) -> JSON:
        body = {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "GitRepository",
            "metadata": {"name": name},
            "spec": {
                "url": self.git.url(f"{name}-{self.namespace}"),
                "interval": "1h",
                "ref": {"branch": "main"},
                **spec,
            },
        }
        return await self.kube.create(GITREPO, body, namespace=self.namespace)

    async def kustomization(self, name: str, *, source: str, path: str = "./", **spec: Any) -> JSON:
        body = {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": name},
            "spec": {
                "interval": "1h",
                "path": path,
                "prune": True,
                "targetNamespace": self.namespace,
                "sourceRef": {"kind": "GitRepository", "name": source},
                **spec,
            },
        }
        return await self.kube.create(KUSTOMIZATION, body, namespace=self.namespace)


@pytest_asyncio.fixture(loop_scope="session")
async def fleet(
    cluster: Cluster, kube: KubeClient, namespace: str, git_http: GitHttpServer, tmp_path: Path
) -> AsyncIterator[Fleet]:
    from kustomize_controller import __main__ as kustomize_main
    from source_controller import __main__ as source_main

    port = free_port()
    storage = [
        "--storage-path", str(tmp_path / "storage"),
        "--storage-addr", f"127.0.0.1:{port}",
        "--storage-adv-addr", f"127.0.0.1:{port}",
    ]  # fmt: skip
    kubeconfig = str(cluster.kubeconfig)
    async with (
        running_service(source_main, kubeconfig=kubeconfig, namespace=namespace, argv=storage),
        running_service(
            kustomize_main,
            kubeconfig=kubeconfig,
            namespace=namespace,
            argv=["--requeue-dependency", "1s"],
        ),
    ):
        yield Fleet(kube, namespace, kubeconfig, git_http, Observer(kube, namespace))


Capture = pytest.CaptureFixture[str]

_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d")


def cli_output(capsys: Capture) -> tuple[str, str]:
    """stdout and stderr of the command, without the in-process controllers' log lines."""
    out, err = capsys.readouterr()

    def strip(text: str) -> str:
        return "".join(line for line in text.splitlines(True) if not _LOG_LINE.match(line))

    return strip(out), strip(err)
