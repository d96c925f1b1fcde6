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
from dataclasses import dataclass
from typing import Any

import yaml

from sluice_api.kustomize import SUBSTITUTE_ANNOTATION, PostBuild, SubstituteReference
from sluice_runtime.building import load_yaml, yaml_problem
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import CONFIG_MAP, SECRET
from sluice_runtime.kube.secrets import SecretError, secret_data
from sluice_runtime.patterns import InvalidPattern, Pattern, compile_pattern

VARIABLE_NAME = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")
"""What a variable name must be (Flux's rule), matched against the whole name."""

DISABLED = "disabled"


class SubstitutionError(Exception):
    """Substitution failed; the message names the object or variable, for a condition."""


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
    for obj in objects:
        if _disabled(obj):
            result.append(obj)
            continue
        text = _dump(obj)
        if "$" not in text:
            result.append(obj)
            continue
        try:
            expanded = expand(text, variables)
        except SubstitutionError as error:
            raise SubstitutionError(
                f"variable substitution failed for {_describe(obj)}: {error}"
            ) from None
        if expanded == text:
            result.append(obj)
            continue
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
        result.append(substituted)
    return result


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


def _dump(obj: Mapping[str, Any]) -> str:
    # No line folding: a long line stays one line, as in Go's YAML output.
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1 << 30)


# -- the expression language --------------------------------------------------


