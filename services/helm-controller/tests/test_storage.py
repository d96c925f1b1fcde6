"""Helm's storage Secrets as a tenant can shape them, against the real control plane:
a gzip bomb in the tenant's own namespace, and another namespace's release that
a `targetNamespace` points at (issue 32, items 6 and 8)."""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
from collections.abc import AsyncIterator

import pytest_asyncio

from sluice_envtest.harness import condition, make_tenant
from sluice_runtime.helming import helm_binary
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import KubeError
from sluice_runtime.kube.resources import NAMESPACE, SECRET

from .conftest import HELMRELEASE, HelmDelivery
from .test_releases import bomb


async def test_a_gzip_bomb_in_helm_storage_fails_the_release_clearly_and_others_go_on(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    ns = d.namespace
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    # What a tenant may write in its own namespace: 256 MiB of JSON in a Secret
    # of a few hundred kB, where helm keeps release `web`.
    await d.kube.create(
        SECRET,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "sh.helm.release.v1.web.v1",
                "labels": {"owner": "helm", "name": "web", "version": "1", "status": "deployed"},
            },
            "type": "helm.sh/release.v1",
            "data": {"release": bomb(256 << 20)},
        },
        namespace=ns,
    )
    await d.helm_release("web")
    failed = await d.observe.wait_reason(HELMRELEASE, "web", "GetLastReleaseFailed", timeout=60)
    # The status write went through (we read it), naming the Secret and the limit.
    assert condition(failed, "Ready")["message"] == (  # type: ignore[index]
        f"cannot read the history of release {ns}/web: "
        "release Secret 'sh.helm.release.v1.web.v1' inflates to more than 16 MiB"
    )
    assert "history" not in failed["status"]

    # Another release of the same controller is installed while the bomb is retried.
    await d.helm_release("other")
    await d.observe.wait_ready(HELMRELEASE, "other", timeout=90)
    again = await d.kube.get(HELMRELEASE, "web", ns)
    assert condition(again, "Ready")["reason"] == "GetLastReleaseFailed"  # type: ignore[index]


@pytest_asyncio.fixture(loop_scope="session")
async def other_namespace(kube: KubeClient) -> AsyncIterator[str]:
    name = f"t-victim-{secrets.token_hex(3)}"
    await kube.create(
        NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    yield name
    with contextlib.suppress(KubeError):
        await kube.delete(NAMESPACE, name)


def helm_as_admin(d: HelmDelivery, namespace: str, *args: str) -> str:
    done = subprocess.run(
        [str(helm_binary()), *args, "--namespace", namespace],
        capture_output=True,
        text=True,
        check=False,
        env={"HOME": str(d.home), "KUBECONFIG": d.kubeconfig, "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_a_tenant_cannot_read_or_upgrade_another_namespaces_release(
    helm_delivery: HelmDelivery, other_namespace: str
) -> None:
    d = helm_delivery
    ns, victim = d.namespace, other_namespace
    # The tenant may do anything with configmaps and secrets of its own namespace, nothing else.
    await make_tenant(d.kube, ns, ["configmaps", "secrets"])
    chart = d.charts.add("app", "1.0.0", app_version="9.9")
    await d.helm_repository()
    helm_as_admin(d, victim, "install", "payroll", str(chart), "--set", "secret=hunter2")

    await d.helm_release(
        "web", targetNamespace=victim, releaseName="payroll", serviceAccountName="tenant"
    )
    failed = await d.observe.wait_reason(HELMRELEASE, "web", "GetLastReleaseFailed", timeout=60)
    message = condition(failed, "Ready")["message"]  # type: ignore[index]
    assert message.startswith(f"cannot read the history of release {victim}/payroll: ")
    assert f"system:serviceaccount:{ns}:tenant" in message and "forbidden" in message
    # Nothing of the other namespace's release shows in the tenant's status...
    assert "history" not in failed["status"], failed["status"]["history"]
    # ...and helm did not touch it.
    listed = json.loads(helm_as_admin(d, victim, "history", "payroll", "-o", "json"))
    assert [(r["revision"], r["status"]) for r in listed] == [(1, "deployed")]
