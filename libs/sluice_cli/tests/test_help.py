"""`sluice --help` and every everyday verb's help read like the flux CLI's."""

from __future__ import annotations

import pytest

from sluice_cli.main import main

from .conftest import Capture

VERBS = {
    "get": "get the resources and their status",
    "reconcile": "reconcile sources and resources",
    "suspend": "suspend reconciliation of sources and resources",
    "resume": "resume reconciliation of sources and resources",
    "events": "display Kubernetes events for Flux resources",
    "logs": "display formatted logs for the controllers",
    "check": "check requirements and installation",
    "version": "print the CLI and server versions",
    "tree": "print the resources reconciled by Flux",
    "diff": "diff a Flux resource with the cluster",
    "build": "build a Kustomization or HelmRelease locally",
}


def help_of(argv: list[str], capsys: Capture) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_top_level_help_lists_every_verb(capsys: Capture) -> None:
    text = " ".join(help_of([], capsys).split())
    for verb, summary in VERBS.items():
        assert f"{verb} {summary}" in text


@pytest.mark.parametrize(
    ("argv", "synopsis"),
    [
        pytest.param(["get", "kustomizations"], "The get kustomizations command prints the statuses of the Kustomization resources.", id="get-ks"),
        pytest.param(["get", "sources", "git"], "The get sources git command prints the statuses of the GitRepository resources.", id="get-sources-git"),
        pytest.param(["get", "all"], "The get all command prints the statuses of the Flux resources.", id="get-all"),
        pytest.param(["reconcile", "kustomization"], "The reconcile kustomization command triggers a reconciliation of a Kustomization resource and waits for it to finish.", id="reconcile-ks"),
        pytest.param(["reconcile", "source", "oci"], "The reconcile source oci command triggers a reconciliation of an OCIRepository resource and waits for it to finish.", id="reconcile-oci"),
        pytest.param(["suspend", "hr"], "The suspend helmrelease command disables the reconciliation of a HelmRelease resource.", id="suspend-hr"),
        pytest.param(["resume", "ks"], "The resume kustomization command marks a previously suspended Kustomization resource for reconciliation and waits for it to finish.", id="resume-ks"),
        pytest.param(["events"], "The events sub-command shows Kubernetes events from Flux resources.", id="events"),
        pytest.param(["logs"], "The logs command displays formatted logs from the Sluice controllers.", id="logs"),
        pytest.param(["tree", "ks"], "The tree kustomization command prints the resources reconciled by a Kustomization, following the Kustomizations it applied.", id="tree"),
        pytest.param(["diff", "ks"], "The diff kustomization command builds a Kustomization from a local directory, as the kustomize-controller would, and compares it with the cluster by a server-side dry-run. Secret values are masked.", id="diff"),
        pytest.param(["build", "ks"], "The build kustomization command builds a Kustomization resource from a local directory, as the kustomize-controller would:", id="build"),
        pytest.param(["build", "hr"], "The build helmrelease command renders a HelmRelease's chart as the helm-controller would install it:", id="build-helmrelease"),
        pytest.param(["diff", "hr"], "The diff helmrelease command renders a HelmRelease's chart as the helm-controller would and compares it with the cluster by a server-side dry-run;", id="diff-helmrelease"),
        pytest.param(["check"], "The check command checks the prerequisites and the installation of Sluice.", id="check"),
        pytest.param(["version"], "The version command prints the CLI and server versions.", id="version"),
    ],
)  # fmt: skip
def test_sub_command_help_opens_with_flux_synopsis_and_examples(
    argv: list[str], synopsis: str, capsys: Capture
) -> None:
    text = help_of(argv, capsys)
    assert synopsis in " ".join(text.split())
    if argv[0] in ("events", "logs", "tree", "diff", "build", "check", "version"):
        assert "examples:" in text
        assert "  sluice " in text


def test_usage_errors_exit_2(capsys: Capture) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["reconcile", "ks"])
    assert exited.value.code == 2
    assert "the following arguments are required: name" in capsys.readouterr().err
