"""A Helm chart repository on loopback: an index.yaml and packaged charts over HTTP.

Charts are written by hand (a Chart.yaml, a values.yaml, templates), packaged
with the real `helm package` and indexed with `helm repo index`, so what the
controllers read is exactly what a real repository serves. The server wants
basic auth when given credentials, answers If-None-Match with 304 like a
static file host, and counts requests per path so tests can tell a download
from a skipped one.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import subprocess
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from sluice_envtest.controlplane import free_port
from sluice_runtime.helming import helm_binary

CONFIGMAP_TEMPLATE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
  labels:
    chart: {{ .Chart.Name }}-{{ .Chart.Version }}
data:
  greeting: {{ .Values.greeting | quote }}
  version: {{ .Chart.Version | quote }}
"""


def helm(*args: str, cwd: Path) -> str:
    """Run the helm Sluice uses, synchronously (test setup only), with HOME in `cwd`."""
    done = subprocess.run(
        [str(helm_binary()), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={"HOME": str(cwd), "PATH": "/usr/bin:/bin", "HELM_NO_PLUGINS": "1"},
    )
    if done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)}: {done.stderr}")
    return done.stdout


def write_chart(
    root: Path,
    name: str,
    version: str,
    *,
    values: dict[str, Any] | None = None,
    templates: dict[str, str] | None = None,
    app_version: str | None = None,
    crds: dict[str, str] | None = None,
) -> Path:
    """A chart directory `root/name`; a ConfigMap template unless `templates` says otherwise,
    and `crds` as files of its `crds/` directory."""
    chart = root / name
    (chart / "templates").mkdir(parents=True, exist_ok=True)
    meta = {"apiVersion": "v2", "name": name, "version": version, "type": "application"}
    if app_version:
        meta["appVersion"] = app_version
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
    (chart / "values.yaml").write_text(yaml.safe_dump(values or {"greeting": "hello"}))
    for old in (chart / "templates").iterdir():
        old.unlink()
    for file, text in (templates or {"configmap.yaml": CONFIGMAP_TEMPLATE}).items():
        (chart / "templates" / file).write_text(text)
    if crds:
        (chart / "crds").mkdir(exist_ok=True)
        for file, text in crds.items():
            (chart / "crds" / file).write_text(text)
    return chart


class ChartRepository:
    """Packaged charts in `root`, indexed; serve with `serve()` on loopback."""

    def __init__(
        self,
        root: Path,
        *,
        username: str | None = None,
        password: str | None = None,
        chart_urls: str | None = None,
    ):
        self.root = root
        self.charts = root / "charts"
        self.src = root / "src"
        self.charts.mkdir(parents=True, exist_ok=True)
        self.src.mkdir(parents=True, exist_ok=True)
        self.username = username
        self.password = password
        self.requests: collections.Counter[str] = collections.Counter()
        self.port = free_port()
        # What the index's chart URLs start with: this server's by default;
        # a relative one (`charts`) makes clients resolve them against the
        # URL they read the index from, e.g. a proxy in front of this server.
        self.chart_urls = chart_urls
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, name: str, version: str, **chart: Any) -> Path:
        """Package chart `name` at `version` into the repository and re-index it."""
        directory = write_chart(self.src / version, name, version, **chart)
        helm("package", str(directory), "--destination", str(self.charts), cwd=self.root)
        self.reindex()
        return self.charts / f"{name}-{version}.tgz"

    def reindex(self) -> None:
        helm(
            "repo",
            "index",
            str(self.charts),
            "--url",
            self.chart_urls or self.url + "/charts",
            cwd=self.root,
        )

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests[request.path] += 1
        if self.username is not None:
            expected = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
            if request.headers.get("Authorization") != f"Basic {expected}":
                return web.Response(status=401, headers={"WWW-Authenticate": "Basic"})
        rel = request.match_info["path"]
        if rel == "index.yaml":
            path = self.charts / "index.yaml"
        elif rel.startswith("charts/"):
            path = self.charts / rel.removeprefix("charts/")
        else:
            return web.Response(status=404)
        if not path.is_file() or "/" in path.relative_to(self.charts).as_posix():
            return web.Response(status=404)
        data = path.read_bytes()
        etag = '"' + hashlib.sha256(data).hexdigest()[:16] + '"'
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"ETag": etag})
        return web.Response(body=data, headers={"ETag": etag})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
