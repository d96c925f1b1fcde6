"""Go's predefined template functions (and, or, not, len, index, slice, print..., eq...)."""

from __future__ import annotations

import urllib.parse
from typing import Any

from sluice_runtime.gotemplate.errors import FuncError
from sluice_runtime.gotemplate.formatting import sprint, sprintf, sprintln
from sluice_runtime.gotemplate.functions import ANY, VALUE, GoFunc
from sluice_runtime.gotemplate.values import NO_VALUE, Boxed, StrMap, is_true, type_name, unbox


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "string"
    return "invalid"


def _not(v: Any) -> bool:
    return not is_true(v)[0]


def _len(v: Any) -> int:
    if v is NO_VALUE or v is None:
        raise FuncError("reflect: call of reflect.Value.Type on zero Value")
    if isinstance(v, Boxed) and v.value is None:
        raise FuncError("len of nil pointer")
    v = unbox(v)
    if isinstance(v, str):
        return len(v.encode())
    if isinstance(v, list | tuple | dict):
        return len(v)
    raise FuncError(f"len of type {type_name(v)}")


def _index_arg(index: Any, cap: int) -> int:
    if index is NO_VALUE or index is None:
        raise FuncError("cannot index slice/array with nil")
    if isinstance(index, bool) or not isinstance(index, int):
        raise FuncError(f"cannot index slice/array with type {type_name(index)}")
    if index < 0 or index > cap:
        raise FuncError(f"index out of range: {index}")
    return index


def _index(item: Any, *indexes: Any) -> Any:
    item = unbox(item)
    if item is NO_VALUE or item is None:
        raise FuncError("index of untyped nil")
    for raw in indexes:
        index = unbox(raw)
        if isinstance(item, Boxed):
            if item.value is None:
                raise FuncError("index of nil pointer")
            item = item.value
        if isinstance(item, str):
            data = item.encode()
            x = _index_arg(index, len(data))
            if x == len(data):
                raise FuncError("reflect: string index out of range")
            item = data[x]
        elif isinstance(item, list | tuple):
            x = _index_arg(index, len(item))
            if x == len(item):
                raise FuncError("reflect: slice index out of range")
            item = Boxed(item[x])
        elif isinstance(item, dict):
            if index is NO_VALUE or index is None:
                raise FuncError("value is nil; should be of type string")
            if not isinstance(index, str):
                raise FuncError(f"value has type {type_name(index)}; should be string")
            # A missing key gives the map's zero element: "" in a map[string]string.
            item = Boxed(item.get(index, "" if isinstance(item, StrMap) else None))
        else:
            raise FuncError(f"can't index item of type {type_name(item)}")
    return item


def _slice(item: Any, *indexes: Any) -> Any:
    item = unbox(item)
    if item is NO_VALUE or item is None:
        raise FuncError("slice of untyped nil")
    if len(indexes) > 3:
        raise FuncError(f"too many slice indexes: {len(indexes)}")
    if isinstance(item, str):
        if len(indexes) == 3:
            raise FuncError("cannot 3-index slice a string")
        data: Any = item.encode()
    elif isinstance(item, list | tuple):
        data = item
    else:
        raise FuncError(f"can't slice item of type {type_name(item)}")
    idx = [0, len(data), len(data)]
    for i, index in enumerate(indexes):
        idx[i] = _index_arg(unbox(index), len(data))
    if idx[0] > idx[1]:
        raise FuncError(f"invalid slice index: {idx[0]} > {idx[1]}")
    if len(indexes) == 3 and idx[1] > idx[2]:
        raise FuncError(f"invalid slice index: {idx[1]} > {idx[2]}")
    part = data[idx[0] : idx[1]]
    return part.decode("utf-8", "replace") if isinstance(part, bytes) else list(part)


def _basic(v: Any) -> Any:
    v = unbox(v)
    return None if v is NO_VALUE else v


def _eq(a: Any, *others: Any) -> bool:
    a = _basic(a)
    if not others:
        raise FuncError("missing argument for comparison")
    k1 = _kind(a)
    for raw in others:
        b = _basic(raw)
        k2 = _kind(b)
        if k1 != k2:
            if (a is not None) and (b is not None):
                raise FuncError("incompatible types for comparison")
            truth = a is None and b is None
        elif k1 == "invalid":
            if a is None or b is None:
                truth = a is None and b is None
            else:
                raise FuncError(f"non-comparable type {sprintf('%s', b)}: {type_name(b)}")
        else:
            truth = a == b
        if truth:
            return True
    return False


