"""An OCI layer from download to storage, with as few event-loop turns as it takes.

The source-controller pulls a thousand small layers at once when a fleet is
published (issue 19), and what each pull did on the event loop showed in
every reconcile's latency: a `mkdtemp` and an `rmtree` of the work
directory, and four hops to a thread (unpack, read the ignore rules,
archive, each a wake-up of the loop and a pool hand-off). Here the work
directory is made with one `mkdir` and removed by the thread that stored
its content, and everything after the download is one hop.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any

from sluice_api.source import SourceCondition, SourceReason
from sluice_runtime.artifacts.fetching import ArtifactError, extract_tarball
from sluice_runtime.artifacts.storage import ArtifactFile
from sluice_runtime.reconciling.errors import StepError
from source_controller.sources import SourceContext, archive, copy_file

LAYER = "layer"


def work_dir(cleanup: contextlib.AsyncExitStack) -> Path:
    """A new private directory for one pull, removed at `cleanup` if still there.

    Made here, on the loop, not in the download's thread: a download that
    times out in a full registry pool runs later, and must then find no
    directory to write into rather than make one nobody removes."""
    work = Path(tempfile.gettempdir()) / f"oci-{secrets.token_hex(8)}"
    work.mkdir(mode=0o700)
    cleanup.callback(_remove_left, work)
    return work


def store_layer(
    ctx: SourceContext[Any], filename: str, work: Path, digest: str, operation: str
) -> ArtifactFile:
    """The layer downloaded to `work` stored as `filename` (copied, or unpacked and
    archived with the source's ignore rules); `work` removed either way. Runs in a thread."""
    try:
        blob = work / LAYER
        if operation == "copy":
            return copy_file(ctx, filename, blob)
        unpacked = work / "content"
        limits = ctx.limits
        try:
            extract_tarball(
                blob,
                unpacked,
                max_size=limits.artifact_max_size,
                max_members=limits.artifact_max_files,
            )
        except ArtifactError as error:
            raise StepError(
                SourceReason.OCI_ARTIFACT_LAYER_OPERATION_FAILED,
                f"layer {digest} cannot be extracted: {error}",
                condition=SourceCondition.BUILD_FAILED,
            ) from None
        return archive(ctx, filename, unpacked, ctx.obj.spec.ignore)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _remove_left(work: Path) -> None:
    # One lstat on the loop when the store removed it (every successful pull);
    # an rmtree only after a failed one.
    if os.path.lexists(work):
        shutil.rmtree(work, ignore_errors=True)
