"""postRenderers against the real control plane: kustomize patches and images
applied by helm's --post-renderer, recorded in the release as installed."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from sluice_api.helm import CommonMetadata, PostRenderer
from sluice_envtest.chartrepo import CONFIGMAP_TEMPLATE
from sluice_envtest.harness import condition
from sluice_runtime.helming import postrendering

from .conftest import CONFIG_MAP, HELMRELEASE, HelmDelivery
from .test_drift import DEPLOYMENT, DEPLOYMENT_TEMPLATE, NO_WAIT, image

RENDERERS: list[dict[str, Any]] = [
    {
        "kustomize": {
            "patches": [
                {
                    # Strategic merge, found by its own kind and name.
                    "patch": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-config\n"
                    "  labels:\n    patched: strategic\n",
                },
                {
                    "patch": '- op: add\n  path: /data/extra\n  value: "json6902"\n',
                    "target": {"kind": "ConfigMap", "name": "web-.*"},
                },
            ],
            "images": [{"name": "nginx", "newName": "registry.local/nginx", "newTag": "1.27"}],
        }
    },
    # A second renderer runs over the first one's output.
    {"kustomize": {"images": [{"name": "registry.local/nginx", "digest": "sha256:" + "a" * 64}]}},
]


async def web_chart(d: HelmDelivery) -> None:
    """Chart `app` 1.0.0 (a Deployment and a ConfigMap) in the HelmRepository `charts`."""
    d.charts.add(
        "app",
        "1.0.0",
        values={"image": "nginx:1.25", "greeting": "hi"},
        templates={"d.yaml": DEPLOYMENT_TEMPLATE, "cm.yaml": CONFIGMAP_TEMPLATE},
    )
    await d.helm_repository()


async def test_post_renderers_patch_and_retag_what_helm_installs(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    ns = d.namespace
    await web_chart(d)
    await d.helm_release("web", postRenderers=RENDERERS, **NO_WAIT)
    await d.observe.wait_ready(HELMRELEASE, "web", timeout=60)
    cm = await d.kube.get(CONFIG_MAP, "web-config", ns)
    assert cm["metadata"]["labels"]["patched"] == "strategic"
    assert cm["data"] == {"greeting": "hi", "version": "1.0.0", "extra": "json6902"}
    assert image(await d.kube.get(DEPLOYMENT, "web", ns)) == "registry.local/nginx@sha256:" + (
        "a" * 64
    )
    # helm recorded the post-rendered manifest: what `helm get manifest` shows.
    [release] = [r for r in d.helm("history", "web")]
    assert release["status"] == "deployed"


async def test_a_post_renderer_that_fails_names_the_problem(helm_delivery: HelmDelivery) -> None:
    d = helm_delivery
    ns = d.namespace
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    await d.helm_release(
        "web",
        postRenderers=[
            {
                "kustomize": {
                    "patches": [
                        {
                            "patch": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n"
                            "  name: not-in-the-chart\ndata:\n  a: b\n"
                        }
                    ]
                }
            }
        ],
    )
    obj = await d.observe.wait(
        HELMRELEASE,
        "web",
        lambda o: (condition(o, "Released") or {}).get("reason") == "InstallFailed",
        timeout=60,
    )
    released = condition(obj, "Released")
    assert released is not None and "post-renderer" in released["message"]
    assert "not-in-the-chart" in released["message"]
    assert not (await d.kube.list(CONFIG_MAP, namespace=ns, label_selector="chart=app-1.0.0")).items


@pytest.mark.parametrize(
    ("renderers", "expected"),
    [
        pytest.param([], [], id="none"),
        pytest.param([{}], [], id="no-kustomize"),
        pytest.param([{"kustomize": {}}], [], id="empty-kustomize"),
        pytest.param(
            [{"kustomize": {"images": [{"name": "a", "newTag": "2"}]}}],
            [{"images": [{"name": "a", "newTag": "2"}]}],
            id="images",
        ),
        pytest.param(
            [
                {"kustomize": {"patches": [{"patch": "x", "target": {"kind": "K"}}]}},
                {"kustomize": {"images": [{"name": "b", "digest": "sha256:1"}]}},
            ],
            [
                {"patches": [{"patch": "x", "target": {"kind": "K"}}]},
                {"images": [{"name": "b", "digest": "sha256:1"}]},
            ],
            id="one-pass-per-renderer-in-order",
        ),
        pytest.param(
            [
                {
                    "kustomize": {
                        "patchesStrategicMerge": [{"kind": "K", "metadata": {"name": "n"}}],
                        "patchesJson6902": [
                            {"target": {"kind": "K"}, "patch": [{"op": "remove", "path": "/a"}]}
                        ],
                    }
                }
            ],
            [
                {
                    "patchesStrategicMerge": [{"kind": "K", "metadata": {"name": "n"}}],
                    "patchesJson6902": [
                        {"target": {"kind": "K"}, "patch": [{"op": "remove", "path": "/a"}]}
                    ],
                }
            ],
            id="v2beta1-patches",
        ),
    ],
)
def test_passes(renderers: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    models = [PostRenderer.model_validate(r) for r in renderers]
    assert postrendering.passes(models) == expected
    assert yaml.safe_load(yaml.safe_dump(expected)) == expected


async def test_common_metadata_reaches_every_object_after_the_post_renderers(
    helm_delivery: HelmDelivery,
) -> None:
    d = helm_delivery
    ns = d.namespace
    await web_chart(d)
    await d.helm_release(
        "web",
        commonMetadata={"labels": {"team": "a", "app": "common"}, "annotations": {"owner": "me"}},
        postRenderers=[
            {
                "kustomize": {
                    "patches": [
                        {
                            "patch": '- op: add\n  path: /metadata/labels/team\n  value: "b"\n',
                            "target": {"kind": "ConfigMap"},
                        }
                    ]
                }
            }
        ],
        **NO_WAIT,
    )
    await d.observe.wait_ready(HELMRELEASE, "web", timeout=60)
    cm = await d.kube.get(CONFIG_MAP, "web-config", ns)
    deployment = await d.kube.get(DEPLOYMENT, "web", ns)
    for obj in (cm, deployment):
        # commonMetadata runs last and wins over the chart and the post-renderers.
        assert obj["metadata"]["labels"]["team"] == "a"
        assert obj["metadata"]["annotations"]["owner"] == "me"
    assert deployment["metadata"]["labels"]["app"] == "common"
    # Only the objects' own metadata: selectors and pod templates keep the chart's.
    assert deployment["spec"]["selector"]["matchLabels"] == {"app": "web"}
    assert deployment["spec"]["template"]["metadata"]["labels"] == {"app": "web"}


@pytest.mark.parametrize(
    ("manifest", "common", "expected"),
    [
        pytest.param(
            "kind: A\nmetadata:\n  name: a\n",
            {"labels": {"x": "1"}},
            [{"labels": {"x": "1"}, "name": "a"}],
            id="adds-labels",
        ),
        pytest.param(
            "kind: A\nmetadata:\n  name: a\n  labels: {x: old, y: kept}\n---\n",
            {"labels": {"x": "new"}, "annotations": {"n": "v"}},
            [{"annotations": {"n": "v"}, "labels": {"x": "new", "y": "kept"}, "name": "a"}],
            id="overrides-equal-keys-and-drops-empty-documents",
        ),
        pytest.param(
            "kind: A\nmetadata:\n  name: a\n  annotations: {at: 10:30}\n",
            {"annotations": {"n": "v"}},
            [{"annotations": {"at": "10:30", "n": "v"}, "name": "a"}],
            id="values-read-as-kubernetes-reads-them",
        ),
    ],
)
def test_with_common_metadata(
    manifest: str, common: dict[str, Any], expected: list[dict[str, Any]]
) -> None:
    rendered = postrendering.with_common_metadata(manifest, CommonMetadata.model_validate(common))
    assert [doc["metadata"] for doc in yaml.safe_load_all(rendered)] == expected