def _ne(a: Any, b: Any) -> bool:
    return not _eq(a, b)


def _lt(a: Any, b: Any) -> bool:
    a, b = _basic(a), _basic(b)
    k1, k2 = _kind(a), _kind(b)
    if k1 == "invalid" or k2 == "invalid":
        raise FuncError("invalid type for comparison")
    if k1 != k2:
        raise FuncError("incompatible types for comparison")
    if k1 == "bool":
        raise FuncError("invalid type for comparison")
    if k1 == "string":
        return bool(a.encode() < b.encode())
    return bool(a < b)


def _le(a: Any, b: Any) -> bool:
    return _lt(a, b) or _eq(a, b)


def _gt(a: Any, b: Any) -> bool:
    return not _le(a, b)


def _ge(a: Any, b: Any) -> bool:
    return not _lt(a, b)


def _eval_args(args: tuple[Any, ...]) -> str:
    if len(args) == 1 and isinstance(args[0], str):
        return args[0]
    # Go's evalArgs turns a nil argument into the string "<no value>" before fmt.Sprint.
    return sprint(*("<no value>" if unbox(a) in (None, NO_VALUE) else a for a in args))


def _html_escape(*args: Any) -> str:
    s = _eval_args(args)
    table = {'"': "&#34;", "'": "&#39;", "&": "&amp;", "<": "&lt;", ">": "&gt;", "\0": "\ufffd"}
    return "".join(table.get(c, c) for c in s)


def _js_escape(*args: Any) -> str:
    s = _eval_args(args)
    out: list[str] = []
    for c in s:
        if c == "\\":
            out.append("\\\\")
        elif c == "'":
            out.append("\\'")
        elif c == '"':
            out.append('\\"')
        elif c == "<":
            out.append("\\u003C")
        elif c == ">":
            out.append("\\u003E")
        elif c == "&":
            out.append("\\u0026")
        elif c == "=":
            out.append("\\u003D")
        elif ord(c) < 0x20 or (not c.isprintable() and ord(c) < 0x80):
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return "".join(out)


def _urlquery(*args: Any) -> str:
    return urllib.parse.quote_plus(_eval_args(args), safe="-_.~")


def _call(fn: Any, *args: Any) -> Any:
    fn = unbox(fn)
    if fn is NO_VALUE or fn is None:
        raise FuncError("call of nil")
    if not callable(fn):
        raise FuncError(f"non-function of type {type_name(fn)}")
    return fn(*[unbox(a) for a in args])


BUILTINS: dict[str, GoFunc] = {
    "and": GoFunc(None, (VALUE, VALUE), variadic=True),  # type: ignore[arg-type]
    "or": GoFunc(None, (VALUE, VALUE), variadic=True),  # type: ignore[arg-type]
    "not": GoFunc(_not, (VALUE,)),
    "len": GoFunc(_len, (VALUE,)),
    "index": GoFunc(_index, (VALUE, VALUE), variadic=True),
    "slice": GoFunc(_slice, (VALUE, VALUE), variadic=True),
    "print": GoFunc(sprint, (ANY,), variadic=True),
    "printf": GoFunc(sprintf, ("string", ANY), variadic=True),
    "println": GoFunc(sprintln, (ANY,), variadic=True),
    "eq": GoFunc(_eq, (VALUE, VALUE), variadic=True),
    "ne": GoFunc(_ne, (VALUE, VALUE)),
    "lt": GoFunc(_lt, (VALUE, VALUE)),
    "le": GoFunc(_le, (VALUE, VALUE)),
    "gt": GoFunc(_gt, (VALUE, VALUE)),
    "ge": GoFunc(_ge, (VALUE, VALUE)),
    "html": GoFunc(_html_escape, (ANY,), variadic=True),
    "js": GoFunc(_js_escape, (ANY,), variadic=True),
    "urlquery": GoFunc(_urlquery, (ANY,), variadic=True),
    "call": GoFunc(_call, (VALUE, VALUE), variadic=True, boxed_result=True),
}
