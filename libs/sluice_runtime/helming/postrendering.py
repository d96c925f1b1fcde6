"""`spec.postRenderers` and `spec.commonMetadata`: Flux's post-renderers, run by helm.

helm pipes the chart's rendered manifests through the program given with
`--post-renderer` and installs (and records in the release) what it prints;
so `helm get manifest`, drift detection and upgrades all see the
post-rendered objects, as with Flux. That program is this module, run with
the controller's interpreter: each post-renderer in order is one kustomize
pass over the previous pass's output, with its `patches` (strategic merge
or JSON 6902, with targets) and `images` merged into a generated
kustomization exactly as the kustomize-controller merges a Kustomization's,
through the same `sluice_runtime.building` (kustomize confined to the pass's
directory, without network). Then `commonMetadata` labels and annotations
are set on every object's own metadata (overriding equal keys, never
selectors or pod templates), as Flux's last post-renderer does.

The controller writes the renderers as JSON into the release's private work
directory before it runs helm, and names that directory as the program's
only argument: the tenant's patches never go through a command line.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from sluice_api.helm import CommonMetadata, PostRenderer
from sluice_api.kustomize import CommonMetadata as KustomizeCommonMetadata
from sluice_api.kustomize import KustomizationSpec
from sluice_runtime import building

RENDERERS_FILE = "post-renderers.json"
MANIFEST_FILE = "helm-output.yaml"
PASS_TIMEOUT = 60.0


def passes(renderers: list[PostRenderer]) -> list[dict[str, Any]]:
    """The kustomize fields (`patches`, `images`, and v2beta1's and v2beta2's
    `patchesStrategicMerge` and `patchesJson6902`, which the Kustomization's
    build applies the same way) of each pass, in order; renderers without
    anything to do make no pass."""
    found = []
    for renderer in renderers:
        kustomize = renderer.kustomize
        if kustomize is None or not (
            kustomize.patches
            or kustomize.images
            or kustomize.patches_strategic_merge
            or kustomize.patches_json6902
        ):
            continue
        fragment: dict[str, Any] = {}
        if kustomize.patches_strategic_merge:
            fragment["patchesStrategicMerge"] = kustomize.patches_strategic_merge
        if kustomize.patches_json6902:
            fragment["patchesJson6902"] = [
                p.model_dump(by_alias=True, exclude_none=True) for p in kustomize.patches_json6902
            ]
        if kustomize.patches:
            fragment["patches"] = [
                p.model_dump(by_alias=True, exclude_none=True) for p in kustomize.patches
            ]
        if kustomize.images:
            fragment["images"] = [
                i.model_dump(by_alias=True, exclude_none=True) for i in kustomize.images
            ]
        found.append(fragment)
    return found


def helm_args(
    renderers: list[PostRenderer], common: CommonMetadata | None, work: Path
) -> list[str]:
    """helm's `--post-renderer` flags for `renderers` and `common`, after writing them
    into `work`; none when there is nothing to render."""
    found = passes(renderers)
    metadata = (
        common.model_dump(by_alias=True, exclude_none=True)
        if common is not None and (common.labels or common.annotations)
        else None
    )
    if not found and metadata is None:
        return []
    work.mkdir(parents=True, exist_ok=True)
    (work / RENDERERS_FILE).write_text(json.dumps({"passes": found, "commonMetadata": metadata}))
    args = ["--post-renderer", sys.executable]
    for arg in ("-m", __name__, str(work)):
        args += ["--post-renderer-args", arg]
    return args


def _spec(fragment: dict[str, Any]) -> KustomizationSpec:
    # A Kustomization spec only for its kustomize fields; the rest is required filler.
    return KustomizationSpec.model_validate(
        {
            "sourceRef": {"kind": "GitRepository", "name": "helm"},
            "interval": "1m",
            "prune": False,
            "path": "./",
            **fragment,
        }
    )


async def render(manifest: str, work: Path) -> str:
    """Run every pass of `work`'s renderers over `manifest`; raise building.BuildError."""
    config = json.loads((work / RENDERERS_FILE).read_text())
    for index, fragment in enumerate(config["passes"]):
        root = work / f"pass-{index}"
        root.mkdir()
        (root / MANIFEST_FILE).write_text(manifest)
        objects = await building.build(
            root, _spec(fragment), kustomize=building.find_kustomize(), timeout=PASS_TIMEOUT
        )
        manifest = yaml.safe_dump_all(objects, sort_keys=False)
    if config.get("commonMetadata"):
        manifest = with_common_metadata(
            manifest, CommonMetadata.model_validate(config["commonMetadata"])
        )
    return manifest


def with_common_metadata(manifest: str, common: CommonMetadata) -> str:
    """`manifest` with `common`'s labels and annotations on every object's metadata."""
    objects = [doc for doc in building.load_yaml_all(manifest) if isinstance(doc, dict)]
    # The same field as a Kustomization's, so the same code sets it.
    building.set_common_metadata(
        objects, KustomizeCommonMetadata(labels=common.labels, annotations=common.annotations)
    )
    return yaml.safe_dump_all(objects, sort_keys=False)


def main() -> None:
    work = Path(sys.argv[1])
    manifest = sys.stdin.read()
    try:
        rendered = asyncio.run(render(manifest, work))
    except (building.BuildError, building.KustomizeUnavailable, yaml.YAMLError) as error:
        # helm shows this line in its error, which becomes the condition's message.
        print(f"post-renderer: {error}", file=sys.stderr)
        sys.exit(1)
    sys.stdout.write(rendered)


if __name__ == "__main__":
    main()
