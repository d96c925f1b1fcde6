"""The one list of controllers (sluice_cli.controllers) against what ships them:
pyproject's entry points (the image's commands) and the chart's values and templates."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml

from sluice_cli import controllers

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
VALUES = yaml.safe_load((ROOT / "charts" / "sluice" / "values.yaml").read_text())


def test_every_entry_point_but_the_cli_is_a_listed_controller() -> None:
    assert set(SCRIPTS) - {"sluice"} == set(controllers.NAMES)


@pytest.mark.parametrize("controller", controllers.CONTROLLERS, ids=controllers.NAMES)
def test_a_controller_is_its_entry_point_its_values_and_its_template(
    controller: controllers.Controller,
) -> None:
    assert SCRIPTS[controller.name] == f"{controller.module}.__main__:main"
    assert (ROOT / "services" / controller.name / controller.module / "__main__.py").is_file()
    assert VALUES[controller.values_key]["create"] is controller.default
    assert (ROOT / "charts" / "sluice" / "templates" / f"{controller.name}.yaml").is_file()


def test_the_chart_deploys_no_controller_the_list_lacks() -> None:
    sections = {
        key for key, value in VALUES.items() if isinstance(value, dict) and "create" in value
    }
    # The other sections with `create` are not controllers.
    assert sections - {"networkPolicy", "serviceMonitor", "aggregatedRoles"} == {
        c.values_key for c in controllers.CONTROLLERS
    }
