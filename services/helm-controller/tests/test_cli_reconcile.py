"""`sluice reconcile helmrelease --with-source` against the real source- and
helm-controller: the HelmRepository, then the HelmChart, then the release, so
a new chart version is installed by the one command, as with Flux."""

from __future__ import annotations

import asyncio

import pytest

from sluice_cli.main import main

from .conftest import HELMRELEASE, HelmDelivery


def run_main(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exited:  # main() exits with the verb's code
        return int(exited.code or 0)
    return 0


async def sluice(*argv: str) -> int:
    # The verb runs its own event loop, so it gets a thread of its own.
    return await asyncio.to_thread(run_main, list(argv))


def cli_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The command's result lines (✔/✗), without the in-process controllers' logs."""
    out, _ = capsys.readouterr()
    return [line for line in out.splitlines() if line.startswith(("✔", "✗"))]


async def test_reconcile_with_source_pulls_the_new_chart_version_first(
    helm_delivery: HelmDelivery, capsys: pytest.CaptureFixture[str]
) -> None:
    d = helm_delivery
    ns = d.namespace
    d.charts.add("app", "1.0.0")
    await d.helm_repository()
    await d.helm_release("web", version="1.x")
    await d.observe.wait_ready(HELMRELEASE, "web", timeout=60)
    capsys.readouterr()

    d.charts.add("app", "1.1.0")
    flags = ("-n", ns, "--kubeconfig", d.kubeconfig, "--timeout", "60s")
    assert await sluice("reconcile", "hr", "web", "--with-source", *flags) == 0
    lines = cli_lines(capsys)
    assert lines[0].startswith(f"✔ HelmRepository {ns}/charts: fetched revision sha256:")
    assert lines[1:] == [
        f"✔ HelmChart {ns}/{ns}-web: fetched revision 1.1.0",
        f"✔ HelmRelease {ns}/web: applied revision 1.1.0",
    ]
    obj = await d.kube.get(HELMRELEASE, "web", ns)
    assert obj["status"]["history"][0]["chartVersion"] == "1.1.0"
