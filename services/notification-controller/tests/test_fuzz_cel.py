"""Fuzz of the CEL a tenant writes, over the data a tenant sends: Receiver
filters over webhook bodies (filtering.request_of, compile_filters, allows)
and healthCheckExprs over objects (kube.expressions.HealthRules).

Expressions are generated from the operators, macros and functions Flux's
examples use, over `req`, `res` and an object's fields; bodies are JSON,
not-JSON and deep JSON. A filter compiles or is refused with InvalidFilter,
evaluates to a decision or FilterFailed; a health rule compiles or is
refused with InvalidExpression and gives a Health. Nothing else escapes,
and work and memory stay bounded: expressions nest at most one
comprehension, so their cost is bounded by their size times the body's.

On main CEL has no cost budget of its own (issue 32 item 4 is adding one):
to fuzz it, add nested comprehensions to `macros` and the budget's error to
REFUSALS, and assert it is hit.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from notification_controller.filtering import (
    FilterFailed,
    InvalidFilter,
    compile_filters,
    request_of,
)
from sluice_api.notification import Receiver
from sluice_envtest.fuzzing import bounded, examples
from sluice_runtime import evaluating
from sluice_runtime.kube.expressions import HealthCheckExpr, HealthRules, InvalidExpression

REFUSALS: tuple[type[Exception], ...] = (InvalidFilter, FilterFailed)
MAX_CALLS = 2_000_000
MAX_PEAK = 32 << 20  # celpy's evaluation errors carry copies of what they saw

values = st.sampled_from([
    "req", "res", "req.ref", "req.action", "req.items", "res.metadata.name", "res.kind",
    "res.metadata.labels", "'refs/heads/main'", "1", "2.5", "true", "null", "[1, 2]", "{'a': 1}",
    "b'x'", "\"\\u00e9\"", "size(req)", "req.?missing", "status", "status.conditions", "metadata",
])  # fmt: skip
binary = st.sampled_from(["==", "!=", "<", ">=", "&&", "||", "+", "-", "*", "/", "%", "in"])
macros = st.sampled_from([
    "{v}.exists(x, x == {w})", "{v}.all(x, x != {w})", "{v}.map(x, x)", "{v}.filter(x, true)",
    "has({v}.a)", "{v}.startsWith({w})", "{v}.matches({w})", "size({v})", "string({v})",
    "int({v})", "!{v}", "-{v}", "{v} ? {w} : {v}", "{v}[0]", "{v}[{w}]", "type({v})",
])  # fmt: skip


@st.composite
def expressions(draw: st.DrawFn, depth: int = 2) -> str:
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        return draw(values)
    if draw(st.booleans()):
        return f"({draw(expressions(depth - 1))} {draw(binary)} {draw(expressions(depth - 1))})"
    macro = draw(macros)
    # One comprehension at most: a comprehension's body holds none (see the docstring).
    inner = draw(values) if "(x," in macro else draw(expressions(depth - 1))
    return macro.format(v=draw(values), w=inner)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["ref", "action", "items", "a"]), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip
bodies = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=32),
    st.sampled_from([b"", b"{", b"\xff", b"[" * 3000 + b"]" * 3000, b'{"ref": "refs/heads/main"}']),
)
RES = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
       "metadata": {"name": "app", "namespace": "ns", "labels": {"a": "b"}}}  # fmt: skip


# celpy and its grammar load with the first compile: not the fuzzed parse's allocation.
HealthRules([HealthCheckExpr("v1", "Kind", current="true")])


def receiver(expression: str) -> Receiver:
    return Receiver.from_obj({
        "metadata": {"name": "r", "namespace": "ns"},
        "spec": {"type": "generic", "secretRef": {"name": "s"}, "resourceFilter": expression,
                 "resources": [{"kind": "GitRepository", "name": "app", "filter": expression}]},
    })  # fmt: skip


@examples(ci=250)
@given(expression=expressions(), body=bodies)
@example(expression="req.ref == 'refs/heads/main'", body=b'{"ref": "refs/heads/main"}')
@example(expression="req.items.exists(x, x == 1)", body=b"[" * 3000 + b"]" * 3000)
@example(expression="req", body=b"9223372036854775808")
@example(expression="2.5.map(x, x)", body=b"{}")
def test_a_receiver_filter_decides_or_is_refused(expression: str, body: bytes) -> None:
    with bounded(max_calls=MAX_CALLS) as spent:
        try:
            filters = compile_filters(receiver(expression))
            # The evaluation itself (`allows` runs this off the loop), within one budget.
            allowed: bool | None = filters._allows(0, RES, request_of(body), evaluating.Budget())
            refusal = ""
        except REFUSALS as error:
            allowed, refusal = None, str(error)
    assert spent.peak_bytes < MAX_PEAK, f"{spent.peak_bytes} bytes at the peak"
    assert allowed in (True, False) or refusal


OBJECT: dict[str, Any] = {
    **RES,
    "status": {"conditions": [{"type": "Ready", "status": "True"}], "observedGeneration": 1},
}


@examples(ci=150)
@given(current=expressions(), failed=st.one_of(st.none(), expressions()))
def test_a_health_check_expression_gives_a_health_or_is_refused(
    current: str, failed: str | None
) -> None:
    check = HealthCheckExpr(OBJECT["apiVersion"], OBJECT["kind"], current=current, failed=failed)
    with bounded(max_calls=MAX_CALLS) as spent:
        try:
            health = HealthRules([check]).status(OBJECT)
        except InvalidExpression as error:
            assert "healthCheckExprs" in str(error)  # noqa: PT017
            return
    assert spent.peak_bytes < MAX_PEAK
    assert health.status in ("InProgress", "Failed", "Current")
