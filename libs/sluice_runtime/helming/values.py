"""A HelmRelease's values, composed as Flux composes them, and their digest.

`valuesFrom` (ConfigMap and Secret keys, in order, optional or not, merged
whole or set at a `targetPath`, typed as `helm --set` types it unless
`literal`), then `values` over them, with Helm's
coalescing (`merge_values`). A key's YAML is the tenant's: it is parsed off
the event loop within `yamlloading.VALUES_LIMITS`, which also bound what its
aliases expand to (a 256-byte ConfigMap of nested aliases would otherwise be
gigabytes once merged and handed to helm). The helm-controller composes the
values it releases with `compose`, and `sluice build|diff helmrelease` the
values it previews, so the two never differ.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from sluice_api.helm import HelmReleaseSpec
from sluice_runtime import yamlloading
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import CONFIG_MAP
from sluice_runtime.kube.secrets import SecretError, secret_data


class ValuesError(Exception):
    """The values cannot be composed; the message names the reference and the problem."""


async def compose(client: KubeClient, namespace: str, spec: HelmReleaseSpec) -> dict[str, Any]:
    """`spec.valuesFrom` read from `namespace` with `client`, merged in order, then
    `spec.values` over them. Raises ValuesError."""
    values: dict[str, Any] = {}
    for ref in spec.values_from or []:
        key = ref.values_key or "values.yaml"
        where = f"{ref.kind} '{namespace}/{ref.name}'"
        try:
            if ref.kind == "Secret":
                data = await secret_data(client, namespace, ref.name)
            else:
                data = (await client.get(CONFIG_MAP, ref.name, namespace)).get("data") or {}
        except (NotFound, SecretError):
            if ref.optional:
                continue
            raise ValuesError(f"could not resolve {where}: not found") from None
        if key not in data:
            if ref.optional:
                continue
            raise ValuesError(f"could not resolve {where}: no key '{key}'")
        try:
            if ref.target_path:
                value = data[key] if ref.literal else typed_value(data[key])
                set_path(values, ref.target_path, value)
            else:
                loaded = (
                    await yamlloading.load_off_loop(data[key], limits=yamlloading.VALUES_LIMITS)
                    or {}
                )
                if not isinstance(loaded, dict):
                    raise ValuesError(f"{where} key '{key}' is not a YAML map")
                values = merge_values(values, loaded)
        except yamlloading.YAMLError as error:
            raise ValuesError(f"{where} key '{key}' is not valid YAML: {error}") from None
        except ValuesError as error:
            if str(error).startswith(where):
                raise
            raise ValuesError(f"{where}: {error}") from None
    return merge_values(values, spec.values or {})


def config_digest(values: dict[str, Any]) -> str:
    """Digest of values, independent of key order (Flux: digest of the canonical JSON)."""
    canonical = json.dumps(values, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def merge_values(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's coalescing of values: maps merge recursively, anything else replaces.

    The one rule for a chart's `valuesFiles` (source-controller), a
    generator's `Merge` copies, and a HelmRelease's `valuesFrom` and `values`
    (helm-controller).
    """
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_values(merged[key], value)
        else:
            merged[key] = value
    return merged


_INTEGER = re.compile(r"^[-+]?[0-9]+$")


def typed_value(text: str) -> Any:
    """A `targetPath` value as `helm --set` reads it (Flux merges it the same way):
    `true`/`false` (any case) are booleans, `null` is null, `0` and a 64-bit
    decimal integer not starting with `0` are integers; anything else, floats
    and `007` included, stays a string. `valuesFrom[].literal` skips this, as
    `--set-literal` does."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "null":
        return None
    if text == "0":
        return 0
    if not text.startswith("0") and _INTEGER.match(text):
        number = int(text)
        if -(2**63) <= number < 2**63:
            return number
    return text


MAX_INDEX = 65536
"""The largest list index a targetPath may name, as Helm's strvals allows: the list is
filled with nulls up to it, so `a[100000000]` would allocate 800 MB."""


def set_path(values: dict[str, Any], path: str, value: Any) -> None:
    """Set `value` at a `--set`-style path (`a.b[0].c`, `\\.` escapes a dot)."""
    parts = [p.replace("\\.", ".") for p in re.split(r"(?<!\\)\.", path)]
    node: Any = values
    for i, part in enumerate(parts):
        match = re.fullmatch(r"([^\[\]]*)((?:\[\d+\])*)", part)
        if not match or (not match[1] and not match[2]):
            raise ValuesError(f"invalid targetPath '{path}'")
        keys: list[str | int] = [match[1]] if match[1] else []
        keys += [int(x) for x in re.findall(r"\[(\d+)\]", match[2])]
        for index in keys:
            if isinstance(index, int) and index > MAX_INDEX:
                raise ValuesError(
                    f"targetPath '{path}': index of {index} is greater than "
                    f"maximum supported index {MAX_INDEX}"
                )
        for j, key in enumerate(keys):
            last = i == len(parts) - 1 and j == len(keys) - 1
            nxt: Any = value if last else ({} if j == len(keys) - 1 else [])
            if isinstance(key, int):
                if not isinstance(node, list):
                    raise ValuesError(f"targetPath '{path}': not a list at [{key}]")
                while len(node) <= key:
                    node.append(None)
                if last or node[key] is None:
                    node[key] = nxt
                node = node[key]
            else:
                if not isinstance(node, dict):
                    raise ValuesError(f"targetPath '{path}': not a map at '{key}'")
                if last or not isinstance(node.get(key), dict | list):
                    node[key] = nxt
                node = node[key]
