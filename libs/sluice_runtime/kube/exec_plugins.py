"""Running a kubeconfig's `exec` credential plugin, when the operator allows it.

The plugin protocol is client-go's: the command runs with the process's
environment plus the kubeconfig's `env`, `KUBERNETES_EXEC_INFO` describing
the request, and prints an ExecCredential whose status holds a token or a
client certificate and key (PEM), and optionally when they expire. Only the
exit code and the last line of stderr are reported on failure; the output is
credentials and is never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sluice_runtime.kube.errors import ConfigError
from sluice_runtime.kube.kubeconfigs import ExecPlugin

TIMEOUT = 30.0
"""How long a plugin may take; a hung plugin must not hold a reconcile forever."""


@dataclass(frozen=True)
class ExecCredential:
    token: str | None = field(default=None, repr=False)
    cert_data: bytes | None = field(default=None, repr=False)
    key_data: bytes | None = field(default=None, repr=False)
    expires: datetime | None = None


async def run_exec_plugin(plugin: ExecPlugin, *, timeout: float = TIMEOUT) -> ExecCredential:
    """Run the plugin once; ConfigError says what went wrong without its output."""
    info = {
        "apiVersion": plugin.api_version,
        "kind": "ExecCredential",
        "spec": {"interactive": False},
    }
    env = {**os.environ, **dict(plugin.env), "KUBERNETES_EXEC_INFO": json.dumps(info)}
    try:
        process = await asyncio.create_subprocess_exec(
            plugin.command,
            *plugin.args,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as error:
        raise ConfigError(f"exec plugin '{plugin.command}' cannot run: {error.strerror}") from None
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise ConfigError(f"exec plugin '{plugin.command}' took more than {timeout:g}s") from None
    if process.returncode != 0:
        lines = stderr.decode(errors="replace").strip().splitlines()
        detail = f": {lines[-1][:200]}" if lines else ""
        raise ConfigError(
            f"exec plugin '{plugin.command}' exited with {process.returncode}{detail}"
        )
    return _credential(plugin, stdout)


def _credential(plugin: ExecPlugin, stdout: bytes) -> ExecCredential:
    try:
        answer = json.loads(stdout)
        status = answer["status"]
        if answer.get("kind") != "ExecCredential" or not isinstance(status, dict):
            raise ValueError
    except (ValueError, KeyError, TypeError):
        raise ConfigError(
            f"exec plugin '{plugin.command}' did not print an ExecCredential"
        ) from None
    expires = None
    if status.get("expirationTimestamp"):
        try:
            expires = datetime.fromisoformat(str(status["expirationTimestamp"]))
            if expires.tzinfo is None:
                expires = expires.replace(tzinfo=UTC)
        except ValueError:
            raise ConfigError(
                f"exec plugin '{plugin.command}': expirationTimestamp is not a timestamp"
            ) from None
    token = status.get("token")
    cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
    if not token and not (cert and key):
        raise ConfigError(
            f"exec plugin '{plugin.command}' gave neither a token nor a client certificate and key"
        )
    return ExecCredential(
        token=str(token) if token else None,
        cert_data=str(cert).encode() if cert and key else None,
        key_data=str(key).encode() if cert and key else None,
        expires=expires,
    )