class _Malformed(Exception):
    def __init__(self, reason: str, at: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.at = at


def expand(text: str, variables: Mapping[str, str]) -> str:
    """`text` with every `${...}` expression expanded (undefined variables are empty).

    Raises SubstitutionError quoting the malformed expression.
    """
    expander = _Expander(text, variables)
    try:
        return expander.text()
    except _Malformed as error:
        start = text.rfind("${", 0, error.at + 1)
        start = start if start >= 0 else error.at
        line_end = text.find("\n", start)
        snippet = text[start : line_end if line_end >= 0 else len(text)]
        if len(snippet) > 60:
            snippet = snippet[:60] + "…"
        raise SubstitutionError(f"{error.reason} in '{snippet}'") from None


@dataclass
class _Expander:
    """A recursive-descent reading of Flux's envsubst grammar, evaluated as it goes."""

    source: str
    variables: Mapping[str, str]
    pos: int = 0

    def peek(self, offset: int = 0) -> str:
        index = self.pos + offset
        return self.source[index] if index < len(self.source) else ""

    def text(self) -> str:
        out: list[str] = []
        while self.pos < len(self.source):
            char = self.source[self.pos]
            if char == "$" and self.peek(1) == "{":
                self.pos += 2
                out.append(self.expression())
            elif char == "$" and self.peek(1) == "$":
                out.append("$")  # `$$` is the escape for a literal `$`
                self.pos += 2
            else:
                out.append(char)
                self.pos += 1
        return "".join(out)

    def expression(self) -> str:
        """After `${`: one expression up to and including its `}`."""
        if self.peek() == "#":
            self.pos += 1
            name = self.name()
            if not name:
                raise _Malformed("bad substitution", self.pos)
            self.close()
            return str(len(self.value(name).encode()))  # bytes, as Go's len()
        name = self.name()
        if not name:
            raise _Malformed("unable to parse variable name", self.pos)
        value = self.value(name)
        char = self.peek()
        if char == "}":
            self.pos += 1
            return value
        if char == ":" and self.peek(1) in ("=", "-", "?", "+"):
            self.pos += 2
            return self.default(value)
        if char == "=":
            self.pos += 1
            return self.default(value)
        if char == ":":
            self.pos += 1
            return self.substring(value)
        if char in (",", "^"):
            return self.casing(value)
        if char == "/":
            return self.replace(value)
        if char in ("#", "%"):
            return self.trim(value, char)
        raise _Malformed("missing closing brace", self.pos)

    def name(self) -> str:
        start = self.pos
        while self.pos < len(self.source) and (
            self.source[self.pos].isalnum() or self.source[self.pos] == "_"
        ):
            self.pos += 1
        return self.source[start : self.pos]

    def value(self, name: str) -> str:
        return self.variables.get(name, "")

    def close(self) -> None:
        if self.peek() != "}":
            raise _Malformed("bad substitution", self.pos)
        self.pos += 1

    def param(self, stop: str, *, escapes: bool = False) -> str:
        """A nested expression, or literal text up to `${` or a character in `stop`."""
        if self.peek() == "$" and self.peek(1) == "{":
            self.pos += 2
            return self.expression()
        out: list[str] = []
        while self.pos < len(self.source):
            char = self.source[self.pos]
            if char == "$" and self.peek(1) == "{":
                break
            if escapes and (
                (char == "\\" and self.peek(1) in ("/", "\\"))
                or (char == "$" and self.peek(1) == "$")
            ):
                out.append(self.source[self.pos + 1])
                self.pos += 2
                continue
            if char in stop:
                break
            out.append(char)
            self.pos += 1
        if not out:
            raise _Malformed("unable to parse substitution within function", self.pos)
        return "".join(out)

    def default(self, value: str) -> str:
        """`${var:=word}` and friends: word (text and nested expressions) when value is empty."""
        parts: list[str] = []
        while self.peek() != "}":
            parts.append(self.param("}"))
        self.pos += 1
        return value if value else "".join(parts)

    def substring(self, value: str) -> str:
        """`${var:offset}` and `${var:offset:length}`; bash returns value on bad numbers."""
        offset = self.param(":}")
        length: str | None = None
        if self.peek() == ":":
            while self.peek() == ":":
                self.pos += 1
            length = self.param("}")
            self.close()
        else:
            self.close()
        return _substring(value, offset, length)

    def casing(self, value: str) -> str:
        op = self.source[self.pos : self.pos + 2]
        op = op if op in (",,", "^^", ",^", "^,") else op[0]
        self.pos += len(op)
        self.close()
        if op == "^":
            return value[:1].upper() + value[1:]
        if op == "^^":
            return value.upper()
        if op == ",":
            return value[:1].lower() + value[1:]
        if op == ",,":
            return value.lower()
        return value

    def trim(self, value: str, mark: str) -> str:
        op = mark * 2 if self.peek(1) == mark else mark
        self.pos += len(op)
        pattern = self.param("}")
        self.close()
        return _trim(value, pattern, prefix=mark == "#", longest=len(op) == 2)

    def replace(self, value: str) -> str:
        op = "/" + self.peek(1) if self.peek(1) in ("/", "#", "%") else "/"
        self.pos += len(op)
        old = "" if self.peek() == "/" else self.param("/", escapes=True)
        if self.peek() != "/":
            raise _Malformed("bad substitution", self.pos)
        while self.peek() == "/":
            self.pos += 1
        new: str | None = None
        if self.peek() != "}":
            new = self.param("}", escapes=True)
        self.close()
        return _replace(value, op, old, new)


def _substring(value: str, offset: str, length: str | None) -> str:
    # Characters rather than Go's bytes: the same for ASCII, and never splits a character.
    if not re.fullmatch(r"[-+]?\d+", offset):
        return value
    start = int(offset)
    if start < 0:
        start = max(len(value) + start, 0)
    if length is None:
        return value[start:]
    if not re.fullmatch(r"[-+]?\d+", length):
        return value
    count = int(length)
    if count < 0:
        end = len(value) + count
        return value[start:end] if end >= start else ""
    return value[start : start + count]


def _replace(value: str, op: str, old: str, new: str | None) -> str:
    if op == "//":
        return value.replace(old, new or "")
    if op == "/":
        return value.replace(old, new or "", 1)
    if new is None:
        return value  # prefix and suffix replacement need both parts, as in Flux
    if op == "/#":
        return new + value[len(old) :] if value.startswith(old) else value
    return value[: len(value) - len(old)] + new if value.endswith(old) else value


def _trim(value: str, pattern: str, *, prefix: bool, longest: bool) -> str:
    matcher = _glob(pattern)
    if matcher is None:
        return value  # a malformed pattern leaves the value alone, as in Flux
    lengths = range(len(value), 0, -1) if longest else range(1, len(value) + 1)
    for size in lengths:
        part = value[:size] if prefix else value[len(value) - size :]
        if matcher.fullmatch(part):
            return value[size:] if prefix else value[: len(value) - size]
    return value


def _glob(pattern: str) -> Pattern | None:
    """Go's path.Match patterns: `*` and `?` never match `/`, `[...]` classes, `\\` escapes.

    The pattern comes from a tenant's manifest and `_trim` tries it against
    every prefix or suffix of the value: it runs on RE2, since `*a*a*a*b`
    translated for a backtracking engine takes polynomial time per try.
    """
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "\\":
            i += 1
            if i >= len(pattern):
                return None
            out.append(re.escape(pattern[i]))
        elif char == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("^", "]") else i + 1)
            if end < 0:
                return None
            body = pattern[i + 1 : end]
            negate = body.startswith("^")
            body = body[1:] if negate else body
            if not body:
                return None
            items = [re.escape(c) if c != "-" else "-" for c in body]
            out.append("[" + ("^" if negate else "") + "".join(items) + "]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    try:
        return compile_pattern("".join(out), what="a ${var#glob} or ${var%glob} pattern")
    except InvalidPattern:
        return None


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
