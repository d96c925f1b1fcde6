"""Receiver CEL filters: `spec.resourceFilter` and `spec.resources[].filter`.

Flux's semantics: when a webhook is accepted, each resource the Receiver
names (each object a wildcard lists) is annotated only if the filters say
so. An expression reads the object as `res` and the request body, parsed as
JSON, as `req`; `resourceFilter` applies to every resource and a resource's
own `filter` is ANDed with it. An expression that does not compile is the
spec's fault (the Receiver stalls naming it, before it gets a path); one
that cannot be evaluated for a request, or gives something other than a
bool, fails that resource's action naming the expression, never quietly
annotating it.

The body and the filters are the tenant's, so both are bounded: a filtered
Receiver's body is at most `MAX_FILTERED_BODY` bytes (413 past it), and every
evaluation of one request shares one cost budget (`sluice_runtime.evaluating`),
spent in the CEL threads, never on the event loop: past it the action fails
naming the budget, and other Receivers are served meanwhile.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice_api.notification import Receiver
from sluice_runtime import evaluating

MAX_FILTERED_BODY = 64 * 1024
"""Bytes of a body the filters read: push events of GitHub, GitLab and
registries are a few kB; the CEL values made of it cost memory in proportion."""


class InvalidFilter(ValueError):
    """A filter that does not compile; the message names its field."""


class FilterFailed(ValueError):
    """A filter that cannot decide for this object and request; the message names it."""


@dataclass(frozen=True, slots=True)
class _Compiled:
    field: str
    program: evaluating.Program


def _compile(field: str, source: str) -> _Compiled:
    try:
        return _Compiled(field, evaluating.compile_expression(source))
    except evaluating.InvalidExpression as error:
        raise InvalidFilter(f"{field}: invalid CEL expression {source!r}: {error}") from None


@dataclass(frozen=True, slots=True)
class Filters:
    """The compiled filters of one Receiver: the shared one and one per resource."""

    shared: _Compiled | None
    per_resource: tuple[_Compiled | None, ...]

    def __bool__(self) -> bool:
        return self.shared is not None or any(f is not None for f in self.per_resource)

    async def allows(
        self, index: int, res: Mapping[str, Any], *, req: Any, budget: evaluating.Budget
    ) -> bool:
        """Whether resource `index` of the Receiver may be acted on for object `res`
        and request body `req`, evaluated off the loop within `budget` (the
        request's); raises FilterFailed naming the expression."""
        return await evaluating.off_loop(lambda: self._allows(index, res, req, budget))

    def _allows(
        self, index: int, res: Mapping[str, Any], req: Any, budget: evaluating.Budget
    ) -> bool:
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
            source = compiled.program.source
            try:
                value = compiled.program.evaluate(activation, budget=budget)
            except evaluating.BudgetExceeded as error:
                raise FilterFailed(f"{compiled.field} {source!r}: {error}") from None
            except (CELEvalError, TypeError, ValueError, LookupError, ArithmeticError) as error:
                # celpy raises Python's own errors for some programs over the wrong
                # types (`2.5.map(x, x)`): as much "cannot be evaluated" as its own.
                reason = str(error.args[0]) if error.args else str(error)
                raise FilterFailed(
                    f"{compiled.field} {source!r} cannot be evaluated: {reason[:200]}"
                ) from None
            if not isinstance(value, celtypes.BoolType):
                raise FilterFailed(
                    f"{compiled.field} {source!r} gave {type(value).__name__}, not a bool"
                )
            if not value:
                return False
        return True


def compile_filters(receiver: Receiver) -> Filters:
    """The Receiver's filters; raises InvalidFilter naming the field of a bad one."""
    spec = receiver.spec
    shared = _compile("spec.resourceFilter", spec.resource_filter) if spec.resource_filter else None
    per_resource = tuple(
        _compile(f"spec.resources[{i}].filter", r.filter) if r.filter else None
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
