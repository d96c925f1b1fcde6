"""Install CustomResourceDefinitions and wait until the API server serves them.

Used by `sluice dev`, `sluice crds install` and the test fixtures, so all of
them install the CRDs generated from the models the same way: server-side
apply (re-running is harmless and upgrades in place), then wait for the
Established condition, without which creating objects of the kind fails.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import KubeError
from sluice_runtime.kube.resources import CRD

FIELD_MANAGER = "sluice"


async def install_crds(
    client: KubeClient, crds: Iterable[dict[str, Any]], *, timeout: float = 60.0
) -> list[str]:
    names = []
    for crd in crds:
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
