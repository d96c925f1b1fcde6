"""install/upgrade.crds against the real control plane: Create adds the chart's new
CRDs on upgrade and leaves existing ones, CreateReplace replaces them, Skip (the
upgrade default) touches none."""

from __future__ import annotations

from typing import Any

import yaml

from sluice_envtest.harness import condition
from sluice_runtime.kube.resources import CRD

from .conftest import HELMRELEASE, HELMREPO, HelmDelivery


def crd(group: str, plural: str, kind: str, description: str) -> str:
    return f"""\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.{group}
spec:
  group: {group}
  names:
    kind: {kind}
    plural: {plural}
    singular: {kind.lower()}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          description: {description}
          x-kubernetes-preserve-unknown-fields: true
"""


def description(obj: dict[str, Any]) -> str:
    return str(obj["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"])


async def test_crd_policies_on_install_and_upgrade(helm_delivery: HelmDelivery) -> None:
    d = helm_delivery
    group = f"{d.namespace}.example.com"
    widgets, gadgets = f"widgets.{group}", f"gadgets.{group}"

    def chart(version: str, *, widget: str, with_gadgets: bool) -> None:
        crds = {"widgets.yaml": crd(group, "widgets", "Widget", widget)}
        if with_gadgets:
            crds["gadgets.yaml"] = crd(group, "gadgets", "Gadget", "g1")
        d.charts.add("app", version, crds=crds)

    async def release(version: str, patch: dict[str, Any]) -> dict[str, Any]:
        await d.observe.poke(HELMREPO, "charts", f"index-{version}")
        spec = {**patch, "chart": {"spec": {"version": version}}}
        await d.kube.merge_patch(HELMRELEASE, "web", {"spec": spec}, namespace=d.namespace)
        return await d.observe.wait(
            HELMRELEASE,
            "web",
            lambda o: (
                [h["chartVersion"] for h in o["status"].get("history") or []][:1] == [version]
            ),
            timeout=60,
        )

    chart("1.0.0", widget="w1", with_gadgets=False)
    await d.helm_repository()
    await d.helm_release("web", version="1.0.0", upgrade={"crds": "Create"})
    await d.observe.wait_ready(HELMRELEASE, "web", timeout=60)
    assert description(await d.kube.get(CRD, widgets)) == "w1"

    # Create: the new CRD is created, the existing one is left as it is.
    chart("1.1.0", widget="w2", with_gadgets=True)
    obj = await release("1.1.0", {})
    assert condition(obj, "Ready")["reason"] == "UpgradeSucceeded"  # type: ignore[index]
    assert description(await d.kube.get(CRD, gadgets)) == "g1"
    assert description(await d.kube.get(CRD, widgets)) == "w1"

    # CreateReplace: the existing CRD is replaced by the chart's.
    chart("1.2.0", widget="w2", with_gadgets=True)
    await release("1.2.0", {"upgrade": {"crds": "CreateReplace"}})
    assert description(await d.kube.get(CRD, widgets)) == "w2"

    # Skip (the default): an upgrade leaves the CRDs alone.
    chart("1.3.0", widget="w3", with_gadgets=True)
    await release("1.3.0", {"upgrade": None})
    assert description(await d.kube.get(CRD, widgets)) == "w2"
    assert [r["chart"] for r in d.helm("history", "web")][-1] == "app-1.3.0"


async def test_install_with_create_replace_replaces_an_existing_crd(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    group = f"{d.namespace}.example.com"
    d.charts.add("app", "1.0.0", crds={"widgets.yaml": crd(group, "widgets", "Widget", "chart")})
    # The CRD exists already, as another version of it: helm install alone would skip it.
    await d.kube.create(CRD, yaml.safe_load(crd(group, "widgets", "Widget", "older")))
    await d.helm_repository()
    await d.helm_release("web", install={"crds": "CreateReplace"})
    await d.observe.wait_ready(HELMRELEASE, "web", timeout=60)
    assert description(await d.kube.get(CRD, f"widgets.{group}")) == "chart"
    [listed] = d.helm("list")
    assert listed["status"] == "deployed"
