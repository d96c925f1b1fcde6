"""Go's view of JSON-like Python values: type names, truth, and the 'no value' marker.

Data is what JSON decodes to (dict, list, str, int, float, bool, None). Go
sees a value read out of a map or a slice as an ``interface {}`` until a
pipeline ends, which shows in its error texts (``can't evaluate field x in
type interface {}``); ``Boxed`` marks those values. ``NO_VALUE`` is Go's
invalid reflect.Value: a missing map key under missingkey=default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class _NoValue:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<no value>"


NO_VALUE: Any = _NoValue()


@dataclass(frozen=True)
class Boxed:
    """A value seen through an ``interface {}``: an element of a map or a slice."""

    value: Any


class Int64(int):
    """An int64 result of a sprig function (Go prints it as it prints int)."""


class StrList(list[str]):
    """A []string result of a sprig function."""


class IntList(list[int]):
    """A []int result of a sprig function."""


class StrMap(dict[str, str]):
    """A map[string]string result of a sprig function (split, splitn)."""


def unbox(v: Any) -> Any:
    """Go's indirectInterface: the concrete value, None for a nil interface."""
    return v.value if isinstance(v, Boxed) else v


def type_name(v: Any) -> str:
    """Go's reflect type name of a value, as error messages show it."""
    if isinstance(v, Boxed):
        return "interface {}"
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, Int64):
        return "int64"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float64"
    if isinstance(v, str):
        return "string"
    if isinstance(v, StrList):
        return "[]string"
    if isinstance(v, IntList):
        return "[]int"
    if isinstance(v, list | tuple):
        return "[]interface {}"
    if isinstance(v, StrMap):
        return "map[string]string"
    if isinstance(v, dict):
        return "map[string]interface {}"
    if callable(v):
        return "func"
    return str(getattr(v, "go_type_name", type(v).__name__))


def kind(v: Any) -> str:
    """Go's reflect Kind name."""
    if v is NO_VALUE:
        return "invalid"
    if isinstance(v, Boxed):
        return "interface"
    if v is None:
        return "invalid"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, Int64):
        return "int64"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float64"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list | tuple):
        return "slice"
    if isinstance(v, dict):
        return "map"
    if callable(v):
        return "func"
    return "struct"


def is_true(v: Any) -> tuple[bool, bool]:
    """Go's template truth: (truth, ok); ok is False for values with no truth."""
    v = unbox(v)
    if v is NO_VALUE or v is None:
        return False, True
    if isinstance(v, bool):
        return v, True
    if isinstance(v, int | float):
        return v != 0, True
    if isinstance(v, str | list | tuple | dict):
        return len(v) > 0, True
    return True, True


def truth(v: Any) -> bool:
    return is_true(v)[0]
