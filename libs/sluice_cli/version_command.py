"""`sluice version`: this CLI's version, and the cluster's and its controllers'."""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
from typing import Any

import yaml

from sluice_cli import controllers
from sluice_cli.terminal import OK, add_cluster_flags, connected, console, run_verb

DESCRIPTION = """The version command prints the CLI and server versions.

examples:
  # Print the CLI version
  sluice version --client

  # Print the versions of the CLI, the API server and the controllers
  sluice version
"""


def cli_version() -> str:
    try:
        return "v" + importlib.metadata.version("sluice")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        return "unknown"


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "version",
        help="print the CLI and server versions",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--client", action="store_true", help="print only the CLI version")
    parser.add_argument(
        "-o", "--output", choices=("text", "yaml", "json"), default="text",
        help="the format in which the versions are printed (default text)",
    )  # fmt: skip
    add_cluster_flags(parser)
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    return run_verb("version", lambda: asyncio.run(_version(args)))


async def _version(args: argparse.Namespace) -> int:
    versions: dict[str, str] = {"sluice": cli_version()}
    if not args.client:
        async with connected(args.kubeconfig, args.context) as client:
            server = await client.request("GET", "/version")
            versions["kubernetes"] = str(server.get("gitVersion") or "unknown")
            for name in controllers.NAMES:
                found = await controllers.find(client, args.namespace, name)
                if found is not None:
                    versions[name] = found.version
    out = console()
    if args.output == "json":
        out.file.write(json.dumps(versions, indent=2) + "\n")
    elif args.output == "yaml":
        out.file.write(yaml.safe_dump(versions, sort_keys=False))
    else:
        for name, version in versions.items():
            out.print(f"{name}: {version}")
    return OK
