"""postBuild variable substitution: `${var}` expressions in the built manifests, as Flux does it.

Flux writes each built object out as YAML, expands the expressions in that
text with its fork of drone/envsubst, and parses the result back. Sluice
does the same, with the same consequences:

- Values are inserted verbatim into the YAML text. `replicas: ${REPLICAS}`
  with `REPLICAS=3` becomes the number 3 and `enabled: ${ON}` with `ON=true`
  a boolean. A value containing `: `, ` #` or a quote can change what the
  line means, or make it invalid (a SubstitutionError).
- Quotes in the source manifest do not survive: kustomize's output is
  re-serialized before substitution, so `port: "${PORT}"` is written as
  `port: ${PORT}` and a numeric value becomes a number. A number or boolean
  stays a string only when the value carries YAML quotes itself
  (`PORT: "'8080'"`). Multi-line strings (scripts, config files in
  ConfigMaps) are written as literal blocks, where any single-line value
  is inserted safely.
- `$var` without braces is left alone; `$$` is written as `$`, so `$${var}`
  yields the literal `${var}` (and `pa$$word` yields `pa$word`).
- Undefined variables expand to the empty string; `${var:=default}`,
  `${var:-default}` and `${var=default}` use the default when the value is
  empty or undefined, and defaults may nest (`${a:=${b}}`). Flux's bash-like
  functions work too: `${#var}`, `${var^}`, `${var^^}`, `${var,}`, `${var,,}`,
  `${var:offset}`, `${var:offset:length}`, `${var#glob}`, `${var##glob}`,
  `${var%glob}`, `${var%%glob}`, `${var/old/new}`, `${var//old/new}`,
  `${var/#old/new}`, `${var/%old/new}`.
- With no variables at all nothing is substituted, not even defaults.
- Objects labelled or annotated `kustomize.toolkit.fluxcd.io/substitute:
  disabled` are left untouched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from sluice_api.kustomize import SUBSTITUTE_ANNOTATION, PostBuild, SubstituteReference
from sluice_runtime.building import load_yaml, yaml_problem
from sluice_runtime.envsubst import SubstitutionError, expand
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import CONFIG_MAP, SECRET
from sluice_runtime.kube.secrets import SecretError, secret_data

__all__ = [
    "DISABLED",
    "VARIABLE_NAME",
    "SubstitutionError",
    "collect",
    "expand",
    "post_build_enabled",
    "substitute",
    "validate_names",
]

VARIABLE_NAME = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")
"""What a variable name must be (Flux's rule), matched against the whole name."""

DISABLED = "disabled"


def post_build_enabled(post_build: PostBuild | None) -> bool:
    """Whether substitution runs at all: the spec declares a variable source, or
    (substituteStrategy `Always`) asks for it regardless."""
    if post_build is None:
        return False
    if post_build.substitute_strategy == "Always":
        return True
    return bool(post_build.substitute or post_build.substitute_from)


def validate_names(variables: Mapping[str, str]) -> None:
    """Raise SubstitutionError naming every variable whose name Flux would refuse."""
    invalid = sorted(name for name in variables if not VARIABLE_NAME.fullmatch(name))
    if not invalid:
        return
    rule = "names start with a letter or '_' and contain only letters, digits and '_'"
    if len(invalid) == 1:
        raise SubstitutionError(f"variable name '{invalid[0]}' is not valid: {rule}")
    names = ", ".join(f"'{name}'" for name in invalid)
    raise SubstitutionError(f"variable names {names} are not valid: {rule}")


def substitute(
    objects: list[dict[str, Any]], variables: Mapping[str, str], *, always: bool = False
) -> list[dict[str, Any]]:
    """The objects with `${...}` expanded; see the module docstring for the rules.

    Without variables nothing is expanded, unless `always` (substituteStrategy
    `Always`), which still applies defaults and escapes.

    Returns new objects for those that changed and the same dicts otherwise.
    Raises SubstitutionError naming the object on a malformed expression or
    when the result is not a valid YAML mapping.
    """
    validate_names(variables)
    if not variables and not always:
        return list(objects)
    result: list[dict[str, Any]] = []
    memo: dict[tuple[str, bool], Any] = {}
    for obj in objects:
        if _disabled(obj):
            result.append(obj)
            continue
        try:
            result.append(_substitute_in_place(obj, variables, memo))
        except _NeedsText:
            result.append(_substitute_text(obj, variables))
    return result


def _substitute_text(obj: dict[str, Any], variables: Mapping[str, str]) -> dict[str, Any]:
    """Flux's way: the object written as YAML, expanded as text, read back."""
    text = _dump(obj)
    if "$" not in text:
        return obj
    try:
        expanded = expand(text, variables)
    except SubstitutionError as error:
        raise SubstitutionError(
            f"variable substitution failed for {_describe(obj)}: {error}"
        ) from None
    if expanded == text:
        return obj
    try:
        substituted = load_yaml(expanded)
    except yaml.YAMLError as error:
        raise SubstitutionError(
            f"variable substitution failed for {_describe(obj)}: "
            f"the result is not valid YAML: {yaml_problem(error)}"
        ) from None
    if not isinstance(substituted, dict):
        raise SubstitutionError(
            f"variable substitution failed for {_describe(obj)}: "
            "the result is not a Kubernetes object"
        )
    return substituted


# -- the same result without writing the whole object -------------------------
#
# Writing, expanding and reading back every object costs about half a
# millisecond of CPU each (2.6 s for the 5,000 ConfigMaps of e2e.bench scale).
# Where every `$` is a plain `${name}` and every value inserted is "tame" (no
# space, quote, bracket, `#`, `&`, `*`, `!`, `|`, `>`, `%`, `@`, backslash or
# trailing colon), what an expansion does stays inside the line of its own
# scalar: the result is what writing that one scalar alone, in the same
# position (a mapping's value or a list's item), expanding and reading it back
# gives. That is computed once per distinct string and put in place; anything
# else takes the text path, which also words every error.

_SIMPLE = re.compile(r"\$\{([_a-zA-Z][_a-zA-Z0-9]*)\}")
_TAME = re.compile(r"(?:[A-Za-z0-9_.+~/=,][A-Za-z0-9_.+~/=,-]*(?::[A-Za-z0-9_.+~/=,-]+)*)?")


class _NeedsText(Exception):
    """The object must be substituted as text."""


def _substitute_in_place(
    value: Any, variables: Mapping[str, str], memo: dict[tuple[str, bool], Any], item: bool = False
) -> Any:
    """`value` with its strings expanded (the same object when nothing changed)."""
    if isinstance(value, str):
        return _scalar(value, variables, memo, item) if "$" in value else value
    if isinstance(value, dict):
        changed: dict[Any, Any] = {}
        for key, child in value.items():
            if isinstance(key, str) and "$" in key:
                raise _NeedsText
            new = _substitute_in_place(child, variables, memo)
            if new is not child:
                changed[key] = new
        return {k: changed.get(k, v) for k, v in value.items()} if changed else value
    if isinstance(value, list):
        items = [_substitute_in_place(child, variables, memo, True) for child in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value


def _scalar(
    text: str, variables: Mapping[str, str], memo: dict[tuple[str, bool], Any], item: bool
) -> Any:
    if (text, item) in memo:
        return memo[(text, item)]
    names = _SIMPLE.findall(text)
    if text.count("$") != len(names) or not all(
        _TAME.fullmatch(variables.get(name, "")) for name in names
    ):
        raise _NeedsText
    alone: Any = [text] if item else {"k": text}
    try:
        back = load_yaml(expand(_dump(alone), variables))
    except (SubstitutionError, yaml.YAMLError):
        raise _NeedsText from None
    if item and isinstance(back, list) and len(back) == 1:
        value = back[0]
    elif not item and isinstance(back, dict) and list(back) == ["k"]:
        value = back["k"]
    else:
        raise _NeedsText
    if isinstance(value, (dict, list)):
        raise _NeedsText
    memo[(text, item)] = value
    return value


def _disabled(obj: Mapping[str, Any]) -> bool:
    meta = obj.get("metadata") or {}
    return DISABLED in (
        (meta.get("labels") or {}).get(SUBSTITUTE_ANNOTATION),
        (meta.get("annotations") or {}).get(SUBSTITUTE_ANNOTATION),
    )


def _describe(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    kind, name, namespace = obj.get("kind", "object"), meta.get("name", ""), meta.get("namespace")
    return f"{kind} '{namespace}/{name}'" if namespace else f"{kind} '{name}'"


# -- writing objects as YAML text ---------------------------------------------

try:
    from yaml import CSafeDumper as _BaseDumper
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml import SafeDumper as _BaseDumper  # type: ignore[assignment]


class _Dumper(_BaseDumper):
    """Writes multi-line strings as literal blocks, where values go in verbatim."""


def _represent_str(dumper: yaml.representer.SafeRepresenter, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar(
        "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None
    )


_Dumper.add_representer(str, _represent_str)


def _dump(obj: Mapping[str, Any] | list[Any]) -> str:
    # No line folding: a long line stays one line, as in Go's YAML output.
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1 << 30)


# -- collecting the variables -------------------------------------------------


async def collect(client: KubeClient, namespace: str, post_build: PostBuild) -> dict[str, str]:
    """The variables of `post_build`: substituteFrom in order, then substitute on top.

    Later sources override earlier ones; Secret values are decoded. Newlines
    are removed from every value, as Flux does, so a value never breaks the
    line it lands on. A missing source is skipped when optional and a
    SubstitutionError otherwise; other API errors propagate.
    """
    variables: dict[str, str] = {}
    for reference in post_build.substitute_from or []:
        data = await _source(client, namespace, reference)
        if data is not None:
            variables.update({key: value.replace("\n", "") for key, value in data.items()})
    for key, value in (post_build.substitute or {}).items():
        variables[key] = value.replace("\n", "")
    return variables


async def _source(
    client: KubeClient, namespace: str, reference: SubstituteReference
) -> dict[str, str] | None:
    what = f"{reference.kind} '{namespace}/{reference.name}'"
    if reference.kind == "ConfigMap":
        try:
            config_map = await client.get(CONFIG_MAP, reference.name, namespace)
        except NotFound:
            _require_optional(reference, what)
            return None
        data = config_map.get("data") or {}
        return {str(key): str(value) for key, value in data.items()}
    try:
        return await secret_data(client, namespace, reference.name)
    except SecretError as error:
        try:
            await client.get(SECRET, reference.name, namespace)
        except NotFound:
            _require_optional(reference, what)
            return None
        raise SubstitutionError(f"postBuild.substituteFrom {what}: {error}") from None


def _require_optional(reference: SubstituteReference, what: str) -> None:
    if not reference.optional:
        raise SubstitutionError(f"postBuild.substituteFrom {what} not found")
