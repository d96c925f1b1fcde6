"""The artifact storage fills up: a clear condition, the last artifact intact, recovery.

The source-controller's storage is a 4 MiB tmpfs (mounting one needs root;
the test is skipped, saying so, without it). Once an artifact is stored the
rest of the space is taken; the next revision must fail with
StorageOperationFailed naming the cause, the old artifact must stay
referenced, served and equal to its digest, and no temporary file may be
left. When the space comes back, the new revision is stored on the next
retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.chaos.fleet_checks import report
from e2e.fleet import OCIREPO, oci_origin, source_controller
from sluice_envtest.harness import condition, is_ready
from sluice_envtest.pytest_plugin import Cluster
from sluice_envtest.registry import OciRegistry
from sluice_runtime.kube.client import JSON, KubeClient


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs for a full disk needs root; run the chaos suite as root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=False)


def fill(directory: Path) -> Path:
    """Take every free byte of the file system holding `directory`."""
    filler = directory / ".filler"
    with open(filler, "wb") as handle, contextlib.suppress(OSError):
        while True:
            handle.write(b"\0" * 65536)
            handle.flush()
    return filler


async def leftovers(storage: Path) -> set[str]:
    """Temporary files that outlive a retry: the same (random) name seen 1.5 s apart.

    The controller keeps retrying while the disk is full, and a retry's
    write holds a temporary file until it fails, so a single look could see
    one in flight; a leftover is one that is still there later.
    """
    first = {p.name for p in storage.rglob("*.tmp")}
    await asyncio.sleep(1.5)
    return first & {p.name for p in storage.rglob("*.tmp")}


def download(url: str) -> bytes:
    assert url.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - checked above
        return bytes(answer.read())


def payload(seed: str) -> str:
    # Incompressible, so the artifact needs real space: about 600 KiB of hex.
    chunks = [hashlib.sha256(f"{seed}{i}".encode()).hexdigest() for i in range(10_000)]
    return "data: |\n" + "".join(f"  {c}\n" for c in chunks)


async def wait(client: KubeClient, ns: str, check: object, what: str, limit: float = 120) -> JSON:
    deadline = asyncio.get_running_loop().time() + limit
    obj: JSON = {}
    while asyncio.get_running_loop().time() < deadline:
        obj = await client.get(OCIREPO, "full", ns)
        if check(obj):  # type: ignore[operator]
            return obj
        await asyncio.sleep(0.3)
    raise AssertionError(f"{what} not reached; status {obj.get('status')}")


async def test_a_full_artifact_storage_is_a_condition_and_recovers(
    cluster: Cluster, kube: KubeClient, namespace: str, oci_registry: OciRegistry, tmp_path: Path
) -> None:
    origin = oci_origin(oci_registry, f"chaos-full/{namespace}")
    with small_tmpfs(tmp_path / "storage", "4m") as storage:
        sc = source_controller(
            str(cluster.kubeconfig), tmp_path, concurrent=2,
            extra=["--watch-namespace", namespace, "--min-retry-delay", "200ms",
                   "--max-retry-delay", "2s"],
        )  # fmt: skip
        try:
            await asyncio.to_thread(sc.wait_ready)
            first = origin.publish({"big.yaml": payload("r1")})
            await kube.create(
                OCIREPO,
                {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
                 "metadata": {"name": "full", "namespace": namespace},
                 "spec": {"interval": "1h", **origin.spec}},
            )  # fmt: skip
            ready = await wait(kube, namespace, is_ready, "first artifact")
            artifact = ready["status"]["artifact"]
            assert artifact["revision"].endswith(first)

            filler = await asyncio.to_thread(fill, storage)
            second = origin.publish({"big.yaml": payload("r2")})
            await kube.merge_patch(
                OCIREPO, "full",
                {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": "full"}}},
                namespace=namespace,
            )  # fmt: skip
            failed = await wait(
                kube, namespace,
                lambda o: (condition(o, "StorageOperationFailed") or {}).get("status") == "True",
                "StorageOperationFailed",
            )  # fmt: skip
            message = (condition(failed, "Ready") or {}).get("message", "")
            assert "No space left on device" in message, message
            assert failed["status"]["artifact"] == artifact
            kept = storage / artifact["path"]
            assert "sha256:" + hashlib.sha256(kept.read_bytes()).hexdigest() == artifact["digest"]
            served = await asyncio.to_thread(download, artifact["url"])
            assert "sha256:" + hashlib.sha256(served).hexdigest() == artifact["digest"]
            assert await leftovers(storage) == set()

            started = asyncio.get_running_loop().time()
            filler.unlink()
            recovered = await wait(
                kube, namespace,
                lambda o: is_ready(o) and o["status"]["artifact"]["revision"].endswith(second),
                "recovery once space is back",
            )  # fmt: skip
            recovery = asyncio.get_running_loop().time() - started
            new = storage / recovered["status"]["artifact"]["path"]
            digest = "sha256:" + hashlib.sha256(new.read_bytes()).hexdigest()
            assert digest == recovered["status"]["artifact"]["digest"]
            assert [p.name for p in storage.rglob("*.tmp")] == []
        finally:
            sc.stop()
    assert sc.tracebacks() == []
    report(f"CHAOS disk-full: condition={message[:90]!r} recovery={recovery:.1f}s")
