"""Helm releases as Helm stores them, and the decisions made from them.

Pure functions, unit-tested without a cluster: Flux's release naming, the
decoding of Helm's release Secrets (`sh.helm.release.v1.<name>.v<N>`: base64
of gzipped JSON, inside the Secret's own base64) into status.history
snapshots, the composition and digest of values, whether a reconcile
must run a release action at all, and which CRDs a chart carries.

Helm's storage Secrets sit in the release's namespace, where a tenant may
write them: a small Secret can hold a gzip bomb. So only the newest versions
the status keeps are decoded, each inflated in bounded chunks up to
`MAX_RELEASE_SIZE`, and each snapshot is checked against what a status can
hold before it is written (`StorageError` names the Secret and the limit).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sluice_api.helm import Snapshot
from sluice_runtime import building
from sluice_runtime.artifacts.fetching import ArtifactError, extract_tarball
from sluice_runtime.helming.storage import StorageError, decode_release, stored_version
from sluice_runtime.helming.values import config_digest

SNAPSHOT_API_VERSION = "helm.toolkit.fluxcd.io/v2"


MAX_SNAPSHOT_TEXT = 1024
"""Characters a snapshot's string field may have (names are at most 253)."""
MAX_TEST_HOOKS = 256
"""Test hooks a snapshot may list."""


def snapshot(release: dict[str, Any], *, digest: str) -> Snapshot:
    """One status.history entry for a decoded Helm release, checked
    (`check_snapshot`) so that the status write cannot be refused for it."""
    info = _mapping(release.get("info"))
    meta = _mapping(_mapping(release.get("chart")).get("metadata"))
    hooks: dict[str, Any] = {}
    for hook in release.get("hooks") or []:
        if "test" in (_mapping(hook).get("events") or []):
            run = _mapping(hook.get("last_run"))
            hooks[str(hook.get("name"))] = {
                "lastStarted": _time(run.get("started_at")) or None,
                "lastCompleted": _time(run.get("completed_at")) or None,
                "phase": run.get("phase") or None,
            }
            if len(hooks) > MAX_TEST_HOOKS:
                raise StorageError(f"has more than {MAX_TEST_HOOKS} test hooks")
    config = release.get("config") or {}
    if not isinstance(config, dict):
        raise StorageError("is not a release: its config is not a map")
    try:
        snap = Snapshot.model_validate(
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
    except (KeyError, TypeError, ValueError) as error:
        raise StorageError(f"is not a release: {error}") from None
    check_snapshot(snap)
    return snap


def release_action(release: dict[str, Any]) -> str:
    """The action that made a release revision, from the description helm stored:
    the controller's own (`<action> by Sluice helm-controller`), helm's
    (`Install complete`, `Upgrade complete`, `Rollback to N`) or its failure
    message (`Release "x" failed: ...` for an install, `Upgrade "x" failed: ...`);
    otherwise the first revision was an install and later ones upgrades."""
    description = str(_mapping(release.get("info")).get("description") or "")
    lowered = description.lower()
    for action in ("install", "upgrade", "rollback"):
        if lowered.startswith(action):
            return action
    if description.startswith("Release ") and " failed" in description:
        return "install"
    try:
        return "install" if int(release.get("version") or 1) == 1 else "upgrade"
    except (TypeError, ValueError):
        raise StorageError(
            f"is not a release: version {str(release.get('version'))[:32]!r}"
        ) from None


def _mapping(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise StorageError(f"is not a release: {type(value).__name__} where a map belongs")
    return value


_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def check_snapshot(snap: Snapshot) -> None:
    """Refuse (StorageError) a snapshot the status cannot hold: text past
    `MAX_SNAPSHOT_TEXT`, a revision outside int64, a time that is not RFC 3339."""
    if not 0 < snap.version < 1 << 63:
        raise StorageError(f"has revision {snap.version}, not a Helm revision")
    texts = {
        "name": snap.name,
        "namespace": snap.namespace,
        "status": snap.status,
        "chartName": snap.chart_name,
        "chartVersion": snap.chart_version,
        "appVersion": snap.app_version or "",
    }
    for hook, run in (snap.test_hooks or {}).items():
        texts[f"testHooks[{hook[:64]}]"] = hook
        texts[f"testHooks[{hook[:64]}].phase"] = run.phase or ""
    for field, text in texts.items():
        if len(text) > MAX_SNAPSHOT_TEXT:
            raise StorageError(f"has a {field} of {len(text)} characters")
    times = {
        "firstDeployed": snap.first_deployed,
        "lastDeployed": snap.last_deployed,
        "deleted": snap.deleted or "",
    }
    for hook, run in (snap.test_hooks or {}).items():
        times[f"testHooks[{hook[:64]}].lastStarted"] = run.last_started or ""
        times[f"testHooks[{hook[:64]}].lastCompleted"] = run.last_completed or ""
    for field, text in times.items():
        if text and not _RFC3339.match(text):
            raise StorageError(f"has a {field} that is not an RFC 3339 time: {text[:64]!r}")


def _time(text: Any) -> str:
    """Helm writes RFC 3339 with nanoseconds and an offset; status keeps seconds, UTC Z."""
    if not text or not isinstance(text, str) or text.startswith("0001-"):
        return ""
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)", text)
    return (match[1] + "Z") if match else text


KEPT = ("info", "manifest")
"""What the controller reads of a decoded release besides its snapshot (the
description, for rollbacks; the manifest, for drift); the chart's templates
and files, most of a release's bytes, are let go at once."""


def history(secrets: list[dict[str, Any]], *, keep: int) -> list[tuple[dict[str, Any], Snapshot]]:
    """The newest `keep` releases of Helm's storage Secrets, decoded, newest first.

    Which are newest is read from the `version` label Helm sets (or the
    `.v<N>` suffix of the name), so older ones are never inflated.
    """
    stored = [s for s in secrets if (s.get("data") or {}).get("release")]
    stored.sort(key=stored_version, reverse=True)
    out = []
    for secret in stored[:keep]:
        encoded = secret["data"]["release"]
        name = (secret.get("metadata") or {}).get("name") or "?"
        try:
            release = decode_release(encoded)
            digest = "sha256:" + hashlib.sha256(encoded.encode()).hexdigest()
            snap = snapshot(release, digest=digest)
        except StorageError as error:
            raise StorageError(f"release Secret '{name}' {error}") from None
        out.append(({key: release.get(key) for key in KEPT}, snap))
    out.sort(key=lambda item: item[1].version, reverse=True)
    return out


def last_successful(found: list[tuple[dict[str, Any], Snapshot]]) -> Snapshot | None:
    """The newest release that was deployed successfully, the one to roll back to.

    Helm marks a failed upgrade `superseded` once a rollback replaces it, so
    the status alone cannot tell; the description Helm writes on failure
    (`Upgrade "x" failed: ...`) can.
    """
    for release, snap in found:
        description = str(_mapping(release.get("info")).get("description") or "")
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
