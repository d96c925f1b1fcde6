"""HelmRelease against the real control plane, released with the real helm."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from sluice_envtest.chartrepo import CONFIGMAP_TEMPLATE
from sluice_envtest.harness import condition, make_config_map, make_secret, make_tenant
from sluice_runtime.kube.errors import KubeError, NotFound
from sluice_runtime.kube.resources import NAMESPACE, ResourceType

from .conftest import CONFIG_MAP, HELMCHART, HELMRELEASE, HELMREPO, HelmDelivery


def history(obj: dict[str, Any]) -> list[tuple[int, str, str]]:
    return [
        (h["version"], h["status"], h["chartVersion"]) for h in obj["status"].get("history") or []
    ]


async def test_install_then_upgrade_on_a_new_chart_version_and_on_a_values_change(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    ns = d.namespace
    d.charts.add("app", "1.0.0", app_version="2.0")
    await d.helm_repository()
    await d.helm_release("web", version="1.x", values={"greeting": "hi"})
    obj = await d.observe.wait_ready(HELMRELEASE, "web", timeout=60)
    ready, released = condition(obj, "Ready"), condition(obj, "Released")
    message = f"Helm install succeeded for release {ns}/web.v1 with chart app@1.0.0"
    assert ready is not None and (ready["reason"], ready["message"]) == (
        "InstallSucceeded",
        message,
    )
    assert released is not None and released["status"] == "True"
    assert history(obj) == [(1, "deployed", "1.0.0")]
    snap = obj["status"]["history"][0]
    assert snap["appVersion"] == "2.0" and snap["chartName"] == "app"
    assert snap["configDigest"] == obj["status"]["lastAttemptedConfigDigest"]
    assert obj["status"]["lastAttemptedRevision"] == "1.0.0"
    assert obj["status"]["lastAttemptedReleaseAction"] == "install"
    assert obj["status"]["helmChart"] == f"{ns}/{ns}-web"
    chart = await d.kube.get(HELMCHART, f"{ns}-web", ns)
    assert chart["metadata"]["labels"]["helm.toolkit.fluxcd.io/name"] == "web"
    cm = await d.kube.get(CONFIG_MAP, "web-config", ns)
    assert cm["data"] == {"greeting": "hi", "version": "1.0.0"}
    # helm itself sees the release as a person's.
    [listed] = d.helm("list")
    assert (listed["name"], listed["chart"], listed["status"]) == ("web", "app-1.0.0", "deployed")
    assert d.helm("get", "values", "web") == {"greeting": "hi"}
    await d.wait_event("web", reason="InstallSucceeded")

    # Steady state: a requested reconcile does not upgrade.
    await d.observe.poke(HELMRELEASE, "web", "steady")
    assert [r["revision"] for r in d.helm("history", "web")] == [1]

    # A new chart version in range: upgrade.
    d.charts.add("app", "1.1.0")
    await d.observe.poke(HELMREPO, "charts", "new-index")
    obj = await d.observe.wait(
        HELMRELEASE, "web", lambda o: len(o["status"].get("history") or []) == 2, timeout=60
    )
    assert history(obj) == [(2, "deployed", "1.1.0"), (1, "superseded", "1.0.0")]
    assert condition(obj, "Ready")["reason"] == "UpgradeSucceeded", obj["status"]  # type: ignore[index]
    assert (await d.kube.get(CONFIG_MAP, "web-config", ns))["data"]["version"] == "1.1.0"

    # A values change: upgrade, and the new config digest.
    await d.kube.merge_patch(
        HELMRELEASE, "web", {"spec": {"values": {"greeting": "hey"}}}, namespace=ns
    )
    obj = await d.observe.wait(
        HELMRELEASE, "web", lambda o: len(o["status"].get("history") or []) == 3, timeout=60
    )
    assert (
        obj["status"]["history"][0]["configDigest"] != obj["status"]["history"][1]["configDigest"]
    )
    assert (await d.kube.get(CONFIG_MAP, "web-config", ns))["data"]["greeting"] == "hey"
    assert [(r["revision"], r["status"]) for r in d.helm("history", "web")] == [
        (1, "superseded"),
        (2, "superseded"),
        (3, "deployed"),
    ]


async def test_a_failed_upgrade_is_rolled_back_and_stalls_when_retries_are_exhausted(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    ns = d.namespace
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    await d.helm_release(
        "web",
        values={"fail": False},
        upgrade={"remediation": {"retries": 1, "strategy": "rollback"}},
    )
    await d.observe.wait_ready(HELMRELEASE, "web", timeout=60)
    # 1.1.0 renders an object the API server refuses: the upgrade fails.
    d.charts.add(
        "app",
        "1.1.0",
        templates={
            "configmap.yaml": CONFIGMAP_TEMPLATE,
            "bad.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: BAD_NAME\n",
        },
    )
    await d.observe.poke(HELMREPO, "charts", "bad")
    obj = await d.observe.wait_stalled(HELMRELEASE, "web", timeout=90)
    ready, released = condition(obj, "Ready"), condition(obj, "Released")
    assert ready is not None and ready["reason"] == "RetriesExceeded"
    assert ready["message"].startswith("Failed to upgrade after 2 attempt(s): Helm upgrade failed")
    assert released is not None and (released["status"], released["reason"]) == (
        "False",
        "UpgradeFailed",
    )
    assert f"Helm upgrade failed for release {ns}/web with chart app@1.1.0" in released["message"]
    assert "BAD_NAME" in released["message"]
    remediated = condition(obj, "Remediated")
    assert remediated is not None and remediated["reason"] == "RollbackSucceeded", str(
        [
            (r["revision"], r["status"], r["chart"], r["description"])
            for r in d.helm("history", "web")
        ]
    )
    assert obj["status"]["upgradeFailures"] == 2
    # Two failed upgrades, each rolled back to 1.0.0: helm's own history says so.
    revisions = [(r["revision"], r["status"], r["chart"]) for r in d.helm("history", "web")]
    assert revisions == [
        (1, "superseded", "app-1.0.0"),
        (2, "failed", "app-1.1.0"),
        (3, "superseded", "app-1.0.0"),
        (4, "failed", "app-1.1.0"),
        (5, "deployed", "app-1.0.0"),
    ]
    assert obj["status"]["history"][0]["status"] == "deployed"
    assert (await d.kube.get(CONFIG_MAP, "web-config", ns))["data"]["version"] == "1.0.0"
    await d.wait_event("web", reason="RollbackSucceeded")
    await d.wait_event("web", reason="UpgradeFailed", type="Warning")

    # Stalled: a requested reconcile does not try again.
    await d.observe.poke(HELMRELEASE, "web", "again")
    assert len(d.helm("history", "web")) == 5


async def test_deleting_the_helmrelease_uninstalls_and_deletes_its_chart(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    ns = d.namespace
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    await d.helm_release("web")
    await d.observe.wait_ready(HELMRELEASE, "web", timeout=60)
    assert d.helm("list") != []
    await d.kube.delete(HELMRELEASE, "web", namespace=ns)
    for _ in range(300):
        if not d.helm("list", "--all"):
            break
        await asyncio.sleep(0.1)
    assert d.helm("list", "--all") == []
    assert not (await d.kube.list(CONFIG_MAP, namespace=ns, label_selector="chart=app-1.0.0")).items
    for _ in range(100):
        if not (await d.kube.list(HELMCHART, namespace=ns)).items:
            break
        await asyncio.sleep(0.1)
    assert not (await d.kube.list(HELMCHART, namespace=ns)).items
    await d.wait_event("web", reason="UninstallSucceeded")


async def test_deleting_deletes_the_chart_the_spec_made_never_the_one_status_names(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    ns = d.namespace
    victim = f"{ns}-victim"[:63]
    await d.kube.create(
        NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": victim}}
    )
    try:
        precious = {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "HelmChart",
            "metadata": {"name": "precious"},
            "spec": {
                "chart": "app",
                "interval": "1h",
                "sourceRef": {"kind": "HelmRepository", "name": "elsewhere"},
            },
        }
        await d.kube.create(HELMCHART, precious, namespace=victim)
        d.charts.add("app", "1.0.0")
        await d.helm_repository()
        await d.helm_release("web")
        await d.observe.wait_ready(HELMRELEASE, "web", timeout=60)
        # A tenant who may write its HelmRelease's status points it elsewhere.
        await d.kube.merge_patch(
            HELMRELEASE,
            "web",
            {"status": {"helmChart": f"{victim}/precious"}},
            namespace=ns,
            subresource="status",
        )
        await d.kube.delete(HELMRELEASE, "web", namespace=ns)
        for _ in range(300):  # a cap on the wait only
            if not (await d.kube.list(HELMRELEASE, namespace=ns)).items:
                break
            await asyncio.sleep(0.1)
        assert not (await d.kube.list(HELMRELEASE, namespace=ns)).items
        # Its own chart is gone (the source-controller's finalizer runs after the
        # release's); the other namespace's is not.
        for _ in range(300):  # a cap on the wait only
            if not (await d.kube.list(HELMCHART, namespace=ns)).items:
                break
            await asyncio.sleep(0.1)
        assert not (await d.kube.list(HELMCHART, namespace=ns)).items
        await d.kube.get(HELMCHART, "precious", victim)
    finally:
        with contextlib.suppress(KubeError):
            await d.kube.delete(NAMESPACE, victim)


async def test_values_from_configmap_and_secret_with_target_path_and_a_missing_one(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    ns = d.namespace
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    await make_config_map(d.kube, ns, "base", {"values.yaml": "greeting: from-cm\nother: 1\n"})
    await make_secret(d.kube, ns, "secret-values", {"greet": "from-secret"})
    await d.helm_release(
        "web",
        valuesFrom=[
            {"kind": "ConfigMap", "name": "base"},
            {
                "kind": "Secret",
                "name": "secret-values",
                "valuesKey": "greet",
                "targetPath": "greeting",
            },
            {"kind": "ConfigMap", "name": "absent", "optional": True},
        ],
        values={"other": 2},
    )
    await d.observe.wait_ready(HELMRELEASE, "web", timeout=60)
    assert d.helm("get", "values", "web") == {"greeting": "from-secret", "other": 2}

    await d.helm_release("broken", valuesFrom=[{"kind": "ConfigMap", "name": "absent"}])
    obj = await d.observe.wait_reason(HELMRELEASE, "broken", "InitFailed", timeout=30)
    assert condition(obj, "Ready")["message"] == (  # type: ignore[index]
        f"could not resolve ConfigMap '{ns}/absent': not found"
    )


async def test_impersonation_refuses_objects_outside_the_tenant_namespace(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    ns = d.namespace
    # configmaps and secrets: helm's storage.
    await make_tenant(d.kube, d.namespace, ["configmaps", "secrets"])
    d.charts.add("app", "1.0.0")
    d.charts.add(
        "escape",
        "1.0.0",
        templates={
            "cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: escaped\n"
            "  namespace: default\ndata: {}\n"
        },
    )
    await d.helm_repository()
    await d.helm_release("ok", serviceAccountName="tenant")
    obj = await d.observe.wait_ready(HELMRELEASE, "ok", timeout=60)
    assert obj["status"]["history"][0]["status"] == "deployed"
    await d.helm_release("evil", chart="escape", serviceAccountName="tenant")
    # No remediation retries (Flux's default): the first failure stalls.
    failed = await d.observe.wait_reason(HELMRELEASE, "evil", "RetriesExceeded", timeout=60)
    released = condition(failed, "Released")
    assert released is not None and released["reason"] == "InstallFailed"
    message = released["message"]
    assert f"system:serviceaccount:{ns}:tenant" in message and "forbidden" in message
    with contextlib.suppress(NotFound):
        await d.kube.get(CONFIG_MAP, "escaped", "default")
        raise AssertionError("the tenant created an object outside its namespace")


async def test_unbuilt_fields_stall_naming_them(helm_delivery: HelmDelivery) -> None:
    d = helm_delivery
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    await d.helm_release(
        "drifty",
        dependsOn=[{"name": "other", "readyExpr": "true"}],
        storageNamespace="elsewhere",
    )
    obj = await d.observe.wait_reason(HELMRELEASE, "drifty", "UnsupportedField", timeout=30)
    stalled = condition(obj, "Stalled")
    assert stalled is not None and stalled["status"] == "True"
    assert (
        "spec.dependsOn[].readyExpr, spec.storageNamespace (different from the release namespace)"
        in stalled["message"]
    )
    assert d.helm("list", "--all") == []


async def test_a_closed_gate_holds_the_install_until_it_opens_and_depends_on_waits(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    ns = d.namespace
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    await d.kube.create(
        GATE,
        {
            "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
            "kind": "Gate",
            "metadata": {"name": "freeze"},
            "spec": {"default": "closed", "interval": "1h"},
        },
        namespace=ns,
    )
    await set_gate(d, "freeze", opened=False)
    await d.helm_release("first", gates=[{"name": "freeze"}])
    await d.helm_release("second", dependsOn=[{"name": "first"}])
    held = await d.observe.wait_reason(HELMRELEASE, "first", "GateClosed", timeout=30)
    assert condition(held, "Approved")["status"] == "False"  # type: ignore[index]
    waiting = await d.observe.wait_reason(HELMRELEASE, "second", "DependencyNotReady", timeout=30)
    assert f"dependency '{ns}/first' is not ready" in condition(waiting, "Ready")["message"]  # type: ignore[index]
    assert d.helm("list", "--all") == []

    await set_gate(d, "freeze", opened=True)
    opened = await d.observe.wait_ready(HELMRELEASE, "first", timeout=60)
    assert condition(opened, "Approved")["status"] == "True"  # type: ignore[index]
    await d.observe.wait_ready(HELMRELEASE, "second", timeout=60)
    assert sorted(r["name"] for r in d.helm("list")) == ["first", "second"]


GATE = ResourceType("gating.toolkit.fluxcd.io", "v1alpha1", "gates", "Gate")


async def set_gate(d: HelmDelivery, name: str, *, opened: bool) -> None:
    status = "True" if opened else "False"
    await d.kube.merge_patch(
        GATE,
        name,
        {
            "status": {
                "conditions": [
                    {
                        "type": "Opened",
                        "status": status,
                        "reason": "Test",
                        "message": "set by the test",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ]
            }
        },
        namespace=d.namespace,
        subresource="status",
    )


TEST_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {{ .Release.Name }}-test-{{ .Values.testName }}
  annotations:
    "helm.sh/hook": test
spec:
  restartPolicy: Never
  containers:
    - name: check
      image: busybox
      command: ["true"]
"""
POD = ResourceType("", "v1", "pods", "Pod")


