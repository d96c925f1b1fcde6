"""HelmRelease against the real control plane, released with the real helm."""

from __future__ import annotations

from typing import Any

from sluice_envtest.harness import condition, make_config_map

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
    assert ready is not None and (ready["reason"], ready["message"]) == ("InstallSucceeded", message)
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
    assert condition(obj, "Ready")["reason"] == "UpgradeSucceeded"  # type: ignore[index]
    assert (await d.kube.get(CONFIG_MAP, "web-config", ns))["data"]["version"] == "1.1.0"

    # A values change: upgrade, and the new config digest.
    await d.kube.merge_patch(HELMRELEASE, "web", {"spec": {"values": {"greeting": "hey"}}}, namespace=ns)
    obj = await d.observe.wait(
        HELMRELEASE, "web", lambda o: len(o["status"].get("history") or []) == 3, timeout=60
    )
    assert obj["status"]["history"][0]["configDigest"] != obj["status"]["history"][1]["configDigest"]
    assert (await d.kube.get(CONFIG_MAP, "web-config", ns))["data"]["greeting"] == "hey"
    assert [(r["revision"], r["status"]) for r in d.helm("history", "web")] == [
        (1, "superseded"), (2, "superseded"), (3, "deployed"),
    ]

