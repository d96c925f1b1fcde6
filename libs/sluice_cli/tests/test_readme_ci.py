"""The README's "CI: publish artifacts" example runs as written: every `sluice`
line of its script parses with the command's own parser, the script uses all
five artifact verbs, and its cluster manifests are valid objects of the API."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from sluice_api import Receiver, ResourceSet, ResourceSetInputProvider
from sluice_cli.main import make_parser

README = Path(__file__).resolve().parents[3] / "README.md"


def section() -> str:
    text = README.read_text()
    start = text.index("## CI: publish artifacts")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section(), flags=re.S)


def sluice_lines() -> list[list[str]]:
    """Each `sluice ...` command of the script, continuation lines joined, as argv."""
    (script,) = blocks("sh")
    commands = []
    for line in script.replace("\\\n", " ").splitlines():
        if "sluice " not in line:
            continue
        command = line[line.index("sluice ") :].split(";")[0]
        expanded = os.path.expandvars(command.replace("$REPO", "oci://ghcr.io/acme/mono-repo"))
        commands.append(shlex.split(expanded)[1:])
    return commands


def test_the_script_uses_every_artifact_verb() -> None:
    used = {tuple(argv[:2]) for argv in sluice_lines()}
    assert used == {
        ("diff", "artifact"),
        ("push", "artifact"),
        ("tag", "artifact"),
        ("list", "artifacts"),
        ("pull", "artifact"),
    }


@pytest.mark.parametrize("argv", [pytest.param(a, id=" ".join(a[:2])) for a in sluice_lines()])
def test_each_sluice_line_parses(argv: list[str]) -> None:
    args = make_parser().parse_args(argv)
    assert args.url.startswith("oci://ghcr.io/acme/mono-repo")
    assert callable(args.run)


def test_the_cluster_manifests_are_valid_objects() -> None:
    (manifests,) = blocks("yaml")
    models: dict[str, Any] = {
        m.__name__: m for m in (ResourceSetInputProvider, Receiver, ResourceSet)
    }
    docs = [doc for doc in yaml.safe_load_all(manifests) if doc]
    assert [doc["kind"] for doc in docs] == list(models)
    provider, receiver, resourceset = (models[d["kind"]].model_validate(d) for d in docs)
    assert provider.spec.type == "OCIArtifactTag"
    assert provider.spec.url == "oci://ghcr.io/acme/mono-repo"
    assert receiver.spec.type == "generic-hmac"
    assert [r.name for r in receiver.spec.resources] == [provider.metadata.name]
    assert [r.name for r in resourceset.spec.inputs_from] == [provider.metadata.name]
