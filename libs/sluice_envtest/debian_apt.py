"""apt-get and apt-cache with private state, and the commands around them.

The host's package lists, cache and sources stay as they were: `PrivateApt`
keeps its own under a directory of the cache. `run` turns a failed command
into a `BuildError` whose message carries the tail of its output.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_SUITE = "bookworm"

Log = Callable[[str], None]


class BuildError(RuntimeError):
    """Fetching or building from Debian failed; the message says which step, with output."""


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


class DownloadFailed(Exception):
    """apt could not download a package: the package lists may be out of date."""

    def __init__(self, error: BuildError) -> None:
        super().__init__(str(error))
        self.error = error


def package_records(apt: PrivateApt, names: Sequence[str]) -> list[dict[str, str]]:
    """The candidate versions' `apt-cache show` records, one dict of fields per package."""
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


def download_unpack(apt: PrivateApt, pinned: Sequence[str], debs: Path, root: Path) -> None:
    """Download `pinned` (`name=version`) into `debs`, then `dpkg -x` each into `root`."""
    debs.mkdir(parents=True, exist_ok=True)
    try:
        apt.run("download", *pinned, cwd=debs)
    except BuildError as error:
        raise DownloadFailed(error) from None
    for deb in sorted(debs.glob("*.deb")):
        run(["dpkg", "-x", str(deb), str(root)])
    shutil.rmtree(debs)
