"""Go's own text/template and sprig, built once per session, to render what Python renders.

The renderer is a tiny Go program (gorender/main.go) built offline in GOPATH
mode against Debian's golang-go and golang-github-masterminds-sprig-dev; it
reads a JSON list of cases on stdin and answers a JSON list of results.
Without go or sprig the differential tests skip, saying which is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

GOPATH_SYSTEM = Path("/usr/share/gocode")
SPRIG = GOPATH_SYSTEM / "src/github.com/Masterminds/sprig"
YAML_V2 = GOPATH_SYSTEM / "src/gopkg.in/yaml.v2"
SOURCE = Path(__file__).parent / "gorender" / "main.go"

GoRender = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


@pytest.fixture(scope="session")
def go_render(tmp_path_factory: pytest.TempPathFactory) -> GoRender:
    go = shutil.which("go")
    if go is None:
        pytest.skip("no `go` on PATH: apt-get install golang-go to run the differential tests")
    if not SPRIG.is_dir():
        pytest.skip(
            f"no sprig source at {SPRIG}: apt-get install golang-github-masterminds-sprig-dev"
        )
    if not YAML_V2.is_dir():
        pytest.skip(f"no go-yaml v2 source at {YAML_V2}: apt-get install golang-gopkg-yaml.v2-dev")
    root = tmp_path_factory.mktemp("gorender")
    package = root / "src" / "gorender"
    package.mkdir(parents=True)
    shutil.copy(SOURCE, package / "main.go")
    binary = root / "gorender"
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{GOPATH_SYSTEM}:{root}",
        "GOCACHE": str(root / "cache"),
        "GOFLAGS": "",
        "GOPROXY": "off",
        "CGO_ENABLED": "0",
    }
    build = subprocess.run(
        [go, "build", "-o", str(binary), "gorender"],
        cwd=package,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if build.returncode != 0:
        pytest.fail(f"building the Go renderer failed:\n{build.stderr}")

    def render(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
        done = subprocess.run(
            [str(binary)],
            input=json.dumps(cases),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            env={**os.environ, "TZ": "UTC"},  # the zone Flux Operator's container runs in
        )
        results: list[dict[str, Any]] = json.loads(done.stdout)
        return results

    return render
