"""`sluice` answers at once: a verb's module is imported only when that verb runs (issue 40).

Building every verb's parser used to import every verb's module and, through
them, the API models, aiohttp and the OCI client: 1.3 s of CPU and 80 MB
before `sluice version --client` printed its line. Each command below runs
in a fresh interpreter, as a user's shell runs it, and what it imported is
compared with what it must not import (the same check that holds the
controllers' start-up lean, sluice_runtime's test_lean_imports).
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from sluice_cli import main
from sluice_envtest.measuring import Started, run_fresh

from .conftest import Capture

CLIENT = (
    "sluice_api",  # every model, through the package's __init__
    "pydantic",
    "pydantic_core",
    "aiohttp",  # the Kubernetes client's transport
    "sluice_runtime.kube.client",
    "kubernetes_asyncio",
    "oras",  # the OCI client, through the artifact verbs
    "requests",
    "urllib3",
    "sluice_runtime.oci",
    "sluice_envtest",  # `sluice dev`'s control plane
    "structlog",
    "botocore",
    "cryptography",
)
"""What a verb that talks to nothing (`version --client`, any `--help`) never imports."""

VERB_MODULES = tuple(
    f"sluice_cli.{name}"
    for name in (
        "dev", "crds_command", "gate_command", "artifact_command", "artifacts", "getting",
        "reconciling", "suspending", "events_command", "logs_command", "checking",
        "version_command", "tree_command", "diffing", "building_command", "helmrelease_command",
        "helm_builds", "local_builds", "kinds", "terminal", "controllers",
    )
)  # fmt: skip
"""Every module of the verbs: none is needed to list them."""


@pytest.fixture(scope="module")
def started() -> dict[str, Started]:
    """Each command line, run as `python -m sluice_cli ...` in a fresh interpreter."""
    commands = ("version --client", "--help", "get ks -A --help")
    runs = [["-m", "sluice_cli", *command.split()] for command in commands]
    return dict(zip(commands, run_fresh(*runs), strict=True))


def test_version_client_imports_no_client_models_or_other_verbs(
    started: dict[str, Started],
) -> None:
    run = started["version --client"]
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("sluice: v")
    assert "sluice_cli.version_command" in run.modules
    assert run.among(CLIENT) == []
    others = [m for m in VERB_MODULES if m not in ("sluice_cli.version_command", "sluice_cli.controllers", "sluice_cli.terminal")]  # fmt: skip
    assert run.among(others) == []


def test_top_level_help_imports_no_verb(started: dict[str, Started]) -> None:
    run = started["--help"]
    assert run.returncode == 0, run.stderr
    assert "build a Kustomization or HelmRelease locally" in run.stdout
    assert run.among((*CLIENT, *VERB_MODULES, "rich", "yaml", "asyncio")) == []


def test_a_verbs_help_imports_that_verb_alone(started: dict[str, Started]) -> None:
    run = started["get ks -A --help"]
    assert run.returncode == 0, run.stderr
    assert "The get kustomizations command prints the statuses" in " ".join(run.stdout.split())
    assert "sluice_cli.getting" in run.modules
    unused = ("dev", "artifact_command", "artifacts", "diffing", "helm_builds", "checking")
    assert run.among(f"sluice_cli.{name}" for name in unused) == []
    assert run.among(("oras", "sluice_envtest", "sluice_runtime.oci")) == []


@pytest.mark.parametrize(
    "verb", [pytest.param(name, id=name) for verbs in main.VERBS for name, _ in verbs.summaries]
)
def test_every_listed_verb_builds_with_the_help_it_is_listed_with(
    verb: str, capsys: Capture
) -> None:
    """The list in main agrees with each verb's own parser: building one checks its help."""
    with pytest.raises(SystemExit) as exited:
        main.main([verb, "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: sluice {verb} ")


def _parser_with(*verbs: main.Verbs) -> tuple[argparse.ArgumentParser, Any]:
    parser = argparse.ArgumentParser(prog="sluice")
    commands: Any = parser.add_subparsers(action=main._LazyVerbs, dest="command", required=True)
    for listed in verbs:
        commands.add_lazy(listed)
    return parser, commands


def _adds(name: str, help_text: str | None) -> main.Register:
    def register(commands: Any) -> None:
        extra = {} if help_text is None else {"help": help_text}
        commands.add_parser(name, **extra).set_defaults(run=name)

    return register


@pytest.mark.parametrize(
    ("registered", "help_text", "error"),
    [
        pytest.param("hello", "say hello", None, id="same-help"),
        pytest.param("hello", None, None, id="no-help"),
        pytest.param("hello", "greet", "sluice hello: its help 'greet' is listed as 'say hello'", id="other-help"),
        pytest.param("howdy", "say hello", "sluice hello: its module did not add it", id="not-added"),
    ],
)  # fmt: skip
def test_a_lazy_verb_is_built_when_chosen_and_must_match_its_listing(
    registered: str, help_text: str | None, error: str | None
) -> None:
    built: list[str] = []

    def register(commands: Any) -> None:
        built.append(registered)
        _adds(registered, help_text)(commands)

    parser, commands = _parser_with(
        main.Verbs((("hello", "say hello"),), register),
        main.Verbs((("bye", "say goodbye"),), _adds("bye", "say goodbye")),
    )
    assert built == []
    if error is not None:
        with pytest.raises((ValueError, RuntimeError), match=error):
            parser.parse_args(["hello"])
        return
    assert parser.parse_args(["hello"]).run == "hello"
    assert built == ["hello"]
    assert " ".join(parser.format_help().split()).count("hello say hello") == 1
    assert list(commands.choices) == ["hello", "bye"]  # the order an unknown verb's error lists
