"""The shared libraries a program from a Debian package lacks on this machine.

They are taken from the packages it depends on and copied into one directory
for `LD_LIBRARY_PATH`: only those, so nothing shadows the system's own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from sluice_envtest.debian_apt import BuildError, Log, PrivateApt, download_unpack, package_records

_NOT_FOUND = re.compile(r"^\s*(\S+) => not found", re.MULTILINE)


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


def provide_libraries(
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
        download_unpack(apt, wanted, work / "debs", deps_root)
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
    for record in package_records(apt, packages):
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
