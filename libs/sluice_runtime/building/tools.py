"""How a build is kept inside its artifact, and which kustomize runs it.

The sandbox is chosen once at startup (`--build-sandbox`) and named in every
message a refusal produces; kustomize is the standalone binary on PATH or
kubectl's built-in copy, v5 or later, checked once.
"""

from __future__ import annotations

import enum
import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sluice_runtime import confining

MIN_KUSTOMIZE_MAJOR = 5
"""Flux builds with kustomize v5; older versions read some fields differently."""


class BuildError(Exception):
    """The manifests could not be built; the message is meant for the Ready condition."""


class KustomizeUnavailable(Exception):
    """Neither a usable kustomize nor a kubectl with kustomize built in was found."""


class Sandbox(enum.StrEnum):
    """How a build is kept inside its artifact, strongest first.

    Every mode checks, before the build, every path a kustomization file
    makes kustomize read (`references`). The modes differ in what backs that
    check when kustomize reads something it did not show.
    """

    LANDLOCK = "landlock"
    """Confined by the kernel (Landlock ABI 4, Linux 6.7): reads only the artifact
    and kustomize, no TCP; plugin configs run, inside those bounds."""
    LANDLOCK_FILES = "landlock-files"
    """Reads confined by the kernel (Landlock ABI 1-3, Linux 5.13-6.6), TCP not:
    builtin plugin configs, which can fetch URLs, are refused."""
    REFUSE_PLUGINS = "refuse-plugins"
    """Unconfined (no Landlock, or seccomp blocks it): the reference check is the
    whole defence, and builtin plugin configs, whose paths and URLs are
    kustomize's to interpret, are refused."""

    @property
    def refuses_plugins(self) -> bool:
        return self is not Sandbox.LANDLOCK

    @property
    def confines_files(self) -> bool:
        return self is not Sandbox.REFUSE_PLUGINS

    def describe(self) -> str:
        if self is Sandbox.LANDLOCK:
            return "build sandbox: landlock (reads limited to the artifact, no network)"
        if self is Sandbox.LANDLOCK_FILES:
            return (
                "build sandbox: landlock-files (reads limited to the artifact; this kernel's "
                f"Landlock cannot confine TCP before ABI {confining.MIN_ABI})"
            )
        return (
            "build sandbox: refuse-plugins (this kernel has no usable Landlock, "
            "so builds are not confined)"
        )


def choose_sandbox(requested: str = "auto") -> Sandbox:
    """The sandbox for `--build-sandbox` (auto, landlock, landlock-files, refuse-plugins).

    `auto` takes the strongest mode the kernel offers. Raises
    KustomizeUnavailable when a Landlock mode is asked for and the kernel
    cannot give it, so a platform that requires confinement never silently
    runs without it.
    """
    if requested == Sandbox.REFUSE_PLUGINS:
        return Sandbox.REFUSE_PLUGINS
    abi = confining.landlock_abi()
    if requested == Sandbox.LANDLOCK_FILES and abi >= 1:
        return Sandbox.LANDLOCK_FILES
    if requested in ("auto", Sandbox.LANDLOCK) and abi >= confining.MIN_ABI:
        return Sandbox.LANDLOCK
    if requested == "auto":
        return Sandbox.LANDLOCK_FILES if abi >= 1 else Sandbox.REFUSE_PLUGINS
    need = f"ABI {confining.MIN_ABI} (Linux 6.7)" if requested == Sandbox.LANDLOCK else "Landlock"
    raise KustomizeUnavailable(
        f"--build-sandbox={requested}: the kernel's Landlock ABI is {abi}, {need} is needed"
    )


@functools.cache
def default_sandbox() -> Sandbox:
    """The sandbox `auto` chooses on this kernel, looked up once."""
    return choose_sandbox("auto")


@dataclass(frozen=True, slots=True)
class Kustomize:
    """A kustomize to build with: the standalone binary, or kubectl's built-in copy."""

    executable: str
    version: str
    embedded: bool
    """True for `kubectl kustomize`, False for `kustomize build`."""

    def command(self, directory: Path) -> list[str]:
        verb = "kustomize" if self.embedded else "build"
        # Flux's loader is unrestricted inside the artifact; the artifact
        # boundary is enforced by check_references before the build.
        return [self.executable, verb, str(directory), "--load-restrictor", "LoadRestrictionsNone"]


@functools.cache
def find_kustomize() -> Kustomize:
    """The kustomize on PATH, else kubectl's; checked once and remembered.

    Raises KustomizeUnavailable when neither exists or neither is v5 or later.
    """
    problems: list[str] = []
    standalone = shutil.which("kustomize")
    if standalone:
        try:
            output = version_output([standalone, "version"])
            return Kustomize(standalone, check_version(output, standalone), embedded=False)
        except KustomizeUnavailable as error:
            problems.append(str(error))
    kubectl = shutil.which("kubectl")
    if kubectl:
        try:
            output = version_output([kubectl, "version", "--client", "-o", "json"])
            try:
                embedded = str(json.loads(output).get("kustomizeVersion") or "")
            except (ValueError, AttributeError):
                embedded = ""
            if not embedded:
                raise KustomizeUnavailable(f"{kubectl} does not report a built-in kustomize")
            return Kustomize(kubectl, check_version(embedded, kubectl), embedded=True)
        except KustomizeUnavailable as error:
            problems.append(str(error))
    if not problems:
        raise KustomizeUnavailable(
            "neither kustomize nor kubectl is on PATH; install kustomize v5 or kubectl 1.27+"
        )
    raise KustomizeUnavailable("no usable kustomize: " + "; ".join(problems))


def version_output(command: list[str]) -> str:
    with tempfile.TemporaryDirectory(prefix="kustomize-version-") as home:
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=30,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home},
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise KustomizeUnavailable(f"{command[0]} cannot run: {error}") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()
        raise KustomizeUnavailable(f"'{' '.join(command[1:])}' failed with {command[0]}: {detail}")
    return done.stdout


def check_version(output: str, executable: str) -> str:
    match = re.search(r"v?(\d+)\.(\d+)\.(\d+)", output)
    if match is None:
        # A development build without a release number; trust it.
        return output.strip() or "unknown"
    version = f"v{match.group(1)}.{match.group(2)}.{match.group(3)}"
    if int(match.group(1)) < MIN_KUSTOMIZE_MAJOR:
        raise KustomizeUnavailable(
            f"{executable} has kustomize {version}; v{MIN_KUSTOMIZE_MAJOR} or later is required"
        )
    return version
