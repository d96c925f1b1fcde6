"""Running kustomize: confined, with nothing of the controller's environment,
output read as a stream and capped, errors cleaned of temp paths and klog framing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import resource
import signal
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from sluice_runtime import confining
from sluice_runtime.building.tools import BuildError, Kustomize, Sandbox

_MAX_MESSAGE = 4000


@contextlib.contextmanager
def _closed_port() -> Iterator[int]:
    """A loopback port that refuses connections for as long as the context lasts."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))  # bound but never listening: connections are refused
        yield int(sock.getsockname()[1])


_PASSED_THROUGH = (
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR",
)  # fmt: skip


def _environment(home: Path, closed_port: int | None) -> dict[str, str]:
    """What kustomize runs with: nothing of the controller's own environment.

    A fresh HOME hides any git, ssh or kubectl configuration; with a closed
    port, HTTP(S) goes to a proxy that refuses and git may use no transport.
    """
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "KUBECONFIG": str(home / "kubeconfig"),
        "LANG": "C.UTF-8",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
    }
    if closed_port is None:
        env.update({k: os.environ[k] for k in _PASSED_THROUGH if k in os.environ})
        return env
    proxy = f"http://127.0.0.1:{closed_port}"
    env.update(
        {
            "HTTP_PROXY": proxy,
            "HTTPS_PROXY": proxy,
            "http_proxy": proxy,
            "https_proxy": proxy,
            "ALL_PROXY": proxy,
            "NO_PROXY": "",
            "no_proxy": "",
            "GIT_ALLOW_PROTOCOL": "none",
            "GIT_SSH_COMMAND": "false",
        }
    )
    return env


