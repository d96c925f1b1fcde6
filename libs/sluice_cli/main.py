"""`sluice`: the command-line tool (local development environment, CRDs, gates, artifacts)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sluice_cli import (
    artifact_command,
    building_command,
    checking,
    crds_command,
    dev,
    diffing,
    events_command,
    gate_command,
    getting,
    helmrelease_command,
    logs_command,
    reconciling,
    suspending,
    tree_command,
    version_command,
)


def main(argv: Sequence[str] | None = None) -> None:
    args = make_parser().parse_args(argv)
    sys.exit(args.run(args))


def make_parser() -> argparse.ArgumentParser:
    """Every verb's parser, without running anything: `main` and the docs' tests share it."""
    parser = argparse.ArgumentParser(prog="sluice", description="Sluice GitOps toolkit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    dev.register(commands)
    crds_command.register(commands)
    gate_command.register(commands)
    artifact_command.register(commands)
    getting.register(commands)
    reconciling.register(commands)
    suspending.register(commands)
    events_command.register(commands)
    logs_command.register(commands)
    checking.register(commands)
    version_command.register(commands)
    tree_command.register(commands)
    diffing.register(commands, artifact_command.add_diff, helmrelease_command.add_diff)
    building_command.register(commands, helmrelease_command.add_build)
    return parser


if __name__ == "__main__":
    main()
