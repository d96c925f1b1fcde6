"""CEL's cost budget: counted while the program runs, shared, and stoppable off the loop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from sluice_runtime import evaluating
from sluice_runtime.evaluating import Budget, BudgetExceeded, compile_expression

NESTED = "req.a.all(x, req.a.all(y, req.a.all(z, x + y + z >= 0)))"
"""Three nested comprehensions over a 100-element list: 10^6 iterations, about
50 s of cel-python's time unbounded (the Receiver attack of issue 32)."""


def activation(**values: Any) -> dict[str, Any]:
    from celpy.adapter import json_to_cel

    return {name: json_to_cel(value) for name, value in values.items()}


ATTACK = activation(req={"a": list(range(100))})


@pytest.mark.parametrize(
    ("source", "values", "expected", "most"),
    [
        pytest.param("1 + 2 == 3", {}, True, 40, id="arithmetic"),
        pytest.param("req.tag == 'v1'", {"req": {"tag": "v1"}}, True, 40, id="member"),
        pytest.param("req.a.exists(v, v == 3)", {"req": {"a": [1, 2, 3]}}, True, 100, id="exists"),
        pytest.param("'abc'.matches('b+')", {}, True, 40, id="re2-matches"),
    ],
)
def test_ordinary_expressions_cost_little(
    source: str, values: dict[str, Any], expected: Any, most: int
) -> None:
    budget = Budget()
    assert compile_expression(source).evaluate(activation(**values), budget=budget) == expected
    assert 0 < budget.spent <= most


def test_nested_comprehensions_stop_at_the_budget() -> None:
    budget = Budget(limit=50_000)
    with pytest.raises(BudgetExceeded) as raised:
        compile_expression(NESTED).evaluate(ATTACK, budget=budget)
    # Stopped on the step past the budget, not at the end of the work.
    assert raised.value.spent == budget.spent == 50_001
    assert str(raised.value) == (
        "CEL evaluation exceeded its cost budget of 50000 steps (spent 50001)"
    )


def test_the_default_budget_bounds_an_evaluation_given_none() -> None:
    with pytest.raises(BudgetExceeded) as raised:
        compile_expression(NESTED).evaluate(ATTACK)
    assert raised.value.limit == evaluating.DEFAULT_COST_LIMIT
    assert raised.value.spent == evaluating.DEFAULT_COST_LIMIT + 1


def test_a_shared_budget_bounds_the_sum_of_evaluations() -> None:
    program = compile_expression("req.a.all(x, x >= 0)")
    one = Budget()
    program.evaluate(ATTACK, budget=one)
    shared = Budget(limit=one.spent * 3 + one.spent // 2)
    for _ in range(3):
        program.evaluate(ATTACK, budget=shared)
    with pytest.raises(BudgetExceeded):
        program.evaluate(ATTACK, budget=shared)


@pytest.mark.parametrize(
    ("source", "values"),
    [
        # Each step makes a string twice as long: the budget charges its size.
        pytest.param(
            "req.a.map(x, req.s + req.s + req.s + req.s).size() > 0",
            {"req": {"a": list(range(200)), "s": "x" * 20_000}},
            id="string-growth",
        ),
        pytest.param(
            "req.a.map(x, req.a.map(y, req.a)).size() > 0",
            {"req": {"a": list(range(100))}},
            id="list-growth",
        ),
    ],
)
def test_what_a_program_allocates_is_charged(source: str, values: dict[str, Any]) -> None:
    budget = Budget()
    with pytest.raises(BudgetExceeded):
        compile_expression(source).evaluate(activation(**values), budget=budget)


@pytest.mark.parametrize(
    ("value", "cost"),
    [
        pytest.param(1, 0, id="int"),
        pytest.param("x" * 160, 10, id="string"),
        pytest.param(b"x" * 32, 2, id="bytes"),
        pytest.param([1, 2, 3], 3, id="list"),
        pytest.param({"a": 1}, 1, id="map"),
    ],
)
def test_value_cost(value: object, cost: int) -> None:
    assert evaluating.value_cost(value) == cost


async def test_off_loop_runs_in_the_cel_threads() -> None:
    names: list[str] = []

    def call() -> Any:
        names.append(threading.current_thread().name)
        return compile_expression("1 == 1").evaluate({})

    assert await evaluating.off_loop(call)
    assert names[0].startswith("cel")


async def test_off_loop_stops_an_evaluation_whose_time_ran_out() -> None:
    program = compile_expression(NESTED)
    budget = Budget(limit=10**9)
    with pytest.raises(BudgetExceeded) as raised:
        await evaluating.off_loop(lambda: program.evaluate(ATTACK, budget=budget), timeout=0)
    assert raised.value.stopped
    assert "its time ran out" in str(raised.value)
    # The thread stopped too: it spends nothing more.
    spent = budget.spent
    await asyncio.sleep(0.05)
    assert budget.spent == spent
