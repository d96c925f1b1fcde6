"""`sluice logs`: the controllers' logs, filtered by the object they are about.

The controllers log JSON lines (`sluice_runtime.observing.logging`), and
every line of a reconcile carries the object's `kind`, `namespace` and
`name`. This reads the logs of the controllers' pods through the API
(`pods/log`, the `manager` container of each Deployment in the controllers'
namespace), keeps the lines about the objects asked for, and prints them as
`flux logs` does: time, level, object, message, then the line's other fields.

A local control plane (`sluice dev`) has no kubelet and no pods: the
controllers run as processes and their logs are in `sluice dev`'s output,
which the error says.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass
from typing import Any

from sluice_cli import controllers
from sluice_cli.terminal import (
    DEFAULT_NAMESPACE,
    ERROR,
    FAILED,
    OK,
    Failure,
    connected,
    run_verb,
)
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import ApiError

LEVELS = ("debug", "info", "warning", "error")
_PLUMBING = frozenset({"ts", "level", "msg", "kind", "namespace", "name", "reconcileID", "logger"})

DESCRIPTION = """The logs command displays formatted logs from the Sluice controllers.

examples:
  # Print the reconciliation logs of all Flux resources of the flux-system namespace
  sluice logs

  # Print all logs of all Kustomizations, of every namespace, as they come
  sluice logs --kind=Kustomization -A --follow

  # Print the errors of one Kustomization
  sluice logs --kind=Kustomization --name=podinfo --level=error
"""


@dataclass(frozen=True, slots=True)
class Filter:
    kind: str | None = None
    name: str | None = None
    namespace: str | None = None
    """None: every namespace (`-A`)."""
    level: str | None = None


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "logs",
        help="display formatted logs for the controllers",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kind", help="show only the logs about objects of this kind")
    parser.add_argument("--name", help="show only the logs about objects of this name")
    parser.add_argument("--level", choices=LEVELS, help="show only the logs of this level")
    parser.add_argument("-f", "--follow", action="store_true", help="follow the logs as they come")
    parser.add_argument(
        "--tail", type=int, default=-1, help="lines of recent log of each pod to show (default all)"
    )
    parser.add_argument(
        "--flux-namespace", default=DEFAULT_NAMESPACE,
        help=f"the namespace where the controllers run (default {DEFAULT_NAMESPACE!r})",
    )  # fmt: skip
    parser.add_argument("--kubeconfig", help="path to the kubeconfig file")
    parser.add_argument("--context", help="the kubeconfig context to use")
    parser.add_argument(
        "-n", "--namespace", default=DEFAULT_NAMESPACE,
        help=f"show only the logs about objects of this namespace (default {DEFAULT_NAMESPACE!r})",
    )  # fmt: skip
    parser.add_argument(
        "-A", "--all-namespaces", action="store_true",
        help="the logs about objects of every namespace",
    )  # fmt: skip
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    return run_verb("logs", lambda: asyncio.run(_logs(args)), streaming=args.follow)


def format_line(line: str, wanted: Filter) -> str | None:
    """One controller log line as `flux logs` prints it, or None when it is filtered out.

    Lines that are not JSON objects (a crash before logging was set up) are
    kept only when nothing narrows the output.
    """
    try:
        entry = json.loads(line)
    except ValueError:
        entry = None
    if not isinstance(entry, dict):
        narrowed = wanted.kind or wanted.name or wanted.level or wanted.namespace is not None
        return None if narrowed or not line.strip() else line
    kind, name, namespace = entry.get("kind"), entry.get("name"), entry.get("namespace")
    if wanted.kind and str(kind or "").lower() != wanted.kind.lower():
        return None
    if wanted.name and name != wanted.name:
        return None
    if wanted.namespace is not None and namespace != wanted.namespace:
        return None
    if wanted.level and entry.get("level") != wanted.level:
        return None
    subject = f"{kind}/{name}.{namespace}" if kind and name else "controller"
    extra = " ".join(
        f"{key}={_value(value)}" for key, value in entry.items() if key not in _PLUMBING
    )
    text = f"{entry.get('ts', '')} {entry.get('level', '')} {subject} - {entry.get('msg', '')}"
    return f"{text} {extra}" if extra else text


def _value(value: Any) -> str:
    return value if isinstance(value, str) and " " not in value else json.dumps(value)


async def _logs(args: argparse.Namespace) -> int:
    wanted = Filter(
        kind=args.kind,
        name=args.name,
        namespace=None if args.all_namespaces else args.namespace,
        level=args.level,
    )
    async with connected(args.kubeconfig, args.context) as client:
        pods = await _controller_pods(client, args.flux_namespace)
        query = [("container", controllers.CONTAINER)]
        if args.follow:
            query.append(("follow", "true"))
        if args.tail >= 0:
            query.append(("tailLines", str(args.tail)))
        lines: asyncio.Queue[str | None] = asyncio.Queue()

        async def read(pod: JSON) -> None:
            name = pod["metadata"]["name"]
            path = controllers.POD.path(namespace=args.flux_namespace, name=name, subresource="log")
            try:
                async for line in client.stream_lines(path, query=query):
                    await lines.put(line)
            except ApiError as error:
                raise Failure(
                    f"cannot read the logs of pod {args.flux_namespace}/{name}: {error}", ERROR
                ) from None

        readers = [asyncio.create_task(read(pod), name=f"logs-{i}") for i, pod in enumerate(pods)]

        async def all_read() -> list[BaseException | None]:
            results = await asyncio.gather(*readers, return_exceptions=True)
            await lines.put(None)  # the end marker, once every stream has ended
            return results

        done = asyncio.create_task(all_read(), name="logs-done")
        try:
            while (line := await lines.get()) is not None:
                shown = format_line(line, wanted)
                if shown is not None:
                    sys.stdout.write(shown + "\n")
                    sys.stdout.flush()
        finally:
            for reader in readers:
                reader.cancel()
        for result in await done:
            if isinstance(result, Exception):
                raise result
    return OK


async def _controller_pods(client: KubeClient, namespace: str) -> list[JSON]:
    selector = f"app in ({','.join(controllers.NAMES)})"
    pods = (await client.list(controllers.POD, namespace=namespace, label_selector=selector)).items
    if not pods:
        raise Failure(
            f"no controller pods in namespace {namespace} (labels {selector}); "
            "pass --flux-namespace if they run elsewhere, or read `sluice dev`'s output "
            "when they run as local processes",
            FAILED,
        )
    return sorted(pods, key=lambda pod: str(pod["metadata"]["name"]))
