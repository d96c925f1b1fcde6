"""CEL evaluation with a cost budget, off the event loop, with a timeout.

Every CEL expression Sluice evaluates (Receiver filters, `healthCheckExprs`,
`commitStatusExpr`, ResourceSet `readyExpr`) is tenant input over tenant data
(a webhook body, an object the tenant applied): nested comprehensions over a
400-byte body grow polynomially, and cel-python interprets them at a few
microseconds per tree node. cel-go bounds the same risk with a cost limit
counted while the program runs; this module does that for cel-python.

- Cost: each node the interpreter visits costs one step (a comprehension
  visits its body once per element, so its iterations are counted), and a
  value it produces costs its size on top (a list or map one step per
  element, a string or bytes one per 16 bytes): work and the memory a
  program can allocate are both bounded by the budget. One `Budget` may be
  shared by several evaluations (all the filters one webhook runs) so a
  request's total is bounded, not each call's.
- Past the budget the evaluation stops at once with `BudgetExceeded`, which
  says how many steps were spent, what the budget is, and is not a
  `CELEvalError`: callers report it as such rather than as "not yet".
- `off_loop` runs an evaluation in a small pool of threads of its own (the
  default executor's file I/O is never queued behind CEL) and stops it at
  its next step when the timeout passes: the thread does not run on.

celpy (with lark) costs about 7 MiB resident once imported and most objects
have no expressions: it is imported with the first `compile`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import celpy
    import lark

DEFAULT_COST_LIMIT = 100_000
"""Steps one evaluation (or one shared Budget) may spend. Real filters and
health checks spend tens to a few hundred; 100k is well under a second of
cel-python's time on one core."""

DEFAULT_TIMEOUT = 10.0
"""Seconds an `off_loop` evaluation may take before it is stopped; the budget
ends it much sooner on any machine that is not starved."""

WORKERS = 2
"""Threads evaluating CEL at once, per process; more work waits its turn."""

_STRING_UNIT = 16
"""Bytes of a string or bytes value that cost one step."""

T = TypeVar("T")


class BudgetExceeded(Exception):
    """An evaluation spent its budget; the message says how much."""

    def __init__(self, spent: int, limit: int, *, stopped: bool = False) -> None:
        self.spent = spent
        self.limit = limit
        self.stopped = stopped
        what = (
            f"stopped after {spent} steps: its time ran out"
            if stopped
            else f"exceeded its cost budget of {limit} steps (spent {spent})"
        )
        super().__init__(f"CEL evaluation {what}")


class Budget:
    """Steps left for one evaluation or several that share it (thread-safe enough:
    one evaluation runs in one thread at a time)."""

    __slots__ = ("limit", "spent")

    def __init__(self, limit: int = DEFAULT_COST_LIMIT) -> None:
        self.limit = limit
        self.spent = 0

    def charge(self, cost: int) -> None:
        self.spent += cost
        if self.spent > self.limit:
            raise BudgetExceeded(self.spent, self.limit)


_stop: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "sluice_cel_stop", default=None
)
"""Set by `off_loop` for the evaluations it runs: their stop signal."""


def value_cost(value: object) -> int:
    """What producing `value` costs beyond the step that produced it. Pure."""
    if isinstance(value, str | bytes):
        return len(value) // _STRING_UNIT
    if isinstance(value, list | dict):
        return len(value)
    return 0


class Program:
    """One compiled expression; `evaluate` runs it within a budget."""

    def __init__(self, source: str, runner: celpy.Runner) -> None:
        self.source = source
        self._runner = runner

    def evaluate(self, activation: Mapping[str, Any], *, budget: Budget | None = None) -> Any:
        """The expression's value; raises `celpy.evaluation.CELEvalError` when it
        cannot be evaluated and `BudgetExceeded` past `budget` (a fresh default
        one when not given)."""
        evaluator = _evaluator_class()(
            ast=self._runner.ast,
            activation=self._runner.new_activation(),
            budget=budget if budget is not None else Budget(),
            stop=_stop.get(),
        )
        return evaluator.evaluate(dict(activation))


class InvalidExpression(ValueError):
    """A CEL expression that does not parse; the message is the parser's first line."""


def compile_expression(source: str) -> Program:
    """`source` compiled; raises InvalidExpression with the parser's first line."""
    import celpy
    from celpy.celparser import CELParseError

    env = celpy.Environment()
    try:
        return Program(source, env.program(env.compile(source)))
    except CELParseError as error:
        first = str(error).splitlines()[0] if str(error) else "syntax error"
        raise InvalidExpression(first) from None


async def off_loop(call: Callable[[], T], *, timeout: float = DEFAULT_TIMEOUT) -> T:
    """`call()` (which evaluates CEL) in the CEL threads; past `timeout` its
    evaluation is stopped at its next step and BudgetExceeded(stopped=True) raised."""
    stop = threading.Event()
    context = contextvars.copy_context()
    context.run(_stop.set, stop)
    future = asyncio.get_running_loop().run_in_executor(_pool(), context.run, call)
    try:
        return await asyncio.wait_for(asyncio.shield(future), timeout)
    except TimeoutError:
        stop.set()
        try:
            # Finished in the meantime, it stands; else it stops at its next step.
            return await future
        except BudgetExceeded as error:
            raise BudgetExceeded(error.spent, error.limit, stopped=True) from None
    except asyncio.CancelledError:
        stop.set()
        raise


@functools.cache
def _pool() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="cel")


@functools.cache
def _evaluator_class() -> type[Any]:
    """celpy's Evaluator, counting each node it visits against a Budget.

    Built on first use so importing this module does not import celpy. Every
    node goes through lark's `Interpreter._visit_tree` (from `visit` and from
    `visit_children`), and macros evaluate their bodies through
    `sub_evaluator`, which is given the same budget: nothing escapes the count.
    """
    from celpy.evaluation import Evaluator

    class BudgetedEvaluator(Evaluator):
        def __init__(
            self,
            ast: lark.Tree[Any],
            activation: Any,
            *,
            budget: Budget,
            stop: threading.Event | None,
        ) -> None:
            super().__init__(ast=ast, activation=activation)
            self.budget = budget
            self.stop = stop

        def sub_evaluator(self, ast: lark.Tree[Any]) -> BudgetedEvaluator:
            return BudgetedEvaluator(
                ast, activation=self.activation, budget=self.budget, stop=self.stop
            )

        def _visit_tree(self, tree: lark.Tree[Any]) -> Any:
            budget = self.budget
            budget.charge(1)
            if self.stop is not None and self.stop.is_set():
                raise BudgetExceeded(budget.spent, budget.limit, stopped=True)
            value = super()._visit_tree(tree)
            cost = value_cost(value)
            if cost:
                budget.charge(cost)
            return value

    return BudgetedEvaluator
