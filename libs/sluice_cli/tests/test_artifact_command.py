"""`sluice push|pull|tag artifact`, `list artifacts`, `diff artifact` against the test registry.

Most commands run through `main()` in-process (the real argparse wiring and
exit codes, without a Python start-up each); the failures that must be one
clear line run as a subprocess, as a CI pipeline runs them.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import secrets
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from sluice_cli.main import main
from sluice_envtest.controlplane import free_port
from sluice_envtest.registry import OciRegistry
from sluice_runtime.oci.artifacts import (
    CONFIG_MEDIA_TYPE,
    CONTENT_MEDIA_TYPE,
    CREATED_ANNOTATION,
    MANIFEST_MEDIA_TYPE,
    REVISION_ANNOTATION,
    SOURCE_ANNOTATION,
)


@pytest.fixture(autouse=True)
def no_docker_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads the user's own ~/.docker/config.json."""
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))


@pytest.fixture
def repository(request: pytest.FixtureRequest) -> str:
    """A repository of its own in the session's registry."""
    return f"cli/{request.node.name.lower().replace('[', '-').rstrip(']')}-{secrets.token_hex(3)}"


def sluice(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root


MANIFESTS = {
    "deploy/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\n",
    "kustomization.yaml": "resources: [deploy/cm.yaml]\n",
}


def test_push_writes_fluxs_layout(
    oci_registry: OciRegistry, repository: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tree(tmp_path / "src", MANIFESTS)
    url = f"{oci_registry.oci_url(repository)}:v1"
    code, out, err = sluice(
        capsys, "push", "artifact", url, "--path", str(src), "--insecure-registry",
        "--source", "https://git.example/app.git", "--revision", "main@sha1:abc",
        "--annotations", "team=payments", "--output", "json",
    )  # fmt: skip
    assert code == 0, err
    printed = json.loads(out)
    manifest = oci_registry.manifest(repository, "v1")
    assert manifest == oci_registry.manifest(repository, printed["digest"])
    # `flux push artifact -o json`'s keys and values.
    assert printed == {
        "url": f"oci://{oci_registry.host}/{repository}@{printed['digest']}",
        "repository": f"{oci_registry.host}/{repository}",
        "tag": "v1",
        "digest": printed["digest"],
    }
    assert manifest["mediaType"] == MANIFEST_MEDIA_TYPE
    assert manifest["config"]["mediaType"] == CONFIG_MEDIA_TYPE
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == CONTENT_MEDIA_TYPE
    notes = manifest["annotations"]
    assert notes[SOURCE_ANNOTATION] == "https://git.example/app.git"
    assert notes[REVISION_ANNOTATION] == "main@sha1:abc"
    assert notes["team"] == "payments"
    assert notes[CREATED_ANNOTATION].endswith("Z") and notes[CREATED_ANNOTATION] > "2024"

    # A third-party client (oras) reads it: the layer is a tarball of the tree.
    (pulled,) = oci_registry.pull(repository, "v1", outdir=tmp_path / "oras")
    assert "sha256:" + hashlib.sha256(pulled.read_bytes()).hexdigest() == layer["digest"]
    with tarfile.open(pulled) as archive:
        assert sorted(m.name for m in archive.getmembers() if m.isfile()) == sorted(MANIFESTS)


def test_the_same_tree_pushed_twice_has_the_same_digest(
    oci_registry: OciRegistry, repository: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tree(tmp_path / "first", MANIFESTS)
    # The same files, written later, in another order, with another mode.
    second = tree(tmp_path / "second", dict(reversed(MANIFESTS.items())))
    os.utime(second / "kustomization.yaml", (1, 1))
    (second / "deploy").chmod(0o700)
    digests = []
    for n, src in enumerate((first, first, second)):
        url = f"{oci_registry.oci_url(repository)}:build-{n}"
        code, out, err = sluice(
            capsys, "push", "artifact", url, "--path", str(src), "--insecure-registry",
            "--source", "https://git.example/app.git", "--revision", "main@sha1:abc",
            "--reproducible",
        )  # fmt: skip
        assert code == 0, err
        digests.append(out.strip().rpartition("@")[2])
    assert digests[0].startswith("sha256:")
    assert len(set(digests)) == 1, digests
    manifest = oci_registry.manifest(repository, "build-0")
    assert manifest["annotations"][CREATED_ANNOTATION] == "1970-01-01T00:00:00Z"


def test_ignore_rules_are_sourceignores(
    oci_registry: OciRegistry, repository: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tree(
        tmp_path / "src",
        {
            **MANIFESTS,
            ".sourceignore": "*.md\n",
            "README.md": "docs\n",
            "secrets/key.pem": "x\n",
            "tests/test.yaml": "x\n",
            ".git/HEAD": "ref: refs/heads/main\n",
        },
    )
    url = f"{oci_registry.oci_url(repository)}:v1"
    code, _, err = sluice(
        capsys, "push", "artifact", url, "--path", str(src), "--insecure-registry",
        "--ignore-paths", "secrets/,tests/",
    )  # fmt: skip
    assert code == 0, err
    out_dir = tmp_path / "out"
    code, _, err = sluice(
        capsys, "pull", "artifact", url, "--output", str(out_dir), "--insecure-registry"
    )
    assert code == 0, err
    found = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file())
    assert found == sorted([".sourceignore", *MANIFESTS])


def test_without_ignore_paths_media_and_archives_are_left_out_as_by_flux(
    oci_registry: OciRegistry, repository: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tree(tmp_path / "src", {**MANIFESTS, "docs/logo.png": "png\n", "old.zip": "zip\n"})
    # What `flux push artifact` would have pushed from this tree (its default
    # --ignore-paths leaves media and archives out), packed by another writer.
    oci_registry.push_artifact(repository, "flux", files=MANIFESTS)
    base = oci_registry.oci_url(repository)
    code, out, err = sluice(
        capsys, "diff", "artifact", f"{base}:flux", "--path", str(src), "--insecure-registry"
    )
    assert (code, err) == (0, ""), out

    code, _, err = sluice(
        capsys, "push", "artifact", f"{base}:v1", "--path", str(src), "--insecure-registry"
    )
    assert code == 0, err
    out_dir = tmp_path / "out"
    code, _, err = sluice(
        capsys, "pull", "artifact", f"{base}:v1", "--output", str(out_dir), "--insecure-registry"
    )
    assert code == 0, err
    found = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file())
    assert found == sorted(MANIFESTS)

    # Patterns given replace the default: the logo is pushed on purpose.
    code, _, err = sluice(
        capsys, "diff", "artifact", f"{base}:flux", "--path", str(src), "--insecure-registry",
        "--ignore-paths", "*.zip",
    )  # fmt: skip
    assert code == 1
    assert err.strip() == f"'{src}' differs from {oci_registry.host}/{repository}:flux"


def test_a_single_file_is_pushed_at_the_root(
    oci_registry: OciRegistry, repository: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tree(tmp_path / "src", MANIFESTS) / "deploy" / "cm.yaml"
    url = f"{oci_registry.oci_url(repository)}:v1"
    code, _, err = sluice(
        capsys, "push", "artifact", url, "--path", str(src), "--insecure-registry"
    )
    assert code == 0, err
    code, _, err = sluice(
        capsys, "pull", "artifact", url, "--output", str(tmp_path / "out"), "--insecure-registry"
    )
    assert code == 0, err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["cm.yaml"]


def test_diff_says_whether_the_tree_changed(
    oci_registry: OciRegistry, repository: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tree(tmp_path / "src", MANIFESTS)
    url = f"{oci_registry.oci_url(repository)}:v1"
    code, _, err = sluice(
        capsys, "push", "artifact", url, "--path", str(src), "--insecure-registry"
    )
    assert code == 0, err
    code, out, err = sluice(
        capsys, "diff", "artifact", url, "--path", str(src), "--insecure-registry"
    )
    assert (code, err) == (0, "")
    assert "no changes" in out

    (src / "deploy" / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\n")
    code, _, err = sluice(
        capsys, "diff", "artifact", url, "--path", str(src), "--insecure-registry"
    )
    assert code == 1
    assert err.strip() == f"'{src}' differs from {oci_registry.host}/{repository}:v1"

    (src / "new.yaml").write_text("{}\n")
    code, out, _ = sluice(
        capsys, "diff", "artifact", url, "--path", str(src), "--insecure-registry", "-o", "json"
    )
    assert (code, json.loads(out)) == (1, {"changed": True})


def test_diff_compares_content_of_artifacts_packed_by_other_tools(
    oci_registry: OciRegistry, repository: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {"a.yaml": "a: 1\n", "b.yaml": "b: 2\n"}
    # Packed by envtest's own tarball writer: other headers, other bytes.
    oci_registry.push_artifact(repository, "v1", files=files)
    src = tree(tmp_path / "src", files)
    url = f"{oci_registry.oci_url(repository)}:v1"
    code, _, err = sluice(
        capsys, "diff", "artifact", url, "--path", str(src), "--insecure-registry"
    )
    assert (code, err) == (0, "")
    (src / "b.yaml").write_text("b: 3\n")
    code, _, _ = sluice(capsys, "diff", "artifact", url, "--path", str(src), "--insecure-registry")
    assert code == 1


def test_pull_tag_and_list_round_trip(
    oci_registry: OciRegistry, repository: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = oci_registry.oci_url(repository)
    digests = {}
    for version in ("1.0.0", "1.1.0", "2.0.0-rc.1"):
        src = tree(tmp_path / version, {"version.yaml": f"version: {version}\n"})
        code, out, err = sluice(
            capsys, "push", "artifact", f"{base}:{version}", "--path", str(src),
            "--insecure-registry", "--source", "https://git.example/app.git",
            "--revision", f"{version}@sha1:{version.replace('.', '') * 4}", "-o", "json",
        )  # fmt: skip
        assert code == 0, err
        digests[version] = json.loads(out)["digest"]

    code, out, err = sluice(
        capsys, "tag", "artifact", f"{base}:1.1.0", "--tag", "stable", "--insecure-registry"
    )
    assert code == 0, err
    assert out.strip() == f"{oci_registry.host}/{repository}:stable -> {digests['1.1.0']}"
    assert oci_registry.manifest(repository, "stable") == oci_registry.manifest(repository, "1.1.0")

    code, out, err = sluice(capsys, "list", "artifacts", base, "--insecure-registry", "-o", "json")
    assert code == 0, err
    listed = {entry["tag"]: entry for entry in json.loads(out)}
    assert sorted(listed) == ["1.0.0", "1.1.0", "2.0.0-rc.1", "stable"]
    assert listed["stable"] == {
        "tag": "stable",
        "digest": digests["1.1.0"],
        "source": "https://git.example/app.git",
        "revision": "1.1.0@sha1:110110110110",
    }
    code, out, _ = sluice(
        capsys, "list", "artifacts", base, "--insecure-registry", "--filter-semver", ">=1.0.0"
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["ARTIFACT", "DIGEST", "SOURCE", "REVISION"]
    assert [line.split()[0] for line in lines[1:]] == [
        f"{oci_registry.host}/{repository}:1.0.0",
        f"{oci_registry.host}/{repository}:1.1.0",
    ]
    code, out, _ = sluice(
        capsys,
        "list",
        "artifacts",
        base,
        "--insecure-registry",
        "--filter-regex",
        "^2",
        "-o",
        "json",
    )
    assert [entry["tag"] for entry in json.loads(out)] == ["2.0.0-rc.1"]

    out_dir = tmp_path / "pulled"
    code, out, err = sluice(
        capsys, "pull", "artifact", f"{base}@{digests['1.0.0']}", "--output", str(out_dir),
        "--insecure-registry",
    )  # fmt: skip
    assert code == 0, err
    assert (out_dir / "version.yaml").read_text() == "version: 1.0.0\n"
    assert digests["1.0.0"] in out


def test_credentials_come_from_the_docker_config_or_creds(
    oci_registry_auth: OciRegistry,
    repository: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    registry = oci_registry_auth
    src = tree(tmp_path / "src", MANIFESTS)
    url = f"{registry.oci_url(repository)}:v1"
    creds = f"{registry.username}:{registry.password}"
    code, _, err = sluice(
        capsys, "push", "artifact", url, "--path", str(src), "--insecure-registry", "--creds", creds
    )
    assert code == 0, err
    docker = Path(os.environ["DOCKER_CONFIG"])
    docker.mkdir()
    (docker / "config.json").write_text(json.dumps(registry.docker_config))
    code, out, err = sluice(capsys, "list", "artifacts", registry.oci_url(repository),
                            "--insecure-registry", "-o", "json")  # fmt: skip
    assert code == 0, err
    assert [entry["tag"] for entry in json.loads(out)] == ["v1"]


def test_a_private_ca_is_trusted_with_ca_file(
    oci_registry_tls: OciRegistry,
    repository: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    registry = oci_registry_tls
    assert registry.ca_file is not None
    src = tree(tmp_path / "src", MANIFESTS)
    url = f"{registry.oci_url(repository)}:v1"
    code, _, err = sluice(capsys, "push", "artifact", url, "--path", str(src))
    assert code == 1
    assert "--ca-file" in err
    code, out, err = sluice(
        capsys, "push", "artifact", url, "--path", str(src), "--ca-file", str(registry.ca_file)
    )
    assert code == 0, err
    digest = out.strip().rpartition("@")[2]
    assert oci_registry_tls.manifest(repository, digest)["layers"][0]["mediaType"] == (
        CONTENT_MEDIA_TYPE
    )


@pytest.mark.parametrize(
    ("case", "phrase"),
    [
        pytest.param("bad-credentials", "authentication to 127.0.0.1:", id="bad-credentials"),
        pytest.param("unreachable", "cannot reach registry 127.0.0.1:", id="unreachable"),
        pytest.param("missing-path", "does not exist", id="missing-path"),
    ],
)
@pytest.mark.timeout(120)
def test_failures_are_one_clear_line(
    oci_registry_auth: OciRegistry, tmp_path: Path, case: str, phrase: str
) -> None:
    registry = oci_registry_auth
    url = f"{registry.oci_url('cli/failing')}:v1"
    path = str(tree(tmp_path / "src", MANIFESTS))
    creds = f"{registry.username}:not-the-password"
    if case == "unreachable":
        url = f"oci://127.0.0.1:{free_port()}/cli/failing:v1"
    elif case == "missing-path":
        creds = f"{registry.username}:{registry.password}"
        path = str(tmp_path / "nowhere")
    done = subprocess.run(
        [
            sys.executable, "-m", "sluice_cli", "push", "artifact", url, "--path", path,
            "--insecure-registry", "--creds", creds, "--timeout", "10",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "DOCKER_CONFIG": str(tmp_path / "docker")},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("sluice push artifact: "), lines[0]
    assert phrase in lines[0], lines[0]
    assert "not-the-password" not in done.stderr
    assert base64.b64encode(creds.encode()).decode() not in done.stderr


def test_a_digest_that_does_not_exist_is_not_pulled(
    oci_registry: OciRegistry, repository: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = "sha256:" + hashlib.sha256(b"nothing").hexdigest()
    url = f"{oci_registry.oci_url(repository)}@{missing}"
    code, out, err = sluice(
        capsys, "pull", "artifact", url, "--output", str(tmp_path / "out"), "--insecure-registry"
    )
    assert (code, out) == (1, "")
    assert (
        err.strip()
        == f"sluice pull artifact: artifact '{oci_registry.host}/{repository}:{missing}' not found"
    )
    assert not (tmp_path / "out").exists()


def test_pull_verifies_the_digests_of_what_the_registry_serves(
    oci_registry: OciRegistry, repository: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Content of its own, so no other test's blob is shared and rewritten.
    src = tree(tmp_path / "src", {"cm.yaml": f"token: {secrets.token_hex(8)}\n"})
    url = f"{oci_registry.oci_url(repository)}:v1"
    code, out, err = sluice(
        capsys, "push", "artifact", url, "--path", str(src), "--insecure-registry",
        "--revision", "main@sha1:" + "a" * 40, "-o", "json",
    )  # fmt: skip
    assert code == 0, err
    digest = json.loads(out)["digest"]
    manifest_file = oci_registry.blob_file(digest)
    layer_digest = oci_registry.manifest(repository, digest)["layers"][0]["digest"]
    layer_file = oci_registry.blob_file(layer_digest)
    pristine = layer_file.read_bytes()

    # Bytes of the same length, so only the digest can tell.
    layer_file.write_bytes(bytes(b ^ 0xFF for b in pristine))
    out_dir = tmp_path / "out"
    code, out, err = sluice(
        capsys, "pull", "artifact", url, "--output", str(out_dir), "--insecure-registry"
    )
    assert (code, out) == (1, "")
    assert err.strip() == (
        f"sluice pull artifact: layer digest mismatch: expected {layer_digest}, "
        f"got sha256:{hashlib.sha256(layer_file.read_bytes()).hexdigest()}"
    )
    assert not out_dir.exists()

    layer_file.write_bytes(pristine)
    manifest_file.write_bytes(manifest_file.read_bytes().replace(b"a" * 40, b"b" * 40))
    code, out, err = sluice(
        capsys, "pull", "artifact", f"{oci_registry.oci_url(repository)}@{digest}",
        "--output", str(out_dir), "--insecure-registry",
    )  # fmt: skip
    assert (code, out) == (1, "")
    asked = f"sluice pull artifact: manifest digest mismatch: asked {digest}, got sha256:"
    assert err.startswith(asked), err
    assert not out_dir.exists()


def test_pull_refuses_an_unsafe_layer_and_a_used_directory(
    oci_registry: OciRegistry, repository: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as archive:
        evil = tarfile.TarInfo("../escaped.yaml")
        evil.size = 2
        archive.addfile(evil, io.BytesIO(b"x\n"))
    oci_registry.push_artifact(repository, "evil", layer=raw.getvalue())
    url = f"{oci_registry.oci_url(repository)}:evil"
    out_dir = tmp_path / "out" / "here"
    code, _, err = sluice(
        capsys, "pull", "artifact", url, "--output", str(out_dir), "--insecure-registry"
    )
    assert code == 1
    assert err.startswith("sluice pull artifact: unsafe archive member '../escaped.yaml'"), err
    assert not (tmp_path / "out" / "escaped.yaml").exists()
    assert not out_dir.exists()

    out_dir.mkdir(parents=True)
    (out_dir / "kept.yaml").write_text("mine\n")
    oci_registry.push_artifact(repository, "good", files={"a.yaml": "a\n"})
    code, _, err = sluice(
        capsys, "pull", "artifact", f"{oci_registry.oci_url(repository)}:good",
        "--output", str(out_dir), "--insecure-registry",
    )  # fmt: skip
    assert code == 1
    assert err.strip() == f"sluice pull artifact: output '{out_dir}' is not an empty directory"
    assert [p.name for p in out_dir.iterdir()] == ["kept.yaml"]
