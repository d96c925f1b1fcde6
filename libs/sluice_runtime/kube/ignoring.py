"""Drift ignore rules (`driftIgnoreRules`): fields the apply leaves to others.

Flux's semantics: a rule has no effect when an object is created; when it is
updated, the ignored JSON pointers (RFC 6901) are removed from what is
applied. The field manager then drops those fields, so a value another
manager set stays (neither reported as drift nor corrected), while a field
no one else owns is dropped by the API server. A rule without a target
applies to every object; a target's group, version, kind, namespace and name
are anchored regular expressions (kustomize's selector), its label and
annotation selectors are Kubernetes label selectors. Pure.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

_REQUIREMENT = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[^\s!=,()]+)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[^\s,()]*)|\s(?P<set>in|notin)\s*\((?P<values>[^)]*)\))?\s*$"
)


class InvalidSelector(ValueError):
    """A target selector that cannot be parsed; the message names it."""


@dataclass(frozen=True, slots=True)
class Target:
    group: str | None = None
    version: str | None = None
    kind: str | None = None
    namespace: str | None = None
    name: str | None = None
    label_selector: str | None = None
    annotation_selector: str | None = None


@dataclass(frozen=True, slots=True)
class IgnoreRule:
    paths: tuple[str, ...]
    target: Target | None = None


def _split(selector: str) -> list[str]:
    """Requirements, split on commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


def selector_matches(selector: str, values: Mapping[str, str]) -> bool:
    """Does a label selector expression match these labels (or annotations)?"""
    for requirement in _split(selector):
        found = _REQUIREMENT.match(requirement)
        if found is None:
            raise InvalidSelector(f"invalid selector {selector!r}: cannot parse {requirement!r}")
        key = found["key"]
        if found["op"]:
            equal = values.get(key) == found["value"]
            if equal != (found["op"] != "!="):
                return False
        elif found["set"]:
            options = {v.strip() for v in found["values"].split(",")}
            inside = key in values and values[key] in options
            if inside != (found["set"] == "in"):
                return False
        elif (key in values) == bool(found["neg"]):
            return False
    return True


def _full(pattern: str | None, value: str) -> bool:
    return not pattern or re.fullmatch(pattern, value) is not None


def target_matches(target: Target | None, obj: Mapping[str, Any]) -> bool:
    if target is None:
        return True
    api_version = str(obj.get("apiVersion") or "")
    group, _, version = api_version.rpartition("/")
    meta = obj.get("metadata") or {}
    return (
        _full(target.group, group)
        and _full(target.version, version)
        and _full(target.kind, str(obj.get("kind") or ""))
        and _full(target.namespace, str(meta.get("namespace") or ""))
        and _full(target.name, str(meta.get("name") or ""))
        and (
            not target.label_selector
            or selector_matches(target.label_selector, meta.get("labels") or {})
        )
        and (
            not target.annotation_selector
            or selector_matches(target.annotation_selector, meta.get("annotations") or {})
        )
    )


def _tokens(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise InvalidSelector(f"invalid JSON pointer {pointer!r}: it must start with '/'")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _remove(obj: Any, tokens: Sequence[str]) -> None:
    """Remove the value at `tokens`; a path that is not there is nothing to ignore."""
    if not tokens:
        return
    *parents, last = tokens
    node = obj
    for token in parents:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return
    if isinstance(node, dict):
        node.pop(last, None)
    elif isinstance(node, list) and last.isdigit() and int(last) < len(node):
        del node[int(last)]


def validate(rules: Iterable[IgnoreRule]) -> None:
    """Raise InvalidSelector for a pointer or selector that cannot be used."""
    for rule in rules:
        for path in rule.paths:
            _tokens(path)
        if rule.target is not None:
            for selector in (rule.target.label_selector, rule.target.annotation_selector):
                if selector:
                    selector_matches(selector, {})
            for pattern in (
                rule.target.group,
                rule.target.version,
                rule.target.kind,
                rule.target.namespace,
                rule.target.name,
            ):
                if pattern:
                    try:
                        re.compile(pattern)
                    except re.error as error:
                        raise InvalidSelector(f"invalid target {pattern!r}: {error}") from None


def without_ignored(obj: Mapping[str, Any], rules: Iterable[IgnoreRule]) -> dict[str, Any]:
    """A copy of `obj` without the paths of the rules that target it."""
    stripped: dict[str, Any] = copy.deepcopy(dict(obj))
    for rule in rules:
        if target_matches(rule.target, obj):
            for path in rule.paths:
                tokens = _tokens(path)
                # The identity of the object is never ignored: it must still be applied.
                if tokens[:1] in (["apiVersion"], ["kind"]) or tokens[:2] in (
                    ["metadata", "name"],
                    ["metadata", "namespace"],
                ):
                    continue
                _remove(stripped, tokens)
    return stripped


class _SelectorModel(Protocol):
    group: str | None
    version: str | None
    kind: str | None
    namespace: str | None
    name: str | None
    label_selector: str | None
    annotation_selector: str | None


class _RuleModel(Protocol):
    @property
    def paths(self) -> Sequence[str]: ...

    @property
    def target(self) -> _SelectorModel | None: ...


def rules_of(models: Iterable[_RuleModel]) -> list[IgnoreRule]:
    """API ignore rules (a Kustomization's `driftIgnoreRules`, a HelmRelease's
    `driftDetection.ignore`: the same shape) in this module's terms."""
    rules = []
    for model in models:
        target = model.target
        rules.append(
            IgnoreRule(
                paths=tuple(model.paths),
                target=None
                if target is None
                else Target(
                    group=target.group,
                    version=target.version,
                    kind=target.kind,
                    namespace=target.namespace,
                    name=target.name,
                    label_selector=target.label_selector,
                    annotation_selector=target.annotation_selector,
                ),
            )
        )
    return rules
