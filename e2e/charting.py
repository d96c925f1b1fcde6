"""What the chart's tests share: the chart rendered with values, its objects by
kind, and each Deployment's args read by its controller's own flag parser."""

from __future__ import annotations

import asyncio
import functools
import importlib
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from sluice_cli import controllers
from sluice_envtest import manifest
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime import app
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import ResourceType

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "sluice"
DEPLOYMENT = ResourceType("apps", "v1", "deployments", "Deployment")
NETWORK_POLICY = ResourceType("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
CONFIG_MAP = ResourceType("", "v1", "configmaps", "ConfigMap")
GITREPO = ResourceType("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")
KUSTOMIZATION = ResourceType("kustomize.toolkit.fluxcd.io", "v1", "kustomizations", "Kustomization")


# Every controller's flag parser, and its values section, from the one list of them.
MAINS: dict[str, ModuleType] = {
    c.name: importlib.import_module(f"{c.module}.__main__") for c in controllers.CONTROLLERS
}
VALUE_KEYS = {c.name: c.values_key for c in controllers.CONTROLLERS}
DEFAULT = set(controllers.DEFAULT)
ENABLE_ALL = tuple(f"{c.values_key}.create=true" for c in controllers.CONTROLLERS if not c.default)
"""Values that deploy the opt-in controllers too."""


Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _rendered(values: tuple[str, ...], namespace: str, crds: bool) -> str:
    return manifest.template(CHART, namespace=namespace, values=values, include_crds=crds)


def render(
    *values: str, namespace: str = "flux-system", crds: bool = False
) -> list[dict[str, Any]]:
    """The chart's objects with `values` (`--set` assignments); CRDs only if asked."""
    text = _rendered(values, namespace, crds)
    return [doc for doc in yaml.load_all(text, Loader=Loader) if doc]


def of_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return found


def options(deployment: dict[str, Any]) -> Any:
    """The Deployment's args as its controller's own flag parser reads them."""
    name = deployment["metadata"]["name"]
    module = MAINS[name]
    parser = app.parser(service=name, description=name, concurrency=1)
    add_arguments = getattr(module, "add_arguments", None)
    if add_arguments is not None:
        add_arguments(parser)
    return parser.parse_args(container(deployment)["args"])


async def run_off_loop(
    argv: list[str], *, input: str | None = None, capture_output: bool = True, text: bool = True
) -> subprocess.CompletedProcess[str]:
    """subprocess.run in a thread: the controllers under test share the event loop."""
    return await asyncio.to_thread(
        subprocess.run, argv, input=input, capture_output=capture_output, text=text
    )


RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


async def apply_rbac(cluster: Cluster, objects: list[dict[str, Any]]) -> None:
    """Apply the chart's ServiceAccounts, roles and bindings (nothing else)."""
    rbac = [o for o in objects if o["kind"] in RBAC_KINDS]
    done = await run_off_loop(
        cluster.kubectl("apply", "--server-side", "-f", "-"), input=yaml.safe_dump_all(rbac)
    )
    assert done.returncode == 0, done.stderr


async def delete_cluster_rbac(cluster: Cluster, objects: list[dict[str, Any]]) -> None:
    """Cluster-scoped, so not removed with the test's namespace."""
    for kind in ("ClusterRoleBinding", "ClusterRole"):
        for name in of_kind(objects, kind):
            await run_off_loop(cluster.kubectl("delete", kind.lower(), name))


def token_kubeconfig(cluster: Cluster, token: str, path: Path) -> str:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return str(path)


async def service_account_token(kube: KubeClient, namespace: str, name: str) -> str:
    answer = await kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
              "spec": {"expirationSeconds": 600}},
    )  # fmt: skip
    return str(answer["status"]["token"])


# Flags that say where a pod listens or stores; an in-process run picks its own.
_PLACE_FLAGS = ("--metrics-addr", "--health-addr", "--events-addr", "--receiver-addr",
                "--storage-path",
                "--storage-addr", "--storage-adv-addr", "--enable-leader-election")  # fmt: skip


def chart_args(deployment: dict[str, Any]) -> list[str]:
    return [a for a in container(deployment)["args"] if not a.startswith(_PLACE_FLAGS)]
