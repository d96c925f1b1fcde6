"""Programs from Debian bookworm packages, fetched into a private cache.

Test servers need programs the machine does not have (sshd, a registry) and
may not install: CI machines are fresh and shared, and `apt-get install`
would change them. apt can download and dpkg can unpack without touching the
system's package state, so packages go into `~/.cache/sluice/debian`, one
directory per set of package versions, filled once per machine under a file
lock. A program whose shared libraries the machine lacks gets them from its
dependencies' packages, copied into one directory for `LD_LIBRARY_PATH`;
only those libraries, so nothing shadows the system's own.

building.py uses the same private apt to build the control plane.

The parts: `debian_apt` (the private apt and the commands around it),
`debian_libraries` (what a program lacks, and where to get it), and here the
cache of unpacked package sets; every name is importable from here.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sluice_envtest.debian_apt import (
    DEBIAN_MIRROR,
    DEBIAN_SUITE,
    BuildError,
    DownloadFailed,
    Log,
    PrivateApt,
    download_unpack,
    package_records,
    run,
)
from sluice_envtest.debian_libraries import first_alternatives, missing_libraries, provide_libraries

__all__ = [
    "DEBIAN_MIRROR",
    "DEBIAN_SUITE",
    "BuildError",
    "Log",
    "PrivateApt",
    "Unpacked",
    "cache_root",
    "closure",
    "fetch_packages",
    "first_alternatives",
    "locked",
    "missing_libraries",
    "run",
]


@dataclass(frozen=True)
class Unpacked:
    """Packages as `dpkg -x` laid them out, plus the libraries the system lacked."""

    root: Path
    versions: Mapping[str, str]
    library_dir: Path | None = None

    def path(self, relative: str) -> Path:
        found = self.root / relative.lstrip("/")
        if not found.exists():
            raise BuildError(f"{relative} is not in packages {dict(self.versions)}")
        return found

    def environ(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """An environment in which the packages' programs find their libraries."""
        env = dict(os.environ if base is None else base)
        if self.library_dir is not None:
            inherited = env.get("LD_LIBRARY_PATH")
            env["LD_LIBRARY_PATH"] = ":".join(p for p in (str(self.library_dir), inherited) if p)
        return env


def cache_root() -> Path:
    base = os.environ.get("SLUICE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sluice"
    )
    return Path(base)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def fetch_packages(
    packages: Sequence[str], *, binaries: Sequence[str] = (), log: Log | None = None
) -> Unpacked:
    """Bookworm's current `packages`, unpacked; `binaries` (paths in them) made runnable.

    Later calls are answered from the cache without the network, as long as
    the private package lists are not refreshed (they are only when a
    download fails, e.g. after a point release removed the old version).
    """
    say = log or _stderr
    base = cache_root() / "debian"
    names = sorted(set(packages))
    memo = base / "resolved" / f"{_short('+'.join(names))}.json"
    cached = _cached(base, memo, binaries)
    if cached is not None:
        return cached
    with locked(base / "apt.lock"):
        cached = _cached(base, memo, binaries)
        if cached is not None:
            return cached
        apt = PrivateApt(base / "apt", source_packages=False, options=_LEAN)
        refreshed = False
        if not _lists_stamp(base):
            say("fetching Debian package lists (once)")
            _update(apt, base)
            refreshed = True
        while True:
            versions = _candidates(apt, names)
            target = base / "pkgs" / _key(versions)
            try:
                unpacked = _unpack(apt, target, versions, binaries, say)
            except DownloadFailed as failure:
                if refreshed:
                    raise failure.error from None
                say("download failed; refreshing Debian package lists and retrying")
                _update(apt, base)
                refreshed = True
                continue
            memo.parent.mkdir(parents=True, exist_ok=True)
            # Readers look without the lock: replace, never rewrite in place.
            partial = memo.with_suffix(".tmp")
            partial.write_text(json.dumps({"stamp": _lists_stamp(base), "versions": versions}))
            os.replace(partial, memo)
            return unpacked