_REMOTE_SYSTEM = tuple(Path(p) for p in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"))
"""What git needs to fetch a remote base: programs, libraries, CA bundles, resolver config."""
_MAX_STDERR = 1 << 20


def _confinement(
    kustomize: Kustomize, root: Path, home: Path, *, allow_remote_bases: bool, network: bool
) -> confining.Confinement:
    """Reads of the artifact and kustomize itself, nothing else; with remote
    bases, also the system's programs, a private home to clone into, and TCP.
    With `network`, TCP is not confined (a kernel whose Landlock has no TCP
    rules; plugin configs are refused and the proxy refuses connections).

    The controller's own files (its service-account token, its kubeconfig,
    other tenants' work directories) are in none of these.
    """
    executable = Path(os.path.realpath(kustomize.executable))
    if not allow_remote_bases:
        return confining.Confinement(read=(root,), execute=(executable,), network=network)
    return confining.Confinement(
        read=(root,),
        execute=(executable, *_REMOTE_SYSTEM),
        write=(home, Path("/dev/null")),
        network=True,
    )


async def run(
    kustomize: Kustomize,
    directory: Path,
    *,
    roots: tuple[Path, ...],
    sandbox: Sandbox,
    allow_remote_bases: bool,
    timeout: float,
    max_output: int,
    max_memory: int,
) -> bytes:
    with (
        tempfile.TemporaryDirectory(prefix="kustomize-home-") as home,
        _closed_port() as port,
        contextlib.ExitStack() as stack,
    ):
        preexec = None
        if sandbox.confines_files:
            confinement = _confinement(
                kustomize,
                roots[-1],
                Path(home),
                allow_remote_bases=allow_remote_bases,
                network=sandbox is not Sandbox.LANDLOCK,
            )
            try:
                preexec = stack.enter_context(confining.confined(confinement))
            except confining.ConfinementError as error:
                raise BuildError(f"cannot confine the build: {error}") from None
        process = await asyncio.create_subprocess_exec(
            *kustomize.command(directory),
            cwd=directory,
            env=_environment(Path(home), None if allow_remote_bases else port),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group, so git children die with it
            preexec_fn=functools.partial(_limit_memory, max_memory, preexec),
        )
        assert process.stdout is not None and process.stderr is not None
        errors = asyncio.ensure_future(_read_capped(process.stderr, _MAX_STDERR, drain=True))
        try:
            async with asyncio.timeout(timeout):
                stdout = await _read_capped(process.stdout, max_output, drain=False)
                if stdout is None:
                    raise BuildError(
                        f"kustomize output exceeds {_size(max_output)} and was stopped; "
                        "split the Kustomization or raise --build-max-output"
                    )
                stderr = await errors
                await process.wait()
        except TimeoutError:
            raise BuildError(f"kustomize build timed out after {timeout:g}s") from None
        finally:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                # What is left in the pipe is read and dropped: a stdout cut off at the
                # limit may have its transport paused (buffer full), then it never sees
                # the pipe's end, and Python 3.11's wait() waits for every pipe's end.
                await asyncio.gather(_discard(process.stdout), process.wait())
            errors.cancel()
    if process.returncode != 0 and _OUT_OF_MEMORY.search(stderr or b""):
        raise BuildError(
            f"kustomize needed more than {_size(max_memory)} of memory and was stopped; "
            "split the Kustomization or raise --build-max-memory"
        )
    if process.returncode != 0:
        message = failure_message((stderr or b"").decode(errors="replace"), roots, directory)
        if sandbox.confines_files and "permission denied" in message:
            message += f" ({sandbox.describe()})"
        raise BuildError(message)
    return stdout


_OUT_OF_MEMORY = re.compile(
    rb"^fatal error: runtime: (?:cannot allocate memory|out of memory)", re.M
)
"""How the Go runtime dies when an allocation passes the data limit."""


def _limit_memory(max_memory: int, then: Callable[[], None] | None) -> None:
    """In the child, before exec: cap its data segment (Go's heap is private writable
    memory, which RLIMIT_DATA counts; its PROT_NONE reservations are not), then confine."""
    resource.setrlimit(resource.RLIMIT_DATA, (max_memory, max_memory))
    if then is not None:
        then()


async def _read_capped(stream: asyncio.StreamReader, limit: int, *, drain: bool) -> bytes | None:
    """All of `stream` up to `limit` bytes.

    Past the limit: with `drain`, the rest is read and dropped (so the writer
    never blocks on a full pipe) and the first `limit` bytes are returned;
    without, None is returned at once and the caller stops the writer.
    """
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.read(1 << 16):
        if size + len(chunk) > limit:
            if not drain:
                return None
            chunk = chunk[: max(limit - size, 0)]
        size += len(chunk)
        if chunk:
            chunks.append(chunk)
    return b"".join(chunks)


async def _discard(stream: asyncio.StreamReader) -> None:
    while await stream.read(1 << 16):
        pass


def _size(count: int) -> str:
    return f"{count >> 20} MiB" if count >= 1 << 20 else f"{count} bytes"


_KLOG_QUOTED = re.compile(r'"command failed" err="((?:[^"\\]|\\.)*)"')
_KLOG_BLOCK = re.compile(r'"command failed" err=<\n(.*?)\n\s*>', re.S)
_MALFORMED = re.compile(r"MalformedYAMLError: (yaml: .*?) in File: (\S+)")
_RECURSED = re.compile(r"recursed accumulation of path '([^']+)'")


def failure_message(stderr: str, roots: tuple[Path, ...], directory: Path) -> str:
    """kustomize's error without kubectl's log framing or the controller's temp paths."""
    message = kustomize_error(stderr)
    malformed = _MALFORMED.search(message)
    if malformed:
        # kustomize names the file relative to the kustomization that listed it;
        # the chain of bases before it is noise next to the file and line.
        bases = _RECURSED.findall(message, 0, malformed.start())
        listed = (Path(bases[-1]) if bases else directory) / malformed.group(2)
        message = f"{listed}: {malformed.group(1)}"
    for root in sorted({str(r) for r in roots}, key=len, reverse=True):
        message = message.replace(root + "/", "").replace(root, ".")
    message = message.strip()
    if len(message) > _MAX_MESSAGE:
        message = message[:_MAX_MESSAGE] + "…"
    return f"kustomize build failed: {message}"


def kustomize_error(stderr: str) -> str:
    quoted = _KLOG_QUOTED.search(stderr)
    if quoted:
        try:
            return str(json.loads(f'"{quoted.group(1)}"'))
        except ValueError:
            return quoted.group(1)
    block = _KLOG_BLOCK.search(stderr)
    if block:
        return "\n".join(line.removeprefix("\t") for line in block.group(1).splitlines())
    lines = [line for line in stderr.splitlines() if not line.startswith("# Warning")]
    text = "\n".join(lines).strip()
    return text.removeprefix("Error: ").removeprefix("error: ")
