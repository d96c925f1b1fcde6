"""Fuzz of artifact unpacking (artifacts.fetching.extract_tarball) with hostile members.

Members are symlinks, hard links, devices, `..` and absolute names, long
(GNU/pax) names, and sizes declared far past the data that follows or the
limit; archives are truncated, bombs of zeros, or not gzip at all. Whatever
it is given, nothing is written outside the destination (a sibling
directory is compared before and after), a refusal is an ArtifactError
(UnsafeArchive for the archive's own faults) that left the destination
empty, and the peak allocation stays a small multiple of the size limit.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import tempfile
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from sluice_envtest.fuzzing import bounded, examples
from sluice_runtime.artifacts.fetching import ArtifactError, extract_tarball

MAX_SIZE = 64 << 10
MAX_MEMBERS = 50
# The stream is bounded at 2 * MAX_SIZE + 1 MiB; tarfile may hold a header's data whole.
MAX_PEAK = 4 * (2 * MAX_SIZE + (1 << 20))
MAX_CALLS = 2_000_000

names = st.one_of(
    st.text(alphabet="ab./", min_size=1, max_size=10),
    st.sampled_from(["../x", "/abs", "a/../../x", "./a", "a/b", "a", "b", "..", "a" * 120 + "/f"]),
)
kinds = st.sampled_from(
    [tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE]
)
links = st.one_of(names, st.sampled_from(["../outside", "/etc", "a/../..", "..", ""]))
member = st.tuples(
    names, kinds, links, st.binary(max_size=32), st.sampled_from([None, 0, 10**12, MAX_SIZE + 1])
)


def archive(
    entries: list[tuple[str, bytes, str, bytes, int | None]], fmt: int, cut: int | None
) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for name, kind, link, data, declared in entries:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, link
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
            if declared is not None and kind == tarfile.REGTYPE:
                info.size = declared  # what the next header claims: only the header changes
                out.write(info.tobuf(tarfile.GNU_FORMAT)[:512])
    raw = out.getvalue()
    return gzip.compress(raw[:cut] if cut is not None else raw)


blobs = st.one_of(
    st.builds(archive, st.lists(member, max_size=8),
              st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
              st.one_of(st.none(), st.integers(0, 4000))),
    st.builds(lambda n: gzip.compress(b"\0" * n), st.integers(0, 8 * MAX_SIZE)),
    st.builds(lambda n: gzip.compress(b"a" * n), st.integers(0, 8 * MAX_SIZE)),
    st.binary(max_size=64),
)  # fmt: skip


def snapshot(root: Path) -> dict[str, bytes | str]:
    seen: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        seen[key] = (
            os.readlink(path)
            if path.is_symlink()
            else path.read_bytes()
            if path.is_file()
            else "dir"
        )
    return seen


@examples(ci=100)
@given(blob=blobs)
@example(blob=archive([("a", tarfile.REGTYPE, "", b"x", 10**12)], tarfile.PAX_FORMAT, None))
@example(blob=archive([("l", tarfile.SYMTYPE, "..", b"", None), ("l/x", tarfile.REGTYPE, "", b"x", None)],
                      tarfile.GNU_FORMAT, None))  # fmt: skip
def test_an_archive_unpacks_inside_its_destination_or_is_refused(blob: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        case = Path(tmp)
        (case / "outside").mkdir()
        (case / "outside" / "keep").write_text("keep")
        (case / "x").write_text("sibling")
        before = snapshot(case)
        source = case / "a.tar.gz"
        source.write_bytes(blob)
        dest = case / "dest" / "out"
        with bounded(max_calls=MAX_CALLS) as spent:
            try:
                extract_tarball(source, dest, max_size=MAX_SIZE, max_members=MAX_MEMBERS)
                refusal = ""
            except ArtifactError as error:
                refusal = str(error)
        assert spent.peak_bytes < MAX_PEAK, f"{spent.peak_bytes} bytes at the peak"
        after = snapshot(case)
        assert {k: v for k, v in after.items() if not k.startswith("dest")} == before | {
            "a.tar.gz": blob
        }
        if refusal:
            assert not dest.exists() or not any(dest.iterdir()), "a refused archive wrote files"
            return
        root = dest.resolve()
        total = 0
        for path in dest.rglob("*"):
            assert path.resolve().is_relative_to(root)
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
        assert total <= MAX_SIZE
