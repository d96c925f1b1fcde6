"""Registry calls: their own bounded threads, so a stuck registry starves nothing else."""

from __future__ import annotations

import asyncio
import threading

from sluice_runtime.oci import registry as oci
from source_controller import ocirepository


async def test_registry_calls_run_in_their_own_pool() -> None:
    name = await ocirepository.run_bounded(
        lambda: threading.current_thread().name, timeout=1, host="registry.example"
    )
    assert name.startswith("oci-registry")


async def test_stuck_registry_calls_leave_the_default_executor_free() -> None:
    release = threading.Event()
    try:
        # More stuck calls than the pool has threads; each gives up (timeout
        # 0.1 s: the bound adds 5 s of grace) but its thread stays blocked.
        stuck = [
            ocirepository.run_bounded(release.wait, 30, timeout=-4.9, host="registry.example")
            for _ in range(ocirepository._REGISTRY_THREADS._max_workers + 2)
        ]
        for outcome in await asyncio.gather(*stuck, return_exceptions=True):
            assert isinstance(outcome, oci.RegistryError)
            assert "timed out" in str(outcome)
        # What the file server and storage use is untouched.
        assert await asyncio.wait_for(asyncio.to_thread(lambda: 42), 1) == 42
    finally:
        release.set()
