"""Reusing a build: the same artifact built with the same spec gives the same objects.

A kustomize build is a process per reconcile (about 75 ms of CPU); a fleet
of Kustomizations over one artifact (the MTTP shape: a thousand apps of one
OCI artifact, told apart by post-build substitution) would build the same
thing a thousand times. The build's output depends only on the artifact's
content (its digest), the spec fields that feed kustomize, and this
controller's flags, so it is kept, keyed by those, and reused; the objects
are kustomize's own output, byte for byte. Substitution runs after the
build, on a copy, per Kustomization.

Never kept: builds with SOPS decryption (plaintext secrets stay out of
memory beyond their reconcile) and builds that may read remote bases (their
content is not covered by the digest). The cache holds compact JSON, bounded
in bytes, least recently used out first.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from typing import Any

from sluice_api.kustomize import Kustomization

NOT_BUILD_FIELDS = frozenset(
    {
        "sourceRef", "interval", "retryInterval", "timeout", "prune", "deletionPolicy",
        "force", "wait", "suspend", "dependsOn", "healthChecks", "healthCheckExprs",
        "postBuild", "serviceAccountName", "kubeConfig", "ignore", "gates", "validation",
    }
)  # fmt: skip
"""Spec fields kustomize never sees; every other field (and any new one) is in the key."""

DEFAULT_MAX_BYTES = 32 * 1024 * 1024


def build_key(obj: Kustomization, *, digest: str, flags: str) -> str | None:
    """The key of this Kustomization's build of the artifact `digest`, None when it
    must not be reused (decryption)."""
    spec = obj.spec
    if spec.decryption is not None:
        return None
    fields = {
        k: v
        for k, v in spec.model_dump(mode="json", by_alias=True, exclude_none=True).items()
        if k not in NOT_BUILD_FIELDS
    }
    text = json.dumps([digest, flags, fields], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class Builds:
    """Built object lists by `build_key`."""

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self.hits = 0

    def get(self, key: str) -> list[dict[str, Any]] | None:
        """A fresh copy of the objects (callers edit them), or None."""
        found = self._items.get(key)
        if found is None:
            return None
        self._items.move_to_end(key)
        self.hits += 1
        objects: list[dict[str, Any]] = json.loads(found)
        return objects

    def put(self, key: str, objects: list[dict[str, Any]]) -> None:
        data = json.dumps(objects, separators=(",", ":")).encode()
        if len(data) > self.max_bytes // 4:
            return  # one huge build would evict everything else
        old = self._items.pop(key, None)
        self._bytes += len(data) - (len(old) if old is not None else 0)
        self._items[key] = data
        while self._bytes > self.max_bytes and self._items:
            _, dropped = self._items.popitem(last=False)
            self._bytes -= len(dropped)
