"""`sluice build kustomization NAME --path DIR`: print what the controller would apply."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from sluice_cli.local_builds import build_local, dump_all, load_kustomization
from sluice_cli.terminal import ERROR, OK, Failure, add_cluster_flags, connected, run_verb
from sluice_runtime.kube.client import KubeClient

DESCRIPTION = """The build kustomization command builds a Kustomization resource from a local
directory, as the kustomize-controller would: with the spec's transformations
and post-build substitutions (variables read from the cluster), and the
labels the controller's apply adds. It prints the multi-doc YAML to stdout.

examples:
  # Build the local manifests as they would be applied by the controller
  sluice build kustomization my-app --path ./path/to/local/manifests

  # Build using a Kustomization from a file, without the cluster
  sluice build ks my-app --path ./apps --kustomization-file ./clusters/prod/apps.yaml --dry-run
"""


def register(commands: Any, *more: Callable[[Any], None]) -> None:
    """The `build` verb: `build kustomization`, and the sub-commands `more` adds
    (`build helmrelease` lives with `diff helmrelease`)."""
    parser = commands.add_parser(
        "build",
        help="build a Kustomization or HelmRelease locally",
        description="The build sub-commands build Flux resources locally.",
    )
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    ks = kinds.add_parser(
        "kustomization",
        aliases=["ks"],
        help="build a Kustomization from a local directory",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_local_build_flags(ks)
    ks.add_argument(
        "--dry-run", action="store_true",
        help="do not read the cluster: needs --kustomization-file; only postBuild.substitute "
        "variables are substituted",
    )  # fmt: skip
    ks.set_defaults(run=_run)
    for add in more:
        add(kinds)


def add_local_build_flags(parser: argparse.ArgumentParser) -> None:
    """NAME, --path and --kustomization-file, shared with `sluice diff kustomization`."""
    parser.add_argument("name", help="name of the Kustomization")
    parser.add_argument("--path", required=True, type=Path, help="path to the manifests location")
    parser.add_argument(
        "--kustomization-file", type=Path,
        help="path to a file holding the Kustomization (default: read it from the cluster)",
    )  # fmt: skip
    add_cluster_flags(parser)


def _run(args: argparse.Namespace) -> int:
    return run_verb("build", lambda: asyncio.run(_build(args)))


@contextlib.asynccontextmanager
async def _maybe_connected(args: argparse.Namespace) -> AsyncIterator[KubeClient | None]:
    if args.dry_run:
        yield None
        return
    async with connected(args.kubeconfig, args.context) as client:
        yield client


async def _build(args: argparse.Namespace) -> int:
    if args.dry_run and args.kustomization_file is None:
        raise Failure("--dry-run needs --kustomization-file: the cluster is not read", ERROR)
    async with _maybe_connected(args) as client:
        ks = await load_kustomization(client, args.namespace, args.name, args.kustomization_file)
        objects = await build_local(client, ks, args.path)
    sys.stdout.write(dump_all(objects))
    return OK
