"""Reading a kustomization file's paths as kustomize will read them (building.references)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sluice_runtime.building import BuildError
from sluice_runtime.building.references import (
    MAX_KUSTOMIZATION_FILE,
    Reference,
    read_kustomization,
    resolve,
)


def read(tmp_path: Path, text: str) -> tuple[Reference, ...]:
    kfile = tmp_path / "kustomization.yaml"
    kfile.write_text(text)
    return read_kustomization(tmp_path, kfile).references


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "resources: [a.yaml, sub]\n",
            [("resources", "a.yaml"), ("resources", "sub")],
            id="plain",
        ),
        pytest.param(
            "resources: [\"a b.yaml\", 'c.yaml']\n",
            [("resources", "a b.yaml"), ("resources", "c.yaml")],
            id="quoted",
        ),
        pytest.param(
            "secretGenerator:\n- name: s\n  files: [key=data/f, data/g]\n  envs: [e.env]\n"
            "configMapGenerator:\n- name: c\n  env: one.env\n",
            [
                ("secretGenerator", "data/f"),
                ("secretGenerator", "data/g"),
                ("secretGenerator", "e.env"),
                ("configMapGenerator", "one.env"),
            ],
            id="generators",
        ),
        pytest.param(
            "patches:\n- path: p.yaml\n- patch: |\n    - op: remove\n      path: /x\n"
            "replacements:\n- path: r.yaml\nopenapi:\n  path: schema.json\n",
            [("patches", "p.yaml"), ("replacements", "r.yaml"), ("openapi", "schema.json")],
            id="items-inline-patches-are-not-paths",
        ),
        pytest.param(
            "crds: [c.yaml]\nconfigurations: [k.yaml]\n",
            [("crds", "c.yaml"), ("configurations", "k.yaml")],
            id="files",
        ),
        pytest.param(
            "components: [../c]\nbases: [../b]\n",
            [("components", "../c"), ("bases", "../b")],
            id="dirs",
        ),
        pytest.param(
            "namePrefix: SecretGenerator-\nimages: [{name: files}]\n",
            [],
            id="values-named-like-fields",
        ),
        pytest.param("", [], id="empty"),
    ],
)
def test_paths_are_read_from_every_field(
    tmp_path: Path, text: str, expected: list[tuple[str, str]]
) -> None:
    assert [(r.field, r.path) for r in read(tmp_path, text)] == expected


def test_an_inline_patch_is_kept_as_a_document(tmp_path: Path) -> None:
    [ref] = read(
        tmp_path,
        "patchesStrategicMerge:\n- |\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\n",
    )
    assert ref.inline and ref.path.startswith("apiVersion: v1\nkind: ConfigMap")


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        pytest.param(
            "resources: [!!str a.yaml]\n",
            "YAML tags (tag:yaml.org,2002:str) are refused",
            id="any-tag",
        ),
        pytest.param("resources: !!seq [a.yaml]\n", "YAML tags", id="collection-tag"),
        pytest.param("x: &a [a.yaml]\nresources: *a\n", "aliases (*a) are refused", id="alias"),
        pytest.param("<<: {resources: [a.yaml]}\n", "merge keys (<<) are refused", id="top-merge"),
        pytest.param("Resources: [a.yaml]\n", "spell it 'resources'", id="title-case"),
        pytest.param("RESOURCES: [a.yaml]\n", "spell it 'resources'", id="upper-case"),
        pytest.param("patches:\n- Path: p.yaml\n", "spell it 'path'", id="item-key"),
        pytest.param("openapi: {PATH: s.json}\n", "spell it 'path'", id="openapi-key"),
        pytest.param(
            "configMapGenerator:\n- name: c\n  Env: e\n", "spell it 'env'", id="generator-env"
        ),
        pytest.param("resources: [1:20]\n", None, id="go-reads-sexagesimal-as-a-string"),
        pytest.param("resources: [12]\n", "entries must be strings", id="number"),
        pytest.param("resources: [{path: a}]\n", "entries must be strings", id="mapping"),
        pytest.param('resources: ["a\\tb"]\n', "control or separator character", id="tab"),
        pytest.param(
            'resources: ["a\\u2028b"]\n', "control or separator character", id="line-separator"
        ),
        pytest.param(
            'resources: ["a\\u202eb"]\n', "control or separator character", id="bidi-override"
        ),
        pytest.param('resources: [" a.yaml"]\n', "leading or trailing spaces", id="leading-space"),
        pytest.param("resources:\n- >-\n  a.yaml\n", "written on one line", id="folded-block"),
        pytest.param('resources: ["a\n  .yaml"]\n', "written on one line", id="multi-line-quoted"),
    ],
)
def test_what_go_would_read_differently_is_refused(
    tmp_path: Path, text: str, refusal: str | None
) -> None:
    if refusal is None:
        assert [r.path for r in read(tmp_path, text)] == ["1:20"]
        return
    with pytest.raises(
        BuildError,
        match=r".*" + refusal.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*"),
    ):
        read(tmp_path, text)


def test_an_oversized_kustomization_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="kustomization files over 4 MiB are refused"):
        read(tmp_path, "resources: [a.yaml]\n" + "#" * MAX_KUSTOMIZATION_FILE)


@pytest.mark.parametrize(
    ("entry", "inside"),
    [
        pytest.param("a/b.yaml", True, id="plain"),
        pytest.param("a/../b.yaml", True, id="dotdot-inside"),
        pytest.param("../b.yaml", False, id="parent"),
        pytest.param("link/../../b.yaml", False, id="lexical-before-symlinks"),
        pytest.param("link/b.yaml", True, id="through-a-symlink-inside"),
        pytest.param("out/b.yaml", False, id="through-a-symlink-outside"),
        pytest.param("x\n/../../b.yaml", False, id="newline-is-a-character"),
        pytest.param("foo.com/../../b.yaml", False, id="looks-remote"),
        pytest.param(
            "https://github.com/org/repo//dir?ref=v1", True, id="remote-url-stays-lexically"
        ),
    ],
)
def test_resolution_is_lexical_then_physical(tmp_path: Path, entry: str, inside: bool) -> None:
    root = tmp_path / "root"
    (root / "d1" / "d2").mkdir(parents=True)
    (root / "a").mkdir()
    os.symlink("d1/d2", root / "link")
    os.symlink(tmp_path, root / "out")
    (tmp_path / "b.yaml").write_text("outside\n")
    if inside:
        lexical, _ = resolve(root, root, entry, "f")
        assert lexical.startswith(str(root))
    else:
        with pytest.raises(BuildError, match="points outside the artifact"):
            resolve(root, root, entry, "f")
