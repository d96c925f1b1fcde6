"""The values step: `valuesFrom` (ConfigMap/Secret keys, optional, targetPath,
literal) merged in order, then `values` over them; their digest is the config
digest."""

from __future__ import annotations

from typing import Any

import yaml

from helm_controller import releases
from helm_controller.contexts import HelmReleaseContext
from sluice_api.helm import HelmReleaseReason
from sluice_runtime.helming import merge_values
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import CONFIG_MAP
from sluice_runtime.kube.secrets import SecretError, secret_data
from sluice_runtime.reconciling.errors import StepError
from sluice_runtime.reconciling.steps import Result, step

Reason = HelmReleaseReason


@step()
async def reconcile_values(ctx: HelmReleaseContext) -> Result | None:
    spec = ctx.obj.spec
    values: dict[str, Any] = {}
    for ref in spec.values_from or []:
        key = ref.values_key or "values.yaml"
        where = f"{ref.kind} '{ctx.obj.namespace}/{ref.name}'"
        try:
            if ref.kind == "Secret":
                data = await secret_data(ctx.client, ctx.obj.namespace, ref.name)
            else:
                data = (await ctx.client.get(CONFIG_MAP, ref.name, ctx.obj.namespace)).get(
                    "data"
                ) or {}
        except (NotFound, SecretError):
            if ref.optional:
                continue
            raise _values_error(f"could not resolve {where}: not found") from None
        if key not in data:
            if ref.optional:
                continue
            raise _values_error(f"could not resolve {where}: no key '{key}'")
        try:
            if ref.target_path:
                value = data[key] if ref.literal else releases.typed_value(data[key])
                releases.set_path(values, ref.target_path, value)
            else:
                loaded = yaml.safe_load(data[key]) or {}
                if not isinstance(loaded, dict):
                    raise _values_error(f"{where} key '{key}' is not a YAML map")
                values = merge_values(values, loaded)
        except yaml.YAMLError as error:
            raise _values_error(f"{where} key '{key}' is not valid YAML: {error}") from None
        except releases.ValuesError as error:
            raise _values_error(f"{where}: {error}") from None
    ctx.values = merge_values(values, spec.values or {})
    ctx.config_digest = releases.config_digest(ctx.values)
    return None


def _values_error(message: str) -> StepError:
    return StepError(Reason.INIT_FAILED, message)
