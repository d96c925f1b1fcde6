"""Install CustomResourceDefinitions and wait until the API server serves them.

Used by `sluice dev`, `sluice crds install` and the test fixtures, so all of
them install the CRDs generated from the models the same way: server-side
apply (re-running is harmless and upgrades in place), then wait for the
Established condition, without which creating objects of the kind fails.
CEL validation rules are installed only where the server evaluates them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any

from sluice_api.crds import without_cel_rules
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import KubeError
from sluice_runtime.kube.resources import CRD

FIELD_MANAGER = "sluice"


CEL_MINOR = 25
"""The first Kubernetes 1.x that validates CRDs' `x-kubernetes-validations` by default."""


def supports_cel(version: Mapping[str, Any]) -> bool:
    """Whether an API server whose /version answer is `version` evaluates CEL rules."""
    major = "".join(c for c in str(version.get("major", "")) if c.isdigit())
    minor = "".join(c for c in str(version.get("minor", "")) if c.isdigit())
    if not major or not minor:
        return False
    return (int(major), int(minor)) >= (1, CEL_MINOR)


def for_server(crd: dict[str, Any], *, cel: bool) -> dict[str, Any]:
    """`crd` as Sluice installs it on a server that does (or does not) evaluate CEL."""
    # Without CEL the rules would be refused; the controllers enforce them instead.
    return crd if cel else without_cel_rules(crd)


async def install_crds(
    client: KubeClient, crds: Iterable[dict[str, Any]], *, timeout: float = 60.0
) -> list[str]:
    names = []
    cel = supports_cel(await client.request("GET", "/version"))
    for given in crds:
        crd = for_server(given, cel=cel)
        await client.apply(CRD, crd, field_manager=FIELD_MANAGER, force=True)
        names.append(crd["metadata"]["name"])
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending:
        for name in sorted(pending):
            crd = await client.get(CRD, name)
            conditions = crd.get("status", {}).get("conditions") or []
            if any(
                c.get("type") == "Established" and c.get("status") == "True" for c in conditions
            ):
                pending.discard(name)
        if pending:
            if time.monotonic() > deadline:
                raise KubeError(f"CRDs not established after {timeout:.0f}s: {sorted(pending)}")
            await asyncio.sleep(0.2)
    return names
