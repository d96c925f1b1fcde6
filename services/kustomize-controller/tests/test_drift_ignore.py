"""driftIgnoreRules, and Flux 2.9's `ignore` (the same rule under another name):
ignored paths are left to other managers; the rest is corrected."""

from __future__ import annotations

import pytest

from sluice_envtest.harness import condition

from .conftest import CONFIG_MAP, KUSTOMIZATION, Delivery, config_map

FIELDS = pytest.mark.parametrize("field", ["driftIgnoreRules", "ignore"])


@FIELDS
async def test_ignored_path_is_not_corrected(delivery: Delivery, field: str) -> None:
    d = delivery
    ns = d.namespace
    repo = d.repo("app")
    repo.commit(
        "v1",
        files={
            "cm.yaml": config_map("tuned", ns, managed="v1", ignored="original"),
            "other.yaml": config_map("other", ns, ignored="original"),
        },
    )
    repo.push()
    await d.git_repository("app")
    await d.kustomization(
        "app",
        source="app",
        interval="2s",
        **{field: [{"paths": ["/data/ignored"], "target": {"kind": "ConfigMap", "name": "tun.*"}}]},
    )
    await d.observe.wait_ready(KUSTOMIZATION, "app")
    # Created whole: rules have no effect on creation.
    assert (await d.kube.get(CONFIG_MAP, "tuned", ns))["data"]["ignored"] == "original"

    drift = {"data": {"managed": "tampered", "ignored": "theirs"}}
    await d.kube.merge_patch(CONFIG_MAP, "tuned", drift, namespace=ns)
    await d.kube.merge_patch(CONFIG_MAP, "other", {"data": {"ignored": "theirs"}}, namespace=ns)
    # The next reconciles correct what is not ignored, on the target only.
    await d.observe.wait(
        CONFIG_MAP, "other", lambda o: o["data"].get("ignored") == "original", timeout=20
    )
    tuned = await d.observe.wait(
        CONFIG_MAP, "tuned", lambda o: o["data"].get("managed") == "v1", timeout=20
    )
    assert tuned["data"]["ignored"] == "theirs"
    ks = await d.kube.get(KUSTOMIZATION, "app", ns)
    assert (condition(ks, "Ready") or {}).get("status") == "True"


@FIELDS
async def test_invalid_pointer_stalls_naming_it(delivery: Delivery, field: str) -> None:
    d = delivery
    repo = d.repo("app")
    repo.commit("v1", files={"cm.yaml": config_map("cm", d.namespace)})
    repo.push()
    await d.git_repository("app")
    await d.kustomization("app", source="app", **{field: [{"paths": ["data/x"]}]})
    stalled = await d.observe.wait(
        KUSTOMIZATION, "app", lambda o: (condition(o, "Stalled") or {}).get("status") == "True"
    )
    message = condition(stalled, "Stalled")["message"]  # type: ignore[index]
    assert message.startswith(f"{field}: invalid JSON pointer 'data/x'")
    assert condition(stalled, "Ready")["status"] == "False"  # type: ignore[index]
