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
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_SUITE = "bookworm"

Log = Callable[[str], None]

_NOT_FOUND = re.compile(r"^\s*(\S+) => not found", re.MULTILINE)


class BuildError(RuntimeError):
    """Fetching or building from Debian failed; the message says which step, with output."""


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


def run(
    cmd: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    summary: str | None = None,
) -> str:
    """Run a command to completion; its stdout, or a BuildError with the output's tail."""
    return _completed(cmd, cwd=cwd, env=env, summary=summary).stdout


def _completed(
    cmd: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    summary: str | None = None,
) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    except FileNotFoundError as error:
        raise BuildError(f"{cmd[0]} is not installed: {error}") from None
    if done.returncode != 0:
        what = summary or f"{' '.join(cmd[:3])} ..."
        raise BuildError(f"{what} failed (exit {done.returncode}):\n{_tail(done)}")
    return done


def _tail(done: subprocess.CompletedProcess[str]) -> str:
    return "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])


class PrivateApt:
    """apt-get with its own lists, cache and sources, so the host's apt stays as it was."""

    def __init__(
        self, base: Path, *, source_packages: bool = True, options: Sequence[str] = ()
    ) -> None:
        self.base = base
        for sub in ("lists/partial", "cache/archives/partial", "etc"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        sources = base / "etc" / "sources.list"
        lines = f"deb {DEBIAN_MIRROR} {DEBIAN_SUITE} main\n"
        if source_packages:
            lines += f"deb-src {DEBIAN_MIRROR} {DEBIAN_SUITE} main\n"
        sources.write_text(lines)
        self.options = [
            "-o", f"Dir::Etc::SourceList={sources}",
            "-o", "Dir::Etc::SourceParts=/dev/null",
            "-o", f"Dir::State::Lists={base / 'lists'}",
            "-o", f"Dir::Cache={base / 'cache'}",
            # Root runs downloads unsandboxed into our private directories;
            # apt's _apt user could not write there anyway.
            "-o", "APT::Sandbox::User=root",
            *options,
            "-qq",
        ]  # fmt: skip

    def update(self) -> None:
        done = _completed(["apt-get", *self.options, "update"], summary="apt-get update")
        # apt-get update exits 0 when it could not fetch a thing; it only warns.
        if not any(self.base.glob("lists/*_Packages*")):
            raise BuildError(f"apt-get update fetched no package lists:\n{_tail(done)}")

    def run(self, *args: str, cwd: Path | None = None) -> str:
        return run(["apt-get", *self.options, *args], cwd=cwd, summary=f"apt-get {' '.join(args)}")

    def cache(self, *args: str) -> str:
        return run(["apt-cache", *self.options, *args], summary=f"apt-cache {' '.join(args)}")


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
            except _DownloadFailed as failure:
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


def missing_libraries(binary: Path, *, library_dir: Path | None = None) -> list[str]:
    """Sonames `binary` needs that the dynamic loader cannot find, per ldd."""
    env = dict(os.environ)
    if library_dir is not None:
        env["LD_LIBRARY_PATH"] = str(library_dir)
    done = subprocess.run(["ldd", str(binary)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        # "not a dynamic executable": a static binary needs nothing.
        return []
    return sorted(set(_NOT_FOUND.findall(done.stdout)))


# Fetching binary packages needs neither translations nor source indexes.
_LEAN = ("-o", "Acquire::Languages=none")
_COMPLETE = ".complete.json"


class _DownloadFailed(Exception):
    def __init__(self, error: BuildError) -> None:
        super().__init__(str(error))
        self.error = error


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
    for record in _records(apt, names):
        versions[record["Package"]] = record["Version"]
    absent = [n for n in names if n not in versions]
    if absent:
        raise BuildError(f"no such package in Debian {DEBIAN_SUITE}: {', '.join(absent)}")
    return versions


def _records(apt: PrivateApt, names: Sequence[str]) -> list[dict[str, str]]:
    records: list[dict[str, str]] = []
    for block in apt.cache("show", "--no-all-versions", *names).split("\n\n"):
        fields: dict[str, str] = {}
        last = ""
        for line in block.splitlines():
            if line.startswith((" ", "\t")) and last:
                fields[last] += line
            elif ":" in line:
                last, _, value = line.partition(":")
                fields[last] = value.strip()
        if "Package" in fields:
            records.append(fields)
    return records


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
        _download_unpack(apt, pinned, work / "debs", root)
        for binary in binaries:
            if not (root / binary).exists():
                raise BuildError(f"{binary} is not in packages {' '.join(pinned)}")
        libraries = _provide_libraries(
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


def _download_unpack(apt: PrivateApt, pinned: Sequence[str], debs: Path, root: Path) -> None:
    debs.mkdir(parents=True, exist_ok=True)
    try:
        apt.run("download", *pinned, cwd=debs)
    except BuildError as error:
        raise _DownloadFailed(error) from None
    for deb in sorted(debs.glob("*.deb")):
        run(["dpkg", "-x", str(deb), str(root)])
    shutil.rmtree(debs)


def _provide_libraries(
    apt: PrivateApt,
    binaries: Sequence[Path],
    packages: Sequence[str],
    root: Path,
    work: Path,
    say: Log,
) -> list[str]:
    """Copy the shared libraries the system lacks into work/lib; their sonames.

    Which package ships a soname is only known to Contents indexes (tens of
    MB), so walk the dependency graph instead: fetch the not-installed
    library packages the packages depend on, one level at a time, until ldd
    is satisfied. The library directory is checked with ldd, which also
    reports what the newly added libraries themselves lack.
    """
    lib = work / "lib"
    lib.mkdir()
    deps_root = work / "deps"
    searched = [root]
    seen = set(packages)
    frontier = list(packages)
    provided: set[str] = set()
    while True:
        missing = sorted({s for b in binaries for s in missing_libraries(b, library_dir=lib)})
        if not missing:
            break
        copied = False
        for soname in missing:
            found = _find_library(searched, soname)
            if found is not None and soname not in provided:
                shutil.copy2(found, lib / soname)
                provided.add(soname)
                copied = True
        if copied:
            continue  # the copied libraries may lack others in turn
        wanted = _not_installed([d for d in _library_dependencies(apt, frontier) if d not in seen])
        if not wanted:
            raise BuildError(
                f"{', '.join(b.name for b in binaries)} need {', '.join(missing)}, "
                f"which neither the system nor the dependencies of {', '.join(sorted(seen))} have"
            )
        say(f"fetching libraries the system lacks ({', '.join(missing)}): {' '.join(wanted)}")
        seen.update(wanted)
        frontier = wanted
        _download_unpack(apt, wanted, work / "debs", deps_root)
        searched = [root, deps_root]
    shutil.rmtree(deps_root, ignore_errors=True)
    if not provided:
        lib.rmdir()
    return sorted(provided)


def _find_library(trees: Sequence[Path], soname: str) -> Path | None:
    for tree in trees:
        for dirpath, _dirs, files in os.walk(tree):
            if soname in files:
                return Path(dirpath) / soname
    return None


def _library_dependencies(apt: PrivateApt, packages: Sequence[str]) -> list[str]:
    """What `packages` depend on that looks like a library package."""
    found: list[str] = []
    for record in _records(apt, packages):
        for field in ("Pre-Depends", "Depends"):
            for name in first_alternatives(record.get(field, "")):
                # Debian names every shared-library package lib* (zlib1g too).
                if "lib" in name and name not in found:
                    found.append(name)
    return found


def first_alternatives(depends: str) -> list[str]:
    """Package names of a Depends field, the first of each `a | b`, without versions or arch."""
    names = []
    for clause in depends.split(","):
        first = clause.split("|")[0].split("(")[0].strip()
        name = first.split(":")[0]
        if name:
            names.append(name)
    return names


def _not_installed(packages: Sequence[str]) -> list[str]:
    if not packages:
        return []
    done = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package} ${db:Status-Status}\n", *packages],
        capture_output=True,
        text=True,
    )
    installed = {
        line.split()[0] for line in done.stdout.splitlines() if line.endswith(" installed")
    }
    return [p for p in packages if p not in installed]
