"""A requested reconcile's artifact download while bulk work holds the server's threads."""

from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from sluice_runtime import lanes
from sluice_runtime.artifacts.fetching import fetch_artifact

if TYPE_CHECKING:
    from .conftest import Served

ARTIFACT = "gitrepository/ns/app/abc.tar.gz"


def _tarball(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


async def test_a_requested_download_is_served_while_the_default_executor_is_held(
    served: Served, tmp_path: Path
) -> None:
    """As 1000 artifact writes hold the source-controller's default executor.

    The download carries the mark (a header) to the file server, whose reads
    for it then run beside the held threads; the digest is new to the server,
    so hashing the file runs there too.
    """
    body = _tarball({"cm.yaml": b"kind: ConfigMap\n"})
    served.storage.write_bytes(ARTIFACT, body)
    release = threading.Event()
    loop = asyncio.get_running_loop()
    # More blocked calls than the default executor has threads (at most 32).
    held = [loop.run_in_executor(None, release.wait) for _ in range(40)]

    async def download() -> None:
        lanes.serving_requests()
        await fetch_artifact(
            served.session,
            url=f"{served.base_url}/{ARTIFACT}",
            digest=f"sha256:{hashlib.sha256(body).hexdigest()}",
            dest=tmp_path / "out",
        )

    try:
        # A deadline so that the old behaviour fails instead of hanging.
        await asyncio.wait_for(asyncio.create_task(download()), 20)
        assert not release.is_set()
    finally:
        release.set()
        await asyncio.gather(*held)
    assert (tmp_path / "out" / "cm.yaml").read_bytes() == b"kind: ConfigMap\n"
