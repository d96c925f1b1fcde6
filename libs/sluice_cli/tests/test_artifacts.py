"""The artifact commands' pure parts: the manifest, packing, and where credentials come from."""

from __future__ import annotations

import base64
import io
import json
import stat
import tarfile
from pathlib import Path

import pytest

from sluice_cli.artifacts import (
    DEFAULT_IGNORE_PATHS,
    ArtifactCommandError,
    docker_credentials,
    ignore_paths,
    pack,
)
from sluice_runtime.oci import artifacts as layout
from sluice_runtime.oci.registry import Reference

REF = Reference.parse("oci://registry.example:5000/team/app:v1")
HUB = Reference.parse("oci://docker.io/team/app:v1")


def names(layer: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(layer)) as archive:
        return [m.name for m in archive.getmembers()]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        pytest.param({}, {layout.CREATED_ANNOTATION: "T", layout.SOURCE_ANNOTATION: "S", layout.REVISION_ANNOTATION: "R"}, id="flux-three"),
        pytest.param({"team": "x"}, {layout.CREATED_ANNOTATION: "T", layout.SOURCE_ANNOTATION: "S", layout.REVISION_ANNOTATION: "R", "team": "x"}, id="extra"),
        pytest.param({layout.REVISION_ANNOTATION: "other"}, {layout.CREATED_ANNOTATION: "T", layout.SOURCE_ANNOTATION: "S", layout.REVISION_ANNOTATION: "R"}, id="flags-win"),
    ],
)  # fmt: skip
def test_manifest_annotations(extra: dict[str, str], expected: dict[str, str]) -> None:
    assert layout.manifest_annotations(source="S", revision="R", created="T", extra=extra) == (
        expected
    )


def test_without_source_or_revision_only_created_is_set() -> None:
    found = layout.manifest_annotations(source="", revision="", created="T")
    assert found == {layout.CREATED_ANNOTATION: "T"}


def test_the_manifest_is_canonical() -> None:
    layer = layout.Descriptor.of(b"layer", layout.CONTENT_MEDIA_TYPE)
    config = layout.Descriptor.of(layout.EMPTY_CONFIG, layout.CONFIG_MEDIA_TYPE)
    first = layout.manifest(config=config, layer=layer, annotations={"b": "2", "a": "1"})
    again = layout.manifest(config=config, layer=layer, annotations={"a": "1", "b": "2"})
    assert first == again
    body = json.loads(first)
    assert body["mediaType"] == layout.MANIFEST_MEDIA_TYPE
    assert body["config"] == {
        "mediaType": layout.CONFIG_MEDIA_TYPE,
        "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
        "size": 2,
    }
    assert [entry["mediaType"] for entry in body["layers"]] == [layout.CONTENT_MEDIA_TYPE]


@pytest.mark.parametrize(
    ("layers", "chosen"),
    [
        pytest.param([{"mediaType": "other", "digest": "a"}, {"mediaType": layout.CONTENT_MEDIA_TYPE, "digest": "b"}], "b", id="flux-type-wins"),
        pytest.param([{"mediaType": "application/x-tar", "digest": "a"}], "a", id="only-layer"),
        pytest.param([{"mediaType": "x", "digest": "a"}, {"mediaType": "y", "digest": "b"}], None, id="ambiguous"),
        pytest.param([], None, id="none"),
    ],
)  # fmt: skip
def test_content_layer(layers: list[dict[str, str]], chosen: str | None) -> None:
    found = layout.content_layer({"layers": layers})
    assert (found or {}).get("digest") == chosen


def test_pack_applies_sourceignore_and_ignore_paths(tmp_path: Path) -> None:
    for name in ("a.yaml", "docs/x.md", "skip/me.yaml", ".git/HEAD", ".sourceignore"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("*.md\n" if name == ".sourceignore" else "x\n")
    assert names(pack(tmp_path, ignore_paths=["skip/"])) == [".sourceignore", "a.yaml"]
    # Patterns given replace the default, so an image can be pushed on purpose.
    (tmp_path / "logo.png").write_bytes(b"png")
    assert "logo.png" in names(pack(tmp_path, ignore_paths=[]))


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(None, list(DEFAULT_IGNORE_PATHS), id="not-given-flux-default"),
        pytest.param(["secrets/"], ["secrets/"], id="given-replaces-default"),
        pytest.param(["a/, b/", "c.md"], ["a/", "b/", "c.md"], id="comma-and-repeat"),
        pytest.param([""], [], id="empty-means-none"),
    ],
)
def test_ignore_paths(values: list[str] | None, expected: list[str]) -> None:
    assert ignore_paths(values) == expected