async def finish_test_pods(d: HelmDelivery, phases: dict[str, str]) -> None:
    """Stand in for the kubelet: move test hook Pods named in `phases` to that phase."""
    while True:
        for pod in (await d.kube.list(POD, namespace=d.namespace)).items:
            name = pod["metadata"]["name"]
            phase = phases.get(name)
            if phase and (pod.get("status") or {}).get("phase") != phase:
                with contextlib.suppress(NotFound):
                    await d.kube.merge_patch(
                        POD, name, {"status": {"phase": phase}},
                        namespace=d.namespace, subresource="status",
                    )  # fmt: skip
        await asyncio.sleep(0.1)


async def test_helm_test_runs_after_install_and_a_failing_test_fails_the_release(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    ns = d.namespace
    d.charts.add(
        "app",
        "1.0.0",
        values={"greeting": "hi", "testName": "ok"},
        templates={"configmap.yaml": CONFIGMAP_TEMPLATE, "test.yaml": TEST_POD},
    )
    await d.helm_repository()
    kubelet = asyncio.create_task(
        finish_test_pods(d, {"good-test-ok": "Succeeded", "bad-test-ok": "Failed"})
    )
    try:
        await d.helm_release("good", test={"enable": True})
        obj = await d.observe.wait_ready(HELMRELEASE, "good", timeout=60)
        tested = condition(obj, "TestSuccess")
        assert tested is not None and tested["status"] == "True"
        assert tested["message"] == (
            f"Helm test succeeded for release {ns}/good.v1 with chart app@1.0.0"
        )
        hooks = obj["status"]["history"][0]["testHooks"]
        assert hooks["good-test-ok"]["phase"] == "Succeeded"
        await d.wait_event("good", reason="TestSucceeded")

        await d.helm_release("bad", test={"enable": True})
        failed = await d.observe.wait(
            HELMRELEASE,
            "bad",
            lambda o: (condition(o, "TestSuccess") or {}).get("status") == "False",
            timeout=60,
        )
        # No retries (Flux's default): the failed test stalls the release, and a
        # requested reconcile neither runs it again nor calls it Ready.
        ready = condition(failed, "Ready")
        assert ready is not None and (ready["status"], ready["reason"]) == (
            "False",
            "RetriesExceeded",
        )
        assert "Helm test failed for release" in ready["message"]
        again = await d.observe.poke(HELMRELEASE, "bad", "again")
        assert condition(again, "Ready")["reason"] == "RetriesExceeded"  # type: ignore[index]
        assert failed["status"]["history"][0]["testHooks"]["bad-test-ok"]["phase"] == "Failed"
        await d.wait_event("bad", reason="TestFailed", type="Warning")
    finally:
        kubelet.cancel()


async def test_chart_ref_to_a_helmchart_and_suspend_holds_a_values_change(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    ns = d.namespace
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    await d.kube.create(
        HELMCHART,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "HelmChart",
            "metadata": {"name": "shared"},
            "spec": {
                "chart": "app",
                "interval": "1h",
                "sourceRef": {"kind": "HelmRepository", "name": "charts"},
            },
        },
        namespace=ns,
    )
    await d.release_by_ref("byref", "HelmChart", "shared", values={"greeting": "one"})
    obj = await d.observe.wait_ready(HELMRELEASE, "byref", timeout=60)
    assert "helmChart" not in obj["status"]  # not created, so not owned
    assert history(obj) == [(1, "deployed", "1.0.0")]

    await d.kube.merge_patch(HELMRELEASE, "byref", {"spec": {"suspend": True}}, namespace=ns)
    await d.kube.merge_patch(
        HELMRELEASE, "byref", {"spec": {"values": {"greeting": "two"}}}, namespace=ns
    )
    await asyncio.sleep(2)
    assert [r["revision"] for r in d.helm("history", "byref")] == [1]
    assert d.helm("get", "values", "byref") == {"greeting": "one"}

    await d.kube.merge_patch(HELMRELEASE, "byref", {"spec": {"suspend": False}}, namespace=ns)
    obj = await d.observe.wait(
        HELMRELEASE, "byref", lambda o: len(o["status"].get("history") or []) == 2, timeout=60
    )
    assert d.helm("get", "values", "byref") == {"greeting": "two"}
    # Deleting it uninstalls the release but leaves the HelmChart it did not create.
    await d.kube.delete(HELMRELEASE, "byref", namespace=ns)
    for _ in range(300):
        if not d.helm("list", "--all"):
            break
        await asyncio.sleep(0.1)
    assert d.helm("list", "--all") == []
    assert (await d.kube.get(HELMCHART, "shared", ns))["metadata"]["name"] == "shared"
