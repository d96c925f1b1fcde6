"""Server programs as children of the test session, logged to a file, killed with it.

sshd and the registry run as child processes on loopback ports. When one
fails to start, the error carries the tail of its log; when the session
dies, however it dies, they die with it (see `die_with_parent`).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from sluice_envtest.controlplane import die_with_parent
from sluice_envtest.lifecycle import Startable


class ServerError(RuntimeError):
    """A test server could not start; the message carries the tail of its log."""


def log_tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def spawn(
    argv: list[str],
    *,
    log: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    user: int | None = None,
    group: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start `argv` with stdout and stderr appended to `log`.

    With `user`, the child switches to that uid (and `group`) before exec;
    Python does so before `preexec_fn`, which matters because a uid change
    clears the parent-death signal.
    """
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            user=user,
            group=group,
            extra_groups=[] if user is not None else None,
            preexec_fn=die_with_parent,
            start_new_session=True,
        )


def wait_ready(
    probe: Callable[[], bool],
    *,
    process: subprocess.Popen[bytes],
    name: str,
    log: Path,
    timeout: float,
) -> None:
    """Poll `probe` until it is true; ServerError with the log tail if the process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerError(
                f"{name} exited with code {process.returncode} while starting "
                f"(log {log}):\n{log_tail(log)}"
            )
        if probe():
            return
        time.sleep(0.05)
    stop(process)
    raise ServerError(f"{name} not ready after {timeout:.0f}s (log {log}):\n{log_tail(log)}")


def stop(process: subprocess.Popen[bytes], *, grace: float = 5.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class ChildServer(Startable):
    """A test server that is one child process with its own work directory.

    Subclasses prepare their files in `start()` and hand the spawned process
    to `_launched`, which waits until `probe` answers; `stop()` and the
    context-manager protocol are shared.
    """

    name = "server"

    def __init__(self, workdir: Path | None, *, prefix: str, log_name: str) -> None:
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=prefix))
        self.log_file = self.workdir / log_name
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _launched(
        self, process: subprocess.Popen[bytes], probe: Callable[[], bool], *, timeout: float
    ) -> None:
        self._process = process
        try:
            wait_ready(probe, process=process, name=self.name, log=self.log_file, timeout=timeout)
        except ServerError:
            self.stop()
            raise

    def stop(self) -> None:
        if self._process is not None:
            stop(self._process)
            self._process = None
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
