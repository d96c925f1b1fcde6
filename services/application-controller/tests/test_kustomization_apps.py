"""A Kustomization-type Application against the real control planes: two destinations
(the host and a second control plane through a kubeconfig Secret), pruning when one
is removed, and a child's status reaching the Application within seconds."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from sluice_envtest.harness import GITREPO, condition, is_ready, make_secret
from sluice_runtime.kube.errors import NotFound

from .conftest import APPLICATION, CONFIG_MAP, KUSTOMIZATION, Fleet, remote_namespace


def config_map(name: str, **data: str) -> str:
    body = "".join(f"\n  {k}: {v!r}" for k, v in data.items())
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:{body}\n"


def kustomize_app(name: str, ns: str, *, remote: bool = True) -> dict[str, Any]:
    destinations: list[dict[str, Any]] = [
        {"destination": {"targetNamespace": ns}, "path": "./", "prune": True, "interval": "1h"}
    ]
    if remote:
        destinations.append(
            {
                "destination": {
                    "kubeConfig": {"secretRef": {"name": "member"}},
                    "targetNamespace": ns,
                },
                "path": "./",
                "prune": True,
                "interval": "1h",
            }
        )
    return {
        "apiVersion": "gitops.kubesphere.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "kind": "fluxcd",
            "fluxApp": {
                "spec": {
                    "source": {
                        "sourceRef": {"kind": "GitRepository", "name": "manifests", "namespace": ns}
                    },
                    "config": {"kustomization": destinations},
                }
            },
        },
    }


async def exists(client: Any, rt: Any, name: str, ns: str) -> bool:
    try:
        await client.get(rt, name, ns)
    except NotFound:
        return False
    return True


async def test_two_destinations_then_removing_one_prunes_its_kustomization_and_objects(
    fleet: Fleet, second_cluster: Any
) -> None:
    f = fleet
    ns = f.namespace
    remote = await remote_namespace(second_cluster, ns)
    try:
        await make_secret(f.kube, ns, "member", {"value": second_cluster.kubeconfig.read_text()})
        repo = f.repo("manifests")
        repo.commit("c", files={"settings.yaml": config_map("settings", color="blue")})
        repo.push()
        await f.git_repository("manifests")
        await f.kube.create(APPLICATION, kustomize_app("web", ns), namespace=ns)

        app = await f.observe.wait_ready(APPLICATION, "web", timeout=60)
        host_child, remote_child = f"web-{ns}", f"web-member-{ns}"
        assert app["metadata"]["labels"]["gitops.kubesphere.io/ready-number"] == "2-2"
        assert set(app["status"]["fluxApp"]["kustomizationStatus"]) == {ns, f"member-{ns}"}
        ready = condition(app, "Ready")
        assert ready is not None and ready["message"] == "2/2 Kustomizations ready"
        assert (await f.kube.get(CONFIG_MAP, "settings", ns))["data"] == {"color": "blue"}
        assert (await remote.get(CONFIG_MAP, "settings", ns))["data"] == {"color": "blue"}
        for name, destination in ((host_child, ns), (remote_child, f"member-{ns}")):
            child = await f.kube.get(KUSTOMIZATION, name, ns)
            meta = child["metadata"]
            assert meta["labels"]["app.kubernetes.io/managed-by"] == "web"
            assert meta["annotations"]["app.kubernetes.io/name"] == destination
            owner = meta["ownerReferences"][0]
            assert (owner["kind"], owner["name"], owner["uid"]) == (
                "Application",
                "web",
                app["metadata"]["uid"],
            )
        remote_spec = (await f.kube.get(KUSTOMIZATION, remote_child, ns))["spec"]
        assert remote_spec["kubeConfig"] == {"secretRef": {"name": "member"}}
        assert remote_spec["sourceRef"] == {
            "kind": "GitRepository",
            "name": "manifests",
            "namespace": ns,
        }

        # kubectl shows kind, ready count and status in columns.
        table = await f.kubectl("get", "applications")
        header, row = table.splitlines()[:2]
        assert header.split()[:5] == ["NAME", "KIND", "READY", "CHILDREN", "READY"]
        assert row.split()[:4] == ["web", "fluxcd", "2-2", "True"]
        assert "2/2 Kustomizations ready" in row

        # Another manager's field on a child survives the controller's applies.
        await f.kube.merge_patch(
            KUSTOMIZATION,
            host_child,
            {"metadata": {"labels": {"team": "web"}}},
            namespace=ns,
        )

        # Remove the second destination: its Kustomization goes, and what it applied.
        await f.kube.merge_patch(
            APPLICATION, "web", kustomize_app("web", ns, remote=False), namespace=ns
        )

        await f.observe.wait(
            APPLICATION,
            "web",
            lambda o: (
                is_ready(o)
                and set(
                    ((o.get("status") or {}).get("fluxApp") or {}).get("kustomizationStatus", {})
                )
                == {ns}
            ),
            timeout=30,
            what="one destination left",
        )
        deadline = time.monotonic() + 30
        while await exists(f.kube, KUSTOMIZATION, remote_child, ns) or await exists(
            remote, CONFIG_MAP, "settings", ns
        ):
            assert time.monotonic() < deadline, "removed destination not pruned"
            await asyncio.sleep(0.2)
        app = await f.kube.get(APPLICATION, "web", ns)
        assert app["metadata"]["labels"]["gitops.kubesphere.io/ready-number"] == "1-1"
        assert await exists(f.kube, CONFIG_MAP, "settings", ns), "the host keeps its objects"
        host = await f.kube.get(KUSTOMIZATION, host_child, ns)
        assert host["metadata"]["labels"]["team"] == "web"
        reasons = [e["reason"] for e in await f.events("web")]
        assert "Created" in reasons and "Deleted" in reasons
    finally:
        await remote.close()


async def test_a_childs_failure_and_recovery_reach_the_application_within_seconds(
    fleet: Fleet,
) -> None:
    f = fleet
    ns = f.namespace
    repo = f.repo("manifests")
    repo.commit("c", files={"settings.yaml": config_map("settings", color="blue")})
    repo.push()
    await f.git_repository("manifests")
    await f.kube.create(APPLICATION, kustomize_app("web", ns, remote=False), namespace=ns)
    await f.observe.wait_ready(APPLICATION, "web", timeout=60)
    child = f"web-{ns}"

    # A commit that does not build fails the child; the Application says which and why.
    repo.commit("broken", files={"kustomization.yaml": "resources: [missing.yaml]\n"})
    repo.push()
    await f.observe.poke(GITREPO, "manifests", "broken")
    await f.observe.poke(KUSTOMIZATION, child, "broken")
    failed = await f.observe.wait(
        KUSTOMIZATION,
        child,
        lambda o: (condition(o, "Ready") or {}).get("status") == "False",
        what="child failed",
    )
    seen = time.monotonic()
    app = await f.observe.wait(
        APPLICATION,
        "web",
        lambda o: (condition(o, "Ready") or {}).get("status") == "False",
        timeout=10,
        what="Application not ready",
    )
    lag = time.monotonic() - seen
    print(f"child failure reached the Application in {lag:.2f}s")
    ready = condition(app, "Ready")
    assert ready is not None and ready["reason"] == "ChildrenNotReady"
    child_message = condition(failed, "Ready")["message"]  # type: ignore[index]
    assert f"Kustomization/{child} (destination '{ns}')" in ready["message"]
    assert "missing.yaml" in ready["message"] and "missing.yaml" in child_message
    assert app["metadata"]["labels"]["gitops.kubesphere.io/ready-number"] == "0-1"
    status = app["status"]["fluxApp"]["kustomizationStatus"][ns]
    assert (condition({"status": status}, "Ready") or {}).get("status") == "False"
    assert lag < 5, f"the Application saw its child's failure {lag:.1f}s late"

    repo.commit("fixed", remove=["kustomization.yaml"])
    repo.push()
    await f.observe.poke(GITREPO, "manifests", "fixed")
    await f.observe.poke(KUSTOMIZATION, child, "fixed")
    await f.observe.wait_ready(KUSTOMIZATION, child)
    seen = time.monotonic()
    await f.observe.wait_ready(APPLICATION, "web", timeout=10)
    lag = time.monotonic() - seen
    print(f"child recovery reached the Application in {lag:.2f}s")
    assert lag < 5