def closure(packages: Sequence[str], *, log: Log | None = None) -> list[str]:
    """`packages` and everything they depend on (Depends, Pre-Depends), by name.

    For a root filesystem assembled with `dpkg -x` (the image build): no
    maintainer script runs there, so only what the files need is followed.
    """
    base = cache_root() / "debian"
    with locked(base / "apt.lock"):
        apt = PrivateApt(base / "apt", source_packages=False, options=_LEAN)
        if not _lists_stamp(base):
            (log or _stderr)("fetching Debian package lists (once)")
            _update(apt, base)
        output = apt.cache(
            "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
            "--no-breaks", "--no-replaces", "--no-enhances", *packages,
        )  # fmt: skip
    # Unindented lines are the packages reached; `<name>` ones are virtual,
    # provided by a real package that is listed too.
    names = {
        line.strip()
        for line in output.splitlines()
        if line and not line[0].isspace() and not line.startswith("<")
    }
    return sorted(names)


# Fetching binary packages needs neither translations nor source indexes.
_LEAN = ("-o", "Acquire::Languages=none")
_COMPLETE = ".complete.json"


def _stderr(message: str) -> None:
    print(f"sluice-envtest: {message}", file=sys.stderr, flush=True)


def _update(apt: PrivateApt, base: Path) -> None:
    apt.update()
    (base / "apt" / "updated").write_text(str(os.stat(base / "apt" / "lists").st_mtime_ns))


def _lists_stamp(base: Path) -> str:
    stamp = base / "apt" / "updated"
    return stamp.read_text() if stamp.exists() else ""


def _key(versions: Mapping[str, str]) -> str:
    # Epochs carry a colon, which LD_LIBRARY_PATH cannot hold; apt escapes it so too.
    return _short(",".join(f"{n}={v}" for n, v in sorted(versions.items())).replace(":", "%3a"))


def _short(name: str) -> str:
    # A file name holds 255 bytes; a root filesystem's worth of packages does not fit.
    if len(name) <= 200:
        return name
    return f"{name[:100]}...{hashlib.sha256(name.encode()).hexdigest()[:16]}"


def _cached(base: Path, memo: Path, binaries: Sequence[str]) -> Unpacked | None:
    if not memo.exists():
        return None
    recorded = json.loads(memo.read_text())
    if recorded.get("stamp") != _lists_stamp(base):
        return None
    target = base / "pkgs" / _key(recorded["versions"])
    unpacked = _complete(target)
    if unpacked is None or not all((unpacked.root / b).exists() for b in binaries):
        return None
    return unpacked


def _complete(target: Path) -> Unpacked | None:
    marker = target / _COMPLETE
    if not marker.exists():
        return None
    recorded = json.loads(marker.read_text())
    library_dir = target / "lib" if recorded["libraries"] else None
    return Unpacked(target / "root", recorded["versions"], library_dir)


def _candidates(apt: PrivateApt, names: Sequence[str]) -> dict[str, str]:
    versions: dict[str, str] = {}
    for record in package_records(apt, names):
        versions[record["Package"]] = record["Version"]
    absent = [n for n in names if n not in versions]
    if absent:
        raise BuildError(f"no such package in Debian {DEBIAN_SUITE}: {', '.join(absent)}")
    return versions


def _unpack(
    apt: PrivateApt,
    target: Path,
    versions: Mapping[str, str],
    binaries: Sequence[str],
    say: Log,
) -> Unpacked:
    done = _complete(target)
    if done is not None and all((done.root / b).exists() for b in binaries):
        return done
    target.parent.mkdir(parents=True, exist_ok=True)
    pinned = [f"{n}={v}" for n, v in sorted(versions.items())]
    say(f"fetching Debian packages {' '.join(pinned)} (once)")
    work = Path(tempfile.mkdtemp(prefix=".fetching-", dir=target.parent))
    try:
        root = work / "root"
        download_unpack(apt, pinned, work / "debs", root)
        for binary in binaries:
            if not (root / binary).exists():
                raise BuildError(f"{binary} is not in packages {' '.join(pinned)}")
        libraries = provide_libraries(
            apt, [root / b for b in binaries], list(versions), root, work, say
        )
        (work / _COMPLETE).write_text(
            json.dumps({"versions": dict(versions), "libraries": libraries})
        )
        if target.exists():
            shutil.rmtree(target)
        # Rename into place last so an interrupted fetch never looks complete.
        os.replace(work, target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    unpacked = _complete(target)
    assert unpacked is not None
    return unpacked
