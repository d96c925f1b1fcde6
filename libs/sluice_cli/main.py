"""`sluice`: the command-line tool (local development environment, CRDs, gates, artifacts).

The verbs are listed here by name and one line of help, and a verb's module
is imported only when argparse picks that verb. Building every verb's parser
up front imported every verb's module and, through them, the API models,
aiohttp and the OCI client: 1.3 s of CPU and 80 MB before `sluice version
--client` printed a line (issue 40). A verb's module keeps its own parser
(arguments, descriptions, examples); this list only has to agree with it on
the line of help, which `_LazyVerbs` checks when it builds the verb.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

Register = Callable[[Any], None]
"""Adds one module's verbs to the top-level sub-parsers (each module's `register`)."""


@dataclass(frozen=True, slots=True)
class Verbs:
    """The top-level verbs one `register` adds, with their help, listed before it runs."""

    summaries: tuple[tuple[str, str], ...]
    register: Register


def _module(name: str) -> Register:
    def register(commands: Any) -> None:
        importlib.import_module(f"sluice_cli.{name}").register(commands)

    return register


def _diff(commands: Any) -> None:
    from sluice_cli import artifact_command, diffing, helmrelease_command

    diffing.register(commands, artifact_command.add_diff, helmrelease_command.add_diff)


def _build(commands: Any) -> None:
    from sluice_cli import building_command, helmrelease_command

    building_command.register(commands, helmrelease_command.add_build)


VERBS = (
    Verbs(
        (("dev", "run Sluice locally (embedded control plane + every controller)"),),
        _module("dev"),
    ),
    Verbs((("crds", "generate or install CRDs"),), _module("crds_command")),
    Verbs((("gate", "open, close or list Gates"),), _module("gate_command")),
    Verbs(
        (
            ("push", "push a directory or file as an OCI artifact"),
            ("pull", "pull an OCI artifact and unpack it"),
            ("tag", "tag an OCI artifact with another tag"),
            ("list", "list an OCI repository's artifacts"),
        ),
        _module("artifact_command"),
    ),
    Verbs((("get", "get the resources and their status"),), _module("getting")),
    Verbs((("reconcile", "reconcile sources and resources"),), _module("reconciling")),
    Verbs(
        (
            ("suspend", "suspend reconciliation of sources and resources"),
            ("resume", "resume reconciliation of sources and resources"),
        ),
        _module("suspending"),
    ),
    Verbs((("events", "display Kubernetes events for Flux resources"),), _module("events_command")),
    Verbs((("logs", "display formatted logs for the controllers"),), _module("logs_command")),
    Verbs((("check", "check requirements and installation"),), _module("checking")),
    Verbs((("version", "print the CLI and server versions"),), _module("version_command")),
    Verbs((("tree", "print the resources reconciled by Flux"),), _module("tree_command")),
    Verbs((("diff", "diff a Flux resource with the cluster"),), _diff),
    Verbs((("build", "build a Kustomization or HelmRelease locally"),), _build),
)
"""Every verb, in the order `sluice --help` lists them."""


if TYPE_CHECKING:
    _SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:  # generic only in typeshed
    _SubParsers = argparse._SubParsersAction


class _LazyVerbs(_SubParsers):
    """Sub-parsers listed by name and help, each built when argparse picks it.

    A listed verb holds a placeholder in the choices (so argparse accepts and
    lists its name) until it is chosen; then its `register` runs and its
    real parser takes the placeholder's place.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: dict[str, tuple[str, Register]] = {}

    def add_lazy(self, verbs: Verbs) -> None:
        for name, summary in verbs.summaries:
            self._choices_actions.append(self._ChoicesPseudoAction(name, (), summary))
            self._name_parser_map[name] = argparse.ArgumentParser(add_help=False)
            self._pending[name] = (summary, verbs.register)

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        pending = self._pending.pop(name, None)
        if pending is not None:
            listed, _ = pending
            # Already listed: a second help line would list the verb twice.
            given = kwargs.pop("help", listed)
            if given != listed:
                raise ValueError(f"sluice {name}: its help {given!r} is listed as {listed!r}")
            del self._name_parser_map[name]
        return super().add_parser(name, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        name = values[0] if isinstance(values, list) and values else None
        if isinstance(name, str) and name in self._pending:
            self._build(name)
        super().__call__(parser, namespace, values, option_string)

    def _build(self, name: str) -> None:
        _, register = self._pending[name]
        order = list(self._name_parser_map)
        register(self)
        if name in self._pending:
            raise RuntimeError(f"sluice {name}: its module did not add it")
        # In the listed order again: an unknown verb's error names the choices.
        parsers = dict(self._name_parser_map)
        self._name_parser_map.clear()
        self._name_parser_map.update({n: parsers[n] for n in order if n in parsers} | parsers)


def main(argv: Sequence[str] | None = None) -> None:
    args = make_parser().parse_args(argv)
    sys.exit(args.run(args))


def make_parser() -> argparse.ArgumentParser:
    """Every verb's parser, without running anything: `main` and the docs' tests share it.

    Each verb's own parser is built (and its module imported) when a parse picks it.
    """
    parser = argparse.ArgumentParser(prog="sluice", description="Sluice GitOps toolkit")
    commands = cast(
        _LazyVerbs,
        parser.add_subparsers(action=_LazyVerbs, dest="command", required=True, metavar="COMMAND"),
    )
    for verbs in VERBS:
        commands.add_lazy(verbs)
    return parser


if __name__ == "__main__":
    main()
