"""Receiver CEL filters: `spec.resourceFilter` and `spec.resources[].filter`.

Flux's semantics: when a webhook is accepted, each resource the Receiver
names (each object a wildcard lists) is annotated only if the filters say
so. An expression reads the object as `res` and the request body, parsed as
JSON, as `req`; `resourceFilter` applies to every resource and a resource's
own `filter` is ANDed with it. An expression that does not compile is the
spec's fault (the Receiver stalls naming it, before it gets a path); one
that cannot be evaluated for a request, or gives something other than a
bool, fails that resource's action naming the expression, never quietly
annotating it. Pure: compiled once per request's Receiver, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice_api.notification import Receiver

if TYPE_CHECKING:
    # celpy (with lark and pendulum) costs ~7 MiB resident once imported; only a
    # Receiver with filters needs it, so each function imports it on first use.
    import celpy


class InvalidFilter(ValueError):
    """A filter that does not compile; the message names its field."""


class FilterFailed(ValueError):
    """A filter that cannot decide for this object and request; the message names it."""


@dataclass(frozen=True, slots=True)
class _Compiled:
    field: str
    source: str
    program: celpy.Runner


def _compile(env: celpy.Environment, field: str, source: str) -> _Compiled:
    from celpy.celparser import CELParseError

    try:
        return _Compiled(field, source, env.program(env.compile(source)))
    except CELParseError as error:
        first = str(error).splitlines()[0] if str(error) else "syntax error"
        raise InvalidFilter(f"{field}: invalid CEL expression {source!r}: {first}") from None


@dataclass(frozen=True, slots=True)
class Filters:
    """The compiled filters of one Receiver: the shared one and one per resource."""

    shared: _Compiled | None
    per_resource: tuple[_Compiled | None, ...]

    def __bool__(self) -> bool:
        return self.shared is not None or any(f is not None for f in self.per_resource)

    def allows(self, index: int, res: Mapping[str, Any], req: Any) -> bool:
        """Whether resource `index` of the Receiver may be acted on for object `res`
        and request body `req`; raises FilterFailed naming the expression."""
        from celpy import celtypes
        from celpy.adapter import json_to_cel
        from celpy.evaluation import CELEvalError

        try:
            activation = {"res": json_to_cel(dict(res)), "req": json_to_cel(req)}
        except ValueError as error:  # an integer past 64 bits, which CEL cannot hold
            raise FilterFailed(f"the request body cannot be read by CEL: {error}") from None
        for compiled in (self.shared, self.per_resource[index]):
            if compiled is None:
                continue
            try:
                value = compiled.program.evaluate(activation)
            except (CELEvalError, TypeError, ValueError, LookupError, ArithmeticError) as error:
                # celpy raises Python's own errors for some programs over the wrong
                # types (`2.5.map(x, x)`): as much "cannot be evaluated" as its own.
                reason = str(error.args[0]) if error.args else str(error)
                raise FilterFailed(
                    f"{compiled.field} {compiled.source!r} cannot be evaluated: {reason[:200]}"
                ) from None
            if not isinstance(value, celtypes.BoolType):
                raise FilterFailed(
                    f"{compiled.field} {compiled.source!r} gave {type(value).__name__}, not a bool"
                )
            if not value:
                return False
        return True


def compile_filters(receiver: Receiver) -> Filters:
    """The Receiver's filters; raises InvalidFilter naming the field of a bad one."""
    import celpy

    env = celpy.Environment()
    spec = receiver.spec
    shared = (
        _compile(env, "spec.resourceFilter", spec.resource_filter) if spec.resource_filter else None
    )
    per_resource = tuple(
        _compile(env, f"spec.resources[{i}].filter", r.filter) if r.filter else None
        for i, r in enumerate(spec.resources)
    )
    return Filters(shared, per_resource)


def request_of(body: bytes) -> Any:
    """The request body as the filters' `req`; raises FilterFailed when it is not JSON."""
    try:
        return json.loads(body or b"{}")
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise FilterFailed(
            "the request body is not JSON, which the Receiver's filters read"
        ) from None
