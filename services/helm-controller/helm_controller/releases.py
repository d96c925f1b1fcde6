"""Helm releases as Helm stores them, and the decisions made from them.

Pure functions, unit-tested without a cluster: Flux's release naming, the
decoding of Helm's release Secrets (`sh.helm.release.v1.<name>.v<N>`: base64
of gzipped JSON, inside the Secret's own base64) into status.history
snapshots, the composition and digest of values, whether a reconcile
must run a release action at all, and which CRDs a chart carries.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sluice_api.helm import Snapshot
from sluice_runtime import building
from sluice_runtime.artifacts.fetching import ArtifactError, extract_tarball

RELEASE_NAME_MAX = 53
SNAPSHOT_API_VERSION = "helm.toolkit.fluxcd.io/v2"


def release_name(name: str, target_namespace: str | None, release: str | None) -> str:
    """`spec.releaseName`, else `[<targetNamespace>-]<name>`, shortened as Flux does:
    past 53 characters, the first 40 and 12 hex digits of its SHA-256."""
    if release:
        return release
    full = f"{target_namespace}-{name}" if target_namespace else name
    if len(full) <= RELEASE_NAME_MAX:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:12]
    return f"{full[:40]}-{digest}"


def decode_release(encoded: str) -> dict[str, Any]:
    """The release JSON held in a Secret's `data.release` (still base64 from the API)."""
    raw = base64.b64decode(base64.b64decode(encoded))
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    release: dict[str, Any] = json.loads(raw)
    return release


def config_digest(values: dict[str, Any]) -> str:
    """Digest of values, independent of key order (Flux: digest of the canonical JSON)."""
    canonical = json.dumps(values, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def snapshot(release: dict[str, Any], *, digest: str) -> Snapshot:
    """One status.history entry for a decoded Helm release."""
    info = release.get("info") or {}
    meta = (release.get("chart") or {}).get("metadata") or {}
    hooks: dict[str, Any] = {}
    for hook in release.get("hooks") or []:
        if "test" in (hook.get("events") or []):
            run = hook.get("last_run") or {}
            hooks[hook["name"]] = {
                "lastStarted": run.get("started_at") or None,
                "lastCompleted": run.get("completed_at") or None,
                "phase": run.get("phase") or None,
            }
    return Snapshot.model_validate(
        {
            "apiVersion": SNAPSHOT_API_VERSION,
            "action": release_action(release),
            "digest": digest,
            "name": release["name"],
            "namespace": release.get("namespace", ""),
            "version": int(release["version"]),
            "status": info.get("status", "unknown"),
            "chartName": meta.get("name", ""),
            "chartVersion": meta.get("version", ""),
            "appVersion": meta.get("appVersion") or None,
            "configDigest": config_digest(release.get("config") or {}),
            "firstDeployed": _time(info.get("first_deployed")),
            "lastDeployed": _time(info.get("last_deployed")),
            "deleted": _time(info.get("deleted")) or None,
            "testHooks": hooks or None,
        }
    )


def release_action(release: dict[str, Any]) -> str:
    """The action that made a release revision, from the description helm stored:
    the controller's own (`<action> by Sluice helm-controller`), helm's
    (`Install complete`, `Upgrade complete`, `Rollback to N`) or its failure
    message (`Release "x" failed: ...` for an install, `Upgrade "x" failed: ...`);
    otherwise the first revision was an install and later ones upgrades."""
    description = str((release.get("info") or {}).get("description") or "")
    lowered = description.lower()
    for action in ("install", "upgrade", "rollback"):
        if lowered.startswith(action):
            return action
    if description.startswith("Release ") and " failed" in description:
        return "install"
    return "install" if int(release.get("version") or 1) == 1 else "upgrade"


def _time(text: str | None) -> str:
    """Helm writes RFC 3339 with nanoseconds and an offset; status keeps seconds, UTC Z."""
    if not text or text.startswith("0001-"):
        return ""
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)", text)
    return (match[1] + "Z") if match else text


def history(secrets: list[dict[str, Any]]) -> list[tuple[dict[str, Any], Snapshot]]:
    """Decoded releases of Helm's storage Secrets, newest version first."""
    out = []
    for secret in secrets:
        encoded = (secret.get("data") or {}).get("release")
        if not encoded:
            continue
        release = decode_release(encoded)
        digest = "sha256:" + hashlib.sha256(encoded.encode()).hexdigest()
        out.append((release, snapshot(release, digest=digest)))
    out.sort(key=lambda item: item[1].version, reverse=True)
    return out


def last_successful(found: list[tuple[dict[str, Any], Snapshot]]) -> Snapshot | None:
    """The newest release that was deployed successfully, the one to roll back to.

    Helm marks a failed upgrade `superseded` once a rollback replaces it, so
    the status alone cannot tell; the description Helm writes on failure
    (`Upgrade "x" failed: ...`) can.
    """
    for release, snap in found:
        description = str((release.get("info") or {}).get("description") or "")
        if snap.status in ("deployed", "superseded") and "failed" not in description.lower():
            return snap
    return None


@dataclass(frozen=True)
class Desired:
    chart_name: str
    chart_version: str
    config_digest: str