def test_the_default_leaves_out_what_flux_push_leaves_out(tmp_path: Path) -> None:
    # Flux's excludeOCI: ExcludeVCS and ExcludeExt; its CI exclusions are not in it.
    files = (
        "a.yaml", "logo.png", "photo.JPG.jpg", "anim.gif", "bundle.tar.gz", "old.zip",
        "clip.flv", "clip.wmv", "pic.jpeg", ".gitignore", ".gitattributes", ".gitmodules",
        ".github/workflows/ci.yaml", "docs/diagram.png", "chart.tgz",
    )  # fmt: skip
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    layer = pack(tmp_path, ignore_paths=ignore_paths(None))
    with tarfile.open(fileobj=io.BytesIO(layer)) as archive:
        packed = sorted(m.name for m in archive.getmembers() if m.isfile())
    assert packed == [".github/workflows/ci.yaml", "a.yaml", "chart.tgz"]


def test_pack_is_deterministic_and_a_file_goes_at_the_root(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "cm.yaml").write_text("x\n")
    assert pack(tmp_path / "dir", ignore_paths=[]) == pack(tmp_path / "dir", ignore_paths=[])
    assert names(pack(tmp_path / "dir" / "cm.yaml", ignore_paths=[])) == ["cm.yaml"]
    assert pack(tmp_path / "dir" / "cm.yaml", ignore_paths=[]) == pack(
        tmp_path / "dir", ignore_paths=[]
    )


def test_pack_refuses_a_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ArtifactCommandError, match=r"path '.*nowhere' does not exist"):
        pack(tmp_path / "nowhere", ignore_paths=[])


def helper(tmp_path: Path, script: str) -> None:
    program = tmp_path / "bin" / "docker-credential-test"
    program.parent.mkdir(exist_ok=True)
    program.write_text("#!/bin/sh\n" + script)
    program.chmod(program.stat().st_mode | stat.S_IEXEC)


AUTH = base64.b64encode(b"robot:s3cret").decode()


@pytest.mark.parametrize(
    ("config", "script", "expected"),
    [
        pytest.param(None, None, (None, None), id="no-file"),
        pytest.param({"auths": {"registry.example:5000": {"auth": AUTH}}}, None, ("robot", "s3cret"), id="inline-auth"),
        pytest.param({"auths": {"https://registry.example:5000/v1/": {"username": "u", "password": "p"}}}, None, ("u", "p"), id="url-key"),
        pytest.param({"auths": {"other.example": {"auth": AUTH}}}, None, (None, None), id="other-host"),
        pytest.param({"credsStore": "test"}, 'read host; echo "{\\"Username\\":\\"h-$host\\",\\"Secret\\":\\"t\\"}"', ("h-registry.example:5000", "t"), id="store-helper"),
        pytest.param({"credHelpers": {"registry.example:5000": "test"}}, 'echo "{\\"Username\\":\\"u\\",\\"Secret\\":\\"t\\"}"', ("u", "t"), id="per-host-helper"),
        pytest.param({"credsStore": "test"}, "echo credentials not found in native keychain; exit 1", (None, None), id="helper-has-none"),
        pytest.param({"auths": {"https://index.docker.io/v1/": {"auth": AUTH}}}, None, ("robot", "s3cret"), id="hub-docker-login"),
        pytest.param({"credsStore": "test"}, 'read server; echo "{\\"Username\\":\\"h-$server\\",\\"Secret\\":\\"t\\"}"', ("h-https://index.docker.io/v1/", "t"), id="hub-helper-asked-for-index"),
    ],
)  # fmt: skip
def test_docker_credentials(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    config: dict[str, object] | None,
    script: str | None,
    expected: tuple[str | None, str | None],
) -> None:
    path = tmp_path / "config.json"
    if config is not None:
        path.write_text(json.dumps(config))
    if script is not None:
        helper(tmp_path, script)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    ref = HUB if "hub" in request.node.callspec.id else REF
    assert docker_credentials(path, ref) == expected


@pytest.mark.parametrize(
    ("config", "script", "message"),
    [
        pytest.param("{not json", None, "cannot read Docker config", id="garbage"),
        pytest.param(json.dumps({"credsStore": "absent"}), None, "docker-credential-absent is not on PATH", id="helper-missing"),
        pytest.param(json.dumps({"credsStore": "test"}), "echo boom >&2; exit 3", "failed with exit code 3", id="helper-fails"),
        pytest.param(json.dumps({"credsStore": "test"}), "echo '{}'", "other than credentials", id="helper-garbage"),
    ],
)  # fmt: skip
def test_docker_credentials_refusals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str, script: str | None, message: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(config)
    if script is not None:
        helper(tmp_path, script)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    with pytest.raises(ArtifactCommandError, match=message):
        docker_credentials(path, REF)
