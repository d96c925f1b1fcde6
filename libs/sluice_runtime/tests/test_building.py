"""Building with the real kustomize (kubectl's built-in copy when no standalone binary)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from sluice_api.kustomize import KustomizationSpec
from sluice_runtime.building import (
    BuildError,
    Kustomize,
    build,
    find_kustomize,
    kustomization_file,
    load_yaml,
)


@pytest.fixture(scope="module")
def kustomize() -> Kustomize:
    return find_kustomize()


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())


def spec(**fields: Any) -> KustomizationSpec:
    return KustomizationSpec.model_validate(
        {
            "sourceRef": {"kind": "GitRepository", "name": "source"},
            "interval": "5m",
            "prune": True,
            **fields,
        }
    )


def by_name(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects}


def config_map(name: str, **data: str) -> str:
    return yaml.safe_dump(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}
    )


DEPLOYMENT = """
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: web
      labels:
        app: web
    spec:
      replicas: 1
      selector:
        matchLabels:
          app: web
      template:
        metadata:
          labels:
            app: web
        spec:
          containers:
            - name: web
              image: ghcr.io/example/web:1.0.0
            - name: sidecar
              image: ghcr.io/example/sidecar:1.0.0
"""


def test_find_kustomize_is_v5_and_cached(kustomize: Kustomize) -> None:
    assert kustomize.version.startswith("v5")
    assert find_kustomize() is kustomize


async def test_generates_a_kustomization_listing_every_manifest(
    tmp_path: Path, kustomize: Kustomize
) -> None:
    write(
        tmp_path,
        {
            "apps/cm.yaml": config_map("top"),
            "apps/nested/deeper/two.yml": config_map("two-a") + "---\n" + config_map("two-b"),
            "apps/base/kustomization.yaml": "resources: [cm.yaml]\nnameSuffix: -based\n",
            "apps/base/cm.yaml": config_map("base"),
            "apps/base/unlisted.yaml": config_map("unlisted"),
            "apps/values.yaml": "replicaCount: 2\nimage: {tag: latest}\n",
            "apps/.github/workflows/ci.yml": "on: push\njobs: {}\n",
            "apps/list.json": '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "j"}}',
            "apps/notes.txt": "not yaml at all: [",
            "apps/empty.yaml": "",
        },
    )

    objects = await build(tmp_path, spec(path="./apps"), kustomize=kustomize)

    assert sorted(by_name(objects)) == ["base-based", "top", "two-a", "two-b"]
    generated = load_yaml((tmp_path / "apps/kustomization.yaml").read_text())
    # Flux's order: lexical, depth first; nested kustomizations listed as directories.
    assert generated["resources"] == ["base", "cm.yaml", "nested/deeper/two.yml"]


async def test_empty_directory_builds_nothing(tmp_path: Path, kustomize: Kustomize) -> None:
    (tmp_path / "empty").mkdir()
    assert await build(tmp_path, spec(path="empty"), kustomize=kustomize) == []


async def test_root_is_the_default_path_and_a_leading_slash_means_the_root(
    tmp_path: Path, kustomize: Kustomize
) -> None:
    write(tmp_path, {"cm.yaml": config_map("root"), "apps/cm.yaml": config_map("apps")})

    assert sorted(by_name(await build(tmp_path, spec(), kustomize=kustomize))) == [
        "apps",
        "root",
    ]
    (tmp_path / "kustomization.yaml").unlink(missing_ok=True)  # written only when kustomize builds
    (tmp_path / "apps/kustomization.yaml").unlink(missing_ok=True)
    assert list(by_name(await build(tmp_path, spec(path="/apps"), kustomize=kustomize))) == ["apps"]


async def test_spec_fields_are_merged_into_an_existing_kustomization(
    tmp_path: Path, kustomize: Kustomize
) -> None:
    write(
        tmp_path,
        {
            "app/kustomization.yaml": """
                apiVersion: kustomize.config.k8s.io/v1beta1
                kind: Kustomization
                namespace: from-file
                resources: [deployment.yaml, cm.yaml]
                images:
                  - name: ghcr.io/example/web
                    newTag: from-file
                patches:
                  - target: {kind: ConfigMap}
                    patch: |
                      - op: add
                        path: /data/from-file
                        value: "yes"
            """,
            "app/deployment.yaml": DEPLOYMENT,
            "app/cm.yaml": config_map("settings", mode="dev"),
            "components/extra/kustomization.yaml": """
                apiVersion: kustomize.config.k8s.io/v1alpha1
                kind: Component
                resources: [extra.yaml]
            """,
            "components/extra/extra.yaml": config_map("extra"),
        },
    )
    fields = {
        "path": "app",
        "targetNamespace": "team-a",
        "namePrefix": "pre-",
        "nameSuffix": "-suf",
        "patches": [
            {  # strategic merge, naming its own target
                "patch": "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n"
                "spec:\n  replicas: 3\n"
            },
            {  # JSON 6902 with a selector
                "patch": '[{"op": "replace", "path": "/data/mode", "value": "prod"}]',
                "target": {"kind": "ConfigMap", "name": "settings"},
            },
            {  # strategic merge applied through a label selector
                "patch": "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: any\n"
                "  annotations:\n    patched: by-selector\n",
                "target": {"kind": "Deployment", "labelSelector": "app=web"},
            },
        ],
        "images": [
            {"name": "ghcr.io/example/web", "newTag": "2.0.0"},
            {
                "name": "ghcr.io/example/sidecar",
                "newName": "mirror.example/sidecar",
                "digest": "sha256:" + "a" * 64,
            },
        ],
        "components": ["../components/extra"],
        "commonMetadata": {"labels": {"team": "a"}, "annotations": {"owner": "team-a"}},
    }

    objects = by_name(await build(tmp_path, spec(**fields), kustomize=kustomize))

    assert sorted(objects) == ["pre-extra-suf", "pre-settings-suf", "pre-web-suf"]
    assert {o["metadata"]["namespace"] for o in objects.values()} == {"team-a"}
    web = objects["pre-web-suf"]
    assert web["spec"]["replicas"] == 3
    assert web["metadata"]["annotations"] == {"patched": "by-selector", "owner": "team-a"}
    images = [c["image"] for c in web["spec"]["template"]["spec"]["containers"]]
    # The spec's image replaces the file's entry for the same name, as in Flux.
    assert images == ["ghcr.io/example/web:2.0.0", "mirror.example/sidecar@sha256:" + "a" * 64]
    # commonMetadata reaches the objects' own metadata only, never selectors or templates.
    assert web["metadata"]["labels"] == {"app": "web", "team": "a"}
    assert web["spec"]["selector"]["matchLabels"] == {"app": "web"}
    assert web["spec"]["template"]["metadata"] == {"labels": {"app": "web"}}
    settings = objects["pre-settings-suf"]
    assert settings["data"] == {"mode": "prod", "from-file": "yes"}
    assert settings["metadata"]["labels"] == {"team": "a"}


@pytest.mark.parametrize("filename", ["kustomization.yml", "Kustomization"])
async def test_other_kustomization_file_names_are_edited_in_place(
    tmp_path: Path, kustomize: Kustomize, filename: str
) -> None:
    write(tmp_path, {filename: "resources: [cm.yaml]\n", "cm.yaml": config_map("cm")})

    objects = await build(tmp_path, spec(targetNamespace="elsewhere"), kustomize=kustomize)

    assert objects[0]["metadata"]["namespace"] == "elsewhere"
    assert kustomization_file(tmp_path) == tmp_path / filename
    assert not (tmp_path / "kustomization.yaml").exists()


async def test_missing_component_fails_unless_ignored(tmp_path: Path, kustomize: Kustomize) -> None:
    write(
        tmp_path,
        {
            "app/kustomization.yaml": "resources: [cm.yaml]\n",
            "app/cm.yaml": config_map("cm"),
            "components/real/kustomization.yaml": (
                "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n"
                "commonLabels: {component: real}\n"
            ),
        },
    )
    fields = {"path": "app", "components": ["../components/real", "../components/gone"]}

    with pytest.raises(BuildError, match=r"component '\.\./components/gone' not found"):
        await build(tmp_path, spec(**fields), kustomize=kustomize)

    objects = await build(
        tmp_path, spec(**fields, ignoreMissingComponents=True), kustomize=kustomize
    )
    assert objects[0]["metadata"]["labels"] == {"component": "real"}


@pytest.mark.parametrize(
    ("path", "message"),
    [
        pytest.param("missing", "path 'missing' not found in the artifact", id="missing"),
        pytest.param("cm.yaml", "path 'cm.yaml' is not a directory", id="file"),
        pytest.param("../", "path '../' is outside the artifact", id="parent"),
        pytest.param(
            "apps/../../etc", "path 'apps/../../etc' is outside the artifact", id="dotdot"
        ),
        pytest.param("escape", "path 'escape' is outside the artifact", id="symlink"),
    ],
)
async def test_path_must_be_a_directory_inside_the_artifact(
    tmp_path: Path, kustomize: Kustomize, path: str, message: str
) -> None:
    root = tmp_path / "artifact"
    write(root, {"cm.yaml": config_map("cm"), "apps/cm.yaml": config_map("apps")})
    (tmp_path / "outside").mkdir()
    (root / "escape").symlink_to(tmp_path / "outside")

    with pytest.raises(BuildError) as error:
        await build(root, spec(path=path), kustomize=kustomize)

    assert str(error.value) == message


@pytest.mark.parametrize("generated", [False, True], ids=["listed", "generated"])
async def test_bad_yaml_names_the_file_and_line(
    tmp_path: Path, kustomize: Kustomize, generated: bool
) -> None:
    write(
        tmp_path,
        {
            "app/base/bad.yaml": "apiVersion: v1\nkind: ConfigMap\ndata:\n  key: a: b\n",
            "app/good.yaml": config_map("good"),
        },
    )
    if not generated:
        write(
            tmp_path,
            {
                "app/kustomization.yaml": "resources: [base, good.yaml]\n",
                "app/base/kustomization.yaml": "resources: [bad.yaml]\n",
            },
        )

    with pytest.raises(BuildError) as error:
        await build(tmp_path, spec(path="app"), kustomize=kustomize)

    assert str(error.value) == (
        "kustomize build failed: app/base/bad.yaml: "
        "yaml: line 4: mapping values are not allowed in this context"
    )


async def test_invalid_kustomization_file_is_reported(tmp_path: Path, kustomize: Kustomize) -> None:
    write(tmp_path, {"kustomization.yaml": "resources:\n  - a.yaml\n - b.yaml\n"})

    with pytest.raises(
        BuildError, match=r"^kustomize build failed: kustomization.yaml: yaml: line"
    ):
        await build(tmp_path, spec(namePrefix="x-"), kustomize=kustomize)


async def test_kustomize_errors_are_reported_without_temporary_paths(
    tmp_path: Path, kustomize: Kustomize
) -> None:
    write(tmp_path, {"app/kustomization.yaml": "resources: [missing.yaml]\n"})

    with pytest.raises(BuildError) as error:
        await build(tmp_path, spec(path="app"), kustomize=kustomize)

    message = str(error.value)
    assert message.startswith("kustomize build failed: ")
    assert "app/missing.yaml" in message
    assert str(tmp_path) not in message
    assert "command failed" not in message


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param("https://github.com/example/repo//deploy?ref=v1.0.0", id="https"),
        pytest.param("http://example.com/manifests.yaml", id="http"),
        pytest.param("github.com/example/repo/deploy?ref=main", id="github-ref"),
        pytest.param("github.com/example/repo/deploy", id="github"),
        pytest.param("git@github.com:example/repo.git", id="ssh"),
        pytest.param("git::https://example.com/repo.git", id="git-prefix"),
        pytest.param("ssh://git@example.com/repo.git", id="ssh-url"),
    ],
)
async def test_remote_bases_are_refused(tmp_path: Path, kustomize: Kustomize, entry: str) -> None:
    # Two levels down, so the check follows the bases the build reaches.
    write(
        tmp_path,
        {
            "app/kustomization.yaml": "resources: [../base]\n",
            "base/kustomization.yaml": f"resources:\n  - cm.yaml\n  - {entry}\n",
            "base/cm.yaml": config_map("cm"),
            "unrelated/kustomization.yaml": "resources: [https://example.com/never-built]\n",
        },
    )

    with pytest.raises(BuildError) as error:
        await build(tmp_path, spec(path="app"), kustomize=kustomize)

    assert str(error.value) == (
        f"base/kustomization.yaml resources: remote reference '{entry}' is not allowed; "
        "only files inside the artifact can be built"
    )


async def test_remote_components_are_refused(tmp_path: Path, kustomize: Kustomize) -> None:
    write(tmp_path, {"cm.yaml": config_map("cm")})
    remote = "https://github.com/example/components//labels?ref=v1"

    with pytest.raises(BuildError, match=r"^kustomization\.yaml components: remote reference"):
        await build(tmp_path, spec(components=[remote]), kustomize=kustomize)


async def test_local_directory_that_looks_like_a_host_is_not_remote(
    tmp_path: Path, kustomize: Kustomize
) -> None:
    write(
        tmp_path,
        {
            "kustomization.yaml": "resources: [example.com/team]\n",
            "example.com/team/kustomization.yaml": "resources: [cm.yaml]\n",
            "example.com/team/cm.yaml": config_map("local"),
        },
    )

    assert list(by_name(await build(tmp_path, spec(), kustomize=kustomize))) == ["local"]


@pytest.mark.parametrize(
    ("kustomization", "message"),
    [
        pytest.param(
            "resources: [../../outside.yaml]\n",
            "app/kustomization.yaml resources: '../../outside.yaml' points outside the artifact",
            id="dotdot",
        ),
        pytest.param(
            "resources: [link.yaml]\n",
            "app/kustomization.yaml resources: 'link.yaml' points outside the artifact",
            id="symlink",
        ),
        pytest.param(
            "configMapGenerator:\n  - name: stolen\n    files: [token=/etc/hostname]\n",
            "app/kustomization.yaml configMapGenerator: '/etc/hostname' is an absolute path "
            "outside the artifact",
            id="absolute-file",
        ),
        pytest.param(
            "resources: [cm.yaml]\npatches:\n  - path: ../../outside.yaml\n",
            "app/kustomization.yaml patches: '../../outside.yaml' points outside the artifact",
            id="patch-file",
        ),
        pytest.param(
            "resources: [file:///srv/repo]\n",
            "app/kustomization.yaml resources: 'file:///srv/repo': file URLs are not allowed",
            id="file-url",
        ),
    ],
)
async def test_references_outside_the_artifact_are_refused(
    tmp_path: Path, kustomize: Kustomize, kustomization: str, message: str
) -> None:
    root = tmp_path / "artifact"
    write(root, {"app/kustomization.yaml": kustomization, "app/cm.yaml": config_map("cm")})
    write(tmp_path, {"outside.yaml": config_map("secret-stuff")})
    os.symlink(tmp_path / "outside.yaml", root / "app/link.yaml")

    with pytest.raises(BuildError) as error:
        await build(root, spec(path="app"), kustomize=kustomize)

    assert str(error.value) == message


async def test_files_elsewhere_in_the_artifact_may_be_referenced(
    tmp_path: Path, kustomize: Kustomize
) -> None:
    # kustomize's default would refuse this; Flux (and Sluice) bound loads by the artifact.
    write(
        tmp_path,
        {
            "overlay/kustomization.yaml": "resources: [../common/cm.yaml]\n",
            "common/cm.yaml": config_map("shared"),
        },
    )

    assert list(by_name(await build(tmp_path, spec(path="overlay"), kustomize=kustomize))) == [
        "shared"
    ]


async def test_a_slow_build_times_out(tmp_path: Path, kustomize: Kustomize) -> None:
    # A kustomization file, so that kustomize (not the in-process reader) builds it.
    write(tmp_path, {"cm.yaml": config_map("cm"), "kustomization.yaml": "resources: [cm.yaml]\n"})

    with pytest.raises(BuildError, match=r"^kustomize build timed out after 0.001s$"):
        await build(tmp_path, spec(), kustomize=kustomize, timeout=0.001)


async def test_values_keep_their_types(tmp_path: Path, kustomize: Kustomize) -> None:
    write(
        tmp_path,
        {
            "cm.yaml": """
                apiVersion: v1
                kind: ConfigMap
                metadata:
                  name: types
                  annotations:
                    at: "2024-01-01"
                    time: "10:30"
                    equals: "="
                data:
                  port: "8080"
                  enabled: "true"
            """
        },
    )

    [obj] = await build(tmp_path, spec(), kustomize=kustomize)

    assert obj["metadata"]["annotations"] == {"at": "2024-01-01", "time": "10:30", "equals": "="}
    assert obj["data"] == {"port": "8080", "enabled": "true"}
