"""A Bucket's index, the pure part: Flux's index of a listing and its revision,
the process's record of the copy it holds, and the service's errors in its own words."""

from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice_runtime.artifacts.ignoring import IGNORE_FILE, IgnoreRules

STATE_FILE = "index.json"


@dataclass(frozen=True)
class ObjectInfo:
    etag: str
    size: int


def index_revision(index: dict[str, str]) -> str:
    """Flux's Bucket revision: sha256 over `key etag\\n` lines, keys sorted bytewise."""
    digest = hashlib.sha256()
    for key in sorted(index, key=lambda k: k.encode()):
        digest.update(f"{key} {index[key]}\n".encode())
    return "sha256:" + digest.hexdigest()


def safe_key(key: str) -> bool:
    """Whether `key` names a file inside the artifact's tree (no '..', no absolute paths)."""
    if key.startswith("/") or "\\" in key or "\x00" in key:
        return False
    parts = key.split("/")
    return all(part not in ("", ".", "..") for part in parts)


def build_index(
    objects: dict[str, ObjectInfo], *, spec_ignore: str | None, sourceignore: str | None
) -> dict[str, str]:
    """Flux's index of a listing: what the revision is computed over and what is fetched.

    The rules are Flux's for buckets: the root `.sourceignore` and then
    `spec.ignore` (which wins), without the default exclusions, which the
    archive applies later as it does for every source.
    """
    rules = IgnoreRules(spec_ignore=spec_ignore if spec_ignore is not None else "")
    if sourceignore is not None:
        rules.add_sourceignore("", sourceignore)
    index = {}
    for key, info in objects.items():
        if key.endswith("/") or key == IGNORE_FILE:
            continue
        if rules.ignored(key, is_dir=False):
            continue
        index[key] = info.etag
    return index


def read_state(cache_dir: Path) -> dict[str, Any]:
    try:
        state = json.loads((cache_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def write_state(cache_dir: Path, state: dict[str, Any]) -> None:
    cache_dir.mkdir(parents=True, exist_ok=True)
    temp = cache_dir / (STATE_FILE + ".tmp")
    temp.write_text(json.dumps(state, sort_keys=True))
    temp.replace(cache_dir / STATE_FILE)


def remove_file(files: Path, key: str) -> None:
    (files / key).unlink(missing_ok=True)
    parent = posixpath.dirname(key)
    while parent:
        try:
            (files / parent).rmdir()
        except OSError:
            break
        parent = posixpath.dirname(parent)


def describe_error(error: Exception) -> str:
    """The service's own words (its error code and message), never a library repr."""
    # Imported here: only a Bucket fetch, which has loaded botocore, gets here.
    from botocore.exceptions import ClientError

    if isinstance(error, ClientError):
        details = error.response.get("Error") or {}
        code = str(details.get("Code") or "")
        message = str(details.get("Message") or "").strip()
        if code == "NoSuchBucket":
            return "the bucket does not exist"
        if code == "PreconditionFailed":
            return "the object changed while it was fetched; retrying"
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403"):
            hint = "check the credentials in spec.secretRef"
            return f"access refused ({code}: {message}); {hint}" if message else f"{code}; {hint}"
        if message:
            return f"{message} ({code})" if code else message
        return code or "the service refused the request"
    return str(error)
