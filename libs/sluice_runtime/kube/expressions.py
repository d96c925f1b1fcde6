"""Custom health checks: CEL expressions per apiVersion/kind (`healthCheckExprs`).

Flux's semantics: the generic rules come first (a deleted object is
Terminating; one whose controller has not observed its latest generation is
InProgress), then `inProgress`, `failed` and `current` are evaluated in that
order and the first that is true decides; when none is true the object is
InProgress. The object's top-level fields (`metadata`, `spec`, `status`,
`data`...) are the expressions' variables. An expression that cannot be
evaluated (a field the object does not have yet) is not a verdict: the object
stays InProgress with the evaluation error as its message, so the wait ends
by timeout naming it, as in Flux. An expression that spends its cost budget
(`sluice_runtime.evaluating`) is a verdict: the object Failed, naming the
budget, since no later reading of the same object costs less. Pure: compile
once per reconcile, evaluate per reading (`read_health` does it off the loop).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sluice_runtime import evaluating
from sluice_runtime.kube.kstatus import Health, compute_status, current, failed, in_progress


class InvalidExpression(ValueError):
    """An expression does not compile; the message names the check and the expression."""


@dataclass(frozen=True, slots=True)
class HealthCheckExpr:
    """One `healthCheckExprs` entry, as the API gives it."""

    api_version: str
    kind: str
    current: str
    in_progress: str | None = None
    failed: str | None = None


@dataclass(frozen=True, slots=True)
class _Compiled:
    field: str
    source: str
    program: evaluating.Program


# Evaluation order is Flux's: a still-progressing object is not judged failed or current.
_ORDER = (("inProgress", "InProgress"), ("failed", "Failed"), ("current", "Current"))


class HealthRules:
    """kstatus, except for kinds that have CEL health check expressions."""

    def __init__(self, checks: Iterable[HealthCheckExpr]) -> None:
        self._rules: dict[tuple[str, str], list[_Compiled]] = {}
        checks = list(checks)
        if not checks:
            return
        # celpy (with lark, pendulum and regex) costs about 7 MiB resident once
        # loaded, and most Kustomizations have no healthCheckExprs: it loads
        # with the first that has some (evaluating.compile_expression), not
        # with the process.
        for check in checks:
            compiled: list[_Compiled] = []
            sources = {"inProgress": check.in_progress, "failed": check.failed}
            sources["current"] = check.current
            for name, _status in _ORDER:
                source = sources[name]
                if not source:
                    continue
                try:
                    program = evaluating.compile_expression(source)
                except evaluating.InvalidExpression as error:
                    raise InvalidExpression(
                        f"healthCheckExprs {check.api_version}/{check.kind}: invalid {name} "
                        f"expression {source!r}: {error}"
                    ) from None
                compiled.append(_Compiled(name, source, program))
            self._rules[(check.api_version, check.kind)] = compiled

    def __bool__(self) -> bool:
        return bool(self._rules)

    def covers(self, api_version: str, kind: str) -> bool:
        return (api_version, kind) in self._rules

    def status(self, obj: Mapping[str, Any]) -> Health:
        """The object's health: its kind's expressions, else kstatus."""
        rule = self._rules.get((str(obj.get("apiVersion")), str(obj.get("kind"))))
        if rule is None:
            return compute_status(obj)
        # A rule exists, so __init__ has loaded celpy: these are lookups.
        from celpy import celtypes
        from celpy.adapter import json_to_cel
        from celpy.evaluation import CELEvalError

        kind = str(obj.get("kind"))
        generic = _generic(obj, kind)
        if generic is not None:
            return generic
        activation = {str(k): json_to_cel(v) for k, v in obj.items()}
        # One budget per reading: all of a kind's expressions together.
        budget = evaluating.Budget()
        for compiled in rule:
            try:
                value = compiled.program.evaluate(activation, budget=budget)
            except evaluating.BudgetExceeded as error:
                return failed(f"{kind} {compiled.field} expression {compiled.source!r}: {error}")
            except (CELEvalError, TypeError, ValueError, LookupError, ArithmeticError) as error:
                # celpy raises Python's own errors for some programs over the wrong
                # types (`2.5.map(x, x)`): as much "cannot be evaluated" as its own.
                return in_progress(
                    f"{kind} {compiled.field} expression {compiled.source!r} "
                    f"cannot be evaluated: {_first(error)}"
                )
            if not isinstance(value, celtypes.BoolType):
                return in_progress(
                    f"{kind} {compiled.field} expression {compiled.source!r} "
                    f"gave {type(value).__name__}, not a bool"
                )
            if value:
                return _VERDICT[compiled.field](
                    f"{kind} {compiled.field} expression {compiled.source!r} is true"
                )
        return in_progress(f"{kind} satisfies none of its health check expressions yet")


_VERDICT: dict[str, Callable[[str], Health]] = {
    "inProgress": in_progress,
    "failed": failed,
    "current": current,
}


def _generic(obj: Mapping[str, Any], kind: str) -> Health | None:
    metadata = obj.get("metadata") or {}
    if metadata.get("deletionTimestamp"):
        return Health("Terminating", f"{kind} is being deleted")
    generation = metadata.get("generation")
    observed = (obj.get("status") or {}).get("observedGeneration")
    if generation is not None and observed is not None and observed != generation:
        return in_progress(
            f"{kind} generation {generation}, observed {observed}: "
            "its controller has not acted on the latest spec yet"
        )
    return None


def _first(error: Exception) -> str:
    """The evaluation error's own words, without the activation celpy appends."""
    if error.args:
        return str(error.args[0])[:200]
    return str(error)[:200]