def next_action(
    latest: Snapshot | None,
    desired: Desired,
    *,
    generation_changed: bool,
    forced: bool,
    reinstall_on_rename: bool = True,
) -> str | None:
    """`install`, `upgrade`, `reinstall`, or None when the release already is what
    the spec asks.

    A steady-state reconcile (same chart version, same values, same
    generation, no forceAt) must not run `helm upgrade`. A release of another
    chart is uninstalled and installed again (`reinstall`, Flux's default
    `upgrade.chartNameChangeStrategy: Reinstall`) unless `reinstall_on_rename`
    is off (`InPlaceUpdate`), which upgrades it.
    """
    if latest is None or latest.status == "uninstalled":
        return "install"
    if reinstall_on_rename and latest.chart_name != desired.chart_name:
        return "reinstall"
    if latest.status != "deployed":
        # failed, pending-*, superseded as newest: Helm's state needs an upgrade.
        return "upgrade"
    if forced or generation_changed:
        return "upgrade"
    if (latest.chart_name, latest.chart_version, latest.config_digest) != (
        desired.chart_name,
        desired.chart_version,
        desired.config_digest,
    ):
        return "upgrade"
    return None


class ValuesError(Exception):
    pass


_INTEGER = re.compile(r"^[-+]?[0-9]+$")


def typed_value(text: str) -> Any:
    """A `targetPath` value as `helm --set` reads it (Flux merges it the same way):
    `true`/`false` (any case) are booleans, `null` is null, `0` and a 64-bit
    decimal integer not starting with `0` are integers; anything else, floats
    and `007` included, stays a string. `valuesFrom[].literal` skips this, as
    `--set-literal` does."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "null":
        return None
    if text == "0":
        return 0
    if not text.startswith("0") and _INTEGER.match(text):
        number = int(text)
        if -(2**63) <= number < 2**63:
            return number
    return text


def set_path(values: dict[str, Any], path: str, value: Any) -> None:
    """Set `value` at a `--set`-style path (`a.b[0].c`, `\\.` escapes a dot)."""
    parts = [p.replace("\\.", ".") for p in re.split(r"(?<!\\)\.", path)]
    node: Any = values
    for i, part in enumerate(parts):
        match = re.fullmatch(r"([^\[\]]*)((?:\[\d+\])*)", part)
        if not match or (not match[1] and not match[2]):
            raise ValuesError(f"invalid targetPath '{path}'")
        keys: list[str | int] = [match[1]] if match[1] else []
        keys += [int(x) for x in re.findall(r"\[(\d+)\]", match[2])]
        for j, key in enumerate(keys):
            last = i == len(parts) - 1 and j == len(keys) - 1
            nxt: Any = value if last else ({} if j == len(keys) - 1 else [])
            if isinstance(key, int):
                if not isinstance(node, list):
                    raise ValuesError(f"targetPath '{path}': not a list at [{key}]")
                while len(node) <= key:
                    node.append(None)
                if last or node[key] is None:
                    node[key] = nxt
                node = node[key]
            else:
                if not isinstance(node, dict):
                    raise ValuesError(f"targetPath '{path}': not a map at '{key}'")
                if last or not isinstance(node.get(key), dict | list):
                    node[key] = nxt
                node = node[key]


class ChartCRDsError(Exception):
    """The chart's CRD files cannot be read; the message names the file."""


CRD_SUFFIXES = (".yaml", ".yml", ".json")
MAX_SUBCHART_SIZE = 64 << 20


def chart_crds(chart_dir: Path, work: Path) -> list[dict[str, Any]]:
    """The CRD documents of a chart and its dependencies, as helm reads them: every
    `.yaml`/`.yml`/`.json` file under `crds/` of the chart and of each subchart in
    `charts/` (a directory, or a `.tgz` unpacked into `work`), in name order.

    Each file is parsed on its own: helm concatenates them without separators,
    so their text cannot be read back as one stream (`helm show crds`).
    """
    documents: list[dict[str, Any]] = []
    for root in _chart_roots(chart_dir, work):
        crds = root / "crds"
        if not crds.is_dir():
            continue
        for path in sorted(p for p in crds.rglob("*") if p.is_file()):
            if path.suffix not in CRD_SUFFIXES:
                continue
            where = path.relative_to(root.parent)
            try:
                loaded = building.load_yaml_all(path.read_bytes())
            except (OSError, yaml.YAMLError) as error:
                raise ChartCRDsError(f"{where} cannot be read: {error}") from None
            documents += [doc for doc in loaded if isinstance(doc, dict)]
    return documents


def _chart_roots(chart_dir: Path, work: Path) -> list[Path]:
    roots = [chart_dir]
    charts = chart_dir / "charts"
    if not charts.is_dir():
        return roots
    for entry in sorted(charts.iterdir()):
        if entry.is_dir() and (entry / "Chart.yaml").is_file():
            roots += _chart_roots(entry, work)
        elif entry.is_file() and entry.name.endswith(".tgz"):
            dest = work / f"{len(list(work.iterdir()))}-{entry.stem}"
            try:
                extract_tarball(entry, dest, max_size=MAX_SUBCHART_SIZE)
            except (ArtifactError, OSError, EOFError) as error:
                raise ChartCRDsError(f"subchart {entry.name} cannot be unpacked: {error}") from None
            for sub in sorted(dest.iterdir()):
                if (sub / "Chart.yaml").is_file():
                    roots += _chart_roots(sub, work)
    return roots
