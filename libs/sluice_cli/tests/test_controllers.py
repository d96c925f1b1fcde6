"""The one list of controllers (sluice_cli.controllers) against what ships them:
pyproject's entry points (the image's commands) and the chart's values and templates."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest
import yaml

from sluice_cli import controllers
from sluice_runtime import app

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


@pytest.mark.parametrize("controller", controllers.CONTROLLERS, ids=controllers.NAMES)
def test_a_controllers_open_tenancy_flags_are_those_its_binary_takes(
    controller: controllers.Controller,
) -> None:
    main = importlib.import_module(f"{controller.module}.__main__")
    parser = app.parser(service=controller.name, description="test", concurrency=1)
    add_arguments = getattr(main, "add_arguments", None)
    if add_arguments is not None:
        add_arguments(parser)
    assert list(controller.open_tenancy) == app.open_tenancy(parser)
    # Locked down unless opened: a binary started with no flags refuses both.
    defaults = vars(parser.parse_args([]))
    assert defaults.get("no_cross_namespace_refs", True) is True
    assert defaults.get("default_service_account", "default") == "default"
