"""`sluice check`: is this cluster ready for Sluice, and is Sluice running in it?

As `flux check`: the API server's version against the minimum, each
controller's Deployment (found, every replica ready, which image; the ones
the chart deploys by default, or those `--components`/`--components-extra`
name), and each CRD (installed, and the same versions and schemas as this CLI's models: a
CRD left behind by an older install would reject or drop new fields).
Every line is a verdict; the exit code is 1 when any of them failed.
"""

from __future__ import annotations

import argparse
import asyncio
import re
from typing import Any

from sluice_api import ALL_KINDS, crds
from sluice_cli import controllers
from sluice_cli.terminal import (
    FAILED,
    OK,
    add_cluster_flags,
    connected,
    console,
    run_verb,
)
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.installing import for_server, supports_cel
from sluice_runtime.kube.resources import CRD

MIN_KUBERNETES = (1, 20, 0)
"""The oldest API server Sluice is tested against: the local control plane
(`sluice_envtest`, built from Debian's source package) is 1.20; server-side apply, which the
kustomize-controller depends on, is on by default from 1.18."""

DESCRIPTION = """The check command checks the prerequisites and the installation of Sluice.

examples:
  # Run pre-installation checks
  sluice check --pre

  # Run installation checks
  sluice check

  # Check the opt-in application-controller too
  sluice check --components-extra=application-controller
"""


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "check",
        help="check requirements and installation",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--pre", action="store_true", help="only run pre-installation checks")
    parser.add_argument(
        "--components", type=_controller_list, default=list(controllers.DEFAULT),
        help="the controllers to check, comma-separated (default: those the chart deploys, "
        f"{','.join(controllers.DEFAULT)})",
    )  # fmt: skip
    parser.add_argument(
        "--components-extra", type=_controller_list, default=[],
        help="more controllers to check, comma-separated (the chart's opt-in ones: "
        f"{','.join(n for n in controllers.NAMES if n not in controllers.DEFAULT)})",
    )  # fmt: skip
    add_cluster_flags(parser)
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    return run_verb("check", lambda: asyncio.run(_check(args)))


def _controller_list(value: str) -> list[str]:
    """`--components a,b`: names of Sluice's controllers; a misspelt one is refused
    rather than silently left unchecked."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in controllers.NAMES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown controller {', '.join(unknown)} (known: {', '.join(controllers.NAMES)})"
        )
    return names


def kubernetes_version(git_version: str) -> tuple[int, int, int] | None:
    """`v1.31.2+k3s1` as (1, 31, 2); None when it is not a version."""
    match = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", git_version)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def crd_problem(installed: JSON, wanted: JSON) -> str | None:
    """Why the installed CRD is not the one this CLI's models define, or None."""
    have = {v.get("name"): v for v in (installed.get("spec") or {}).get("versions") or []}
    for version in wanted["spec"]["versions"]:
        name = version["name"]
        found = have.get(name)
        if found is None:
            return f"version {name} is missing"
        if bool(found.get("served")) != bool(version.get("served")):
            return f"version {name} is {'not ' if not found.get('served') else ''}served"
        if bool(found.get("storage")) != bool(version.get("storage")):
            return f"version {name} storage is {bool(found.get('storage'))}"
        if (found.get("schema") or {}) != (version.get("schema") or {}):
            return f"version {name} has a different schema"
    return None


async def _check(args: argparse.Namespace) -> int:
    out = console()
    failures = 0

    def verdict(ok: bool, message: str) -> None:
        nonlocal failures
        failures += 0 if ok else 1
        out.print(f"{'✔' if ok else '✗'} {message}")

    async with connected(args.kubeconfig, args.context) as client:
        out.print("► checking prerequisites")
        server = await client.request("GET", "/version")
        git_version = str(server.get("gitVersion") or "")
        parsed = kubernetes_version(git_version)
        minimum = ".".join(map(str, MIN_KUBERNETES))
        verdict(
            parsed is not None and parsed >= MIN_KUBERNETES,
            f"Kubernetes {git_version.lstrip('v') or 'unknown'} >={minimum}",
        )
        if not args.pre:
            out.print("► checking controllers")
            wanted = [*args.components, *args.components_extra]
            for name in (name for name in controllers.NAMES if name in wanted):
                found = await controllers.find(client, args.namespace, name)
                if found is None:
                    verdict(False, (
                        f"{name}: deployment {args.namespace}/{name} not found; "
                        "if it is not installed, name the others with --components"
                    ))  # fmt: skip
                    continue
                ready = found.replicas > 0 and found.ready >= found.replicas
                state = "deployment ready" if ready else (
                    f"deployment not ready ({found.ready}/{found.replicas} replicas ready)"
                )  # fmt: skip
                verdict(ready, f"{name}: {state}")
                out.print(f"► {found.image}")
            out.print("► checking crds")
            for ok, message in await _crds(client):
                verdict(ok, message)
    if failures:
        out.print("✗ check failed")
        return FAILED
    out.print("✔ all checks passed")
    return OK


async def _crds(client: KubeClient) -> list[tuple[bool, str]]:
    results = []
    # Compared with what `sluice crds install` would install on this server.
    cel = supports_cel(await client.request("GET", "/version"))
    for model in ALL_KINDS:
        wanted = for_server(crds.crd_for(model), cel=cel)
        name = wanted["metadata"]["name"]
        storage = next(v["name"] for v in wanted["spec"]["versions"] if v.get("storage"))
        try:
            installed = await client.get(CRD, name)
        except NotFound:
            results.append((False, f"{name}: not installed; install with `sluice crds install`"))
            continue
        problem = crd_problem(installed, wanted)
        if problem:
            results.append(
                (False, f"{name}: not current ({problem}); update with `sluice crds install`")
            )
        else:
            results.append((True, f"{name}/{storage}"))
    return results
