"""`sluice crds generate|check|install`: the CRDs derived from the API models."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import yaml

from sluice_api import ALL_KINDS, crds
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import KubeError, one_line
from sluice_runtime.kube.installing import install_crds


def all_crds() -> list[dict[str, Any]]:
    return [crds.crd_for(model) for model in ALL_KINDS]


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser("crds", help="generate or install CRDs")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    generate = actions.add_parser("generate", help="write crds/ from the models")
    generate.add_argument("--out", type=Path)
    generate.set_defaults(run=_generate)
    check = actions.add_parser("check", help="exit 1 when crds/ is out of date")
    check.add_argument("--out", type=Path)
    check.set_defaults(run=_check)
    install = actions.add_parser("install", help="apply the CRDs to a cluster")
    install.add_argument("--kubeconfig")
    install.set_defaults(run=_install)
    show = actions.add_parser("show", help="print the CRDs as one YAML stream")
    show.set_defaults(run=_show)


def _generate(args: argparse.Namespace) -> int:
    return crds.main([*(["--out", str(args.out)] if args.out else [])])


def _check(args: argparse.Namespace) -> int:
    return crds.main(["--check", *(["--out", str(args.out)] if args.out else [])])


def _show(_: argparse.Namespace) -> int:
    sys.stdout.write(yaml.safe_dump_all(all_crds(), sort_keys=False))
    return 0


def _install(args: argparse.Namespace) -> int:
    async def install() -> list[str]:
        client = await KubeClient.connect(kubeconfig=args.kubeconfig)
        try:
            return await install_crds(client, all_crds())
        finally:
            await client.close()

    try:
        names = asyncio.run(install())
    except (KubeError, OSError) as error:
        print(f"sluice crds install: {one_line(error)}", file=sys.stderr)
        return 1
    for name in names:
        print(f"customresourcedefinition/{name} established")
    return 0
