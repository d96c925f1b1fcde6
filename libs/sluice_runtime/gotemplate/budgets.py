"""What one render may spend: steps of execution and bytes of what it builds and writes.

Go's text/template allocates what a template asks for: `repeat 1000000000`,
`until 1000000000`, `printf "%999999999d"`, a string doubled in a `range`,
or a list of lists that serialises to gigabytes. A ResourceSet's template
is a tenant's, so a render gets a `Budget` and spends it as it goes:

- a step for each node executed, each range iteration and each call, one
  more for every READ_BYTES_PER_STEP bytes of a call's string arguments
  (and READ_ELEMENTS_PER_STEP elements of its lists and maps: a call's own
  work grows with what it reads), and for each pair of values a comparison
  visits (`deepEqual`, `uniq`, `has`,
  `without`: quadratic in a list, exponential in a value whose parts are
  shared, and one call each);
- bytes for each piece of text written to the output, and for each value a
  function returns (a string's length, ELEMENT_BYTES per element of a list
  or map), all of them added up over the render, so a value doubled in a
  loop stops near the budget rather than past memory;
- before a function that makes far more than it is given (`repeat`, `until`,
  `untilStep`, `seq`, `indent`, `replace`, `join`, a `printf` width, the
  serialisers walking a value whose parts are shared), the bytes it is
  about to make, so nothing large is built only to be refused.

Running over either budget is an ExecError that names it and where the
template was. A budget spans every render of one ResourceSet (its input
sets times its templates), so many small renders add up as one large one.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

from sluice_runtime.gotemplate.values import Boxed

MiB = 1 << 20
ELEMENT_BYTES = 64
"""What an element of a list or map costs the process, about, once built."""


class BudgetExceeded(Exception):
    """A render ran over its Budget; the evaluator adds where (ExecError).

    Not a FuncError: the quiet functions (`toJson`) turn those into an empty result."""


DEFAULT_MAX_STEPS = 500_000


class Budget:
    def __init__(self, *, max_steps: int = DEFAULT_MAX_STEPS, max_bytes: int = 16 * MiB) -> None:
        self.max_steps = max_steps
        self.max_bytes = max_bytes
        self.steps = 0
        self.bytes = 0

    def step(self, count: int = 1) -> None:
        self.steps += count
        if self.steps > self.max_steps:
            raise BudgetExceeded(
                f"the template ran more than {self.max_steps} steps (the step budget)"
            )

    def spend(self, size: int) -> None:
        self.bytes += size
        if self.bytes > self.max_bytes:
            raise BudgetExceeded(
                f"the template made more than {self.max_bytes} bytes of text and values "
                "(the size budget)"
            )

    def spend_deep(self, value: Any) -> None:
        """Spend what serialising `value` makes, walking it no further than the budget left.

        The walk counts shared parts each time they appear, as a serialiser writes them.
        """
        left = self.max_bytes - self.bytes
        total = 0
        stack = [value]
        while stack:
            v = stack.pop()
            if isinstance(v, Boxed):
                v = v.value
            if isinstance(v, str):
                total += len(v)
            elif isinstance(v, dict):
                total += ELEMENT_BYTES * len(v)
                stack.extend(v.keys())
                stack.extend(v.values())
            elif isinstance(v, list | tuple):
                total += ELEMENT_BYTES * len(v)
                stack.extend(v)
            else:
                total += 8
            if total > left:
                break
        self.spend(total)


_CURRENT: contextvars.ContextVar[Budget | None] = contextvars.ContextVar(
    "sluice_template_budget", default=None
)


@contextlib.contextmanager
def spending(budget: Budget) -> Iterator[None]:
    """Make `budget` the one the running render's functions spend from."""
    token = _CURRENT.set(budget)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current() -> Budget | None:
    return _CURRENT.get()


def step() -> None:
    """Spend a step of the running render's budget, if any (a function's inner loop)."""
    budget = _CURRENT.get()
    if budget is not None:
        budget.step()


def spend(size: int) -> None:
    """Spend from the running render's budget, if any (a function about to allocate)."""
    budget = _CURRENT.get()
    if budget is not None:
        budget.spend(size)


def spend_deep(value: Any) -> None:
    budget = _CURRENT.get()
    if budget is not None:
        budget.spend_deep(value)


READ_BYTES_PER_STEP = 64
"""A function reads its arguments: a string of this many bytes costs a step more (a
`regexMatch` over a 4 kB literal in a `range` otherwise ran 5 s on 500,000 steps)."""
READ_ELEMENTS_PER_STEP = 8


def read_cost(args: list[Any]) -> int:
    """The steps a function call costs for reading its arguments, shallowly: strings by
    their length, lists and maps by their elements (whose parts were paid for when made)."""
    cost = 0
    for value in args:
        if isinstance(value, Boxed):
            value = value.value
        if isinstance(value, str | bytes):
            cost += len(value) // READ_BYTES_PER_STEP
        elif isinstance(value, list | tuple | dict):
            cost += len(value) // READ_ELEMENTS_PER_STEP
    return cost


def size_of(value: Any) -> int:
    """What a function's result costs, shallowly (its parts were paid for when made)."""
    if isinstance(value, Boxed):
        value = value.value
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, list | tuple | dict):
        return ELEMENT_BYTES * len(value)
    return 0
